package cli

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/backendslice/backendslice/providers"
)

// TestKindsNameTheirFlags checks the flags the table of kinds documents:
// each provider kind's FlagPrefix names flags the controller binds, and
// every flag of a prefix belongs to a kind of the table.
func TestKindsNameTheirFlags(t *testing.T) {
	fs := pflag.NewFlagSet("controller", pflag.ContinueOnError)
	var f ControllerFlags
	f.Bind(fs)
	bound := map[string][]string{}
	for _, k := range providers.BuiltinKinds() {
		if p := k.Provider.FlagPrefix; p != "" {
			bound[p] = nil
		}
	}
	fs.VisitAll(func(fl *pflag.Flag) {
		for p := range bound {
			if strings.HasPrefix(fl.Name, p) {
				bound[p] = append(bound[p], fl.Name)
			}
		}
	})
	for p, names := range bound {
		if len(names) == 0 {
			t.Errorf("the table names flags --%s*, but the controller binds none", p)
		}
	}
	if len(bound) != 3 {
		t.Errorf("flag prefixes %v, want one each for dns, consul and aws", bound)
	}
}
