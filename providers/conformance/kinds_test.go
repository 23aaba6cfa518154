package conformance

import (
	"slices"
	"testing"

	"github.com/backendslice/backendslice/providers/aws"
	"github.com/backendslice/backendslice/providers/static"
)

// TestSourceOfEveryKind: the kind check finds a source for every kind of
// a table, and only that kind's row claims it.
func TestSourceOfEveryKind(t *testing.T) {
	ks := slices.Concat(static.Kinds(), aws.Kinds())
	for _, row := range ks {
		src := sourceOfKind(ks, row.Kind)
		if got := ks.KindOf(src); got != row.Kind {
			t.Errorf("sourceOfKind(%s) = %+v, of kind %q", row.Kind, src, got)
		}
	}
	if src := sourceOfKind(ks, "nothing"); ks.Of(src) != nil {
		t.Errorf("sourceOfKind of a kind the table lacks = %+v, claimed by %s", src, ks.KindOf(src))
	}
}
