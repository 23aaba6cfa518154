package records

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// TestRecords: Update makes a record and keeps what it wrote, Lookup makes
// none, and Release drops it.
func TestRecords(t *testing.T) {
	var r Records[int]
	key := types.NamespacedName{Namespace: "ns", Name: "db"}
	if r.Lookup(key, func(*int) { t.Error("Lookup ran on no record") }) || r.Len() != 0 {
		t.Fatal("Lookup made a record")
	}
	r.Update(key, func(n *int) { *n = 3 })
	var got int
	if !r.Lookup(key, func(n *int) { got = *n }) || got != 3 || r.Len() != 1 {
		t.Fatalf("after Update: %d, %d record(s); want 3 in one", got, r.Len())
	}
	r.Release(key)
	if r.Lookup(key, func(*int) {}) || r.Len() != 0 {
		t.Error("Release left the record")
	}
}
