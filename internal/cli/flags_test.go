package cli

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestDeniedDefaultsAlwaysApply: whatever --denied-cidrs and --denied-names
// say (a list of the cluster's own ranges, or an empty one), the cloud
// metadata addresses and names stay denied; only
// --unsafe-allow-default-denied, naming each entry, removes one.
func TestDeniedDefaultsAlwaysApply(t *testing.T) {
	metadata := []string{"fd00:ec2::254/128", "100.100.100.200/32"}
	metadataNames := []string{"metadata.google.internal", "metadata.goog"}
	cases := []struct {
		name      string
		args      []string
		wantCIDRs []string
		wantNames []string
		err       string
	}{
		{name: "no flags", wantCIDRs: metadata, wantNames: metadataNames},
		{name: "the cluster's ranges are added", args: []string{"--denied-cidrs=10.0.0.0/16", "--denied-names=*.corp.example"},
			wantCIDRs: append(slices.Clone(metadata), "10.0.0.0/16"), wantNames: append(slices.Clone(metadataNames), "*.corp.example")},
		{name: "empty lists keep the defaults", args: []string{"--denied-cidrs=", "--denied-names="}, wantCIDRs: metadata, wantNames: metadataNames},
		{name: "one default removed by name", args: []string{"--unsafe-allow-default-denied=100.100.100.200/32,metadata.goog"},
			wantCIDRs: []string{"fd00:ec2::254/128"}, wantNames: []string{"metadata.google.internal"}},
		{name: "only built-in entries can be removed", args: []string{"--unsafe-allow-default-denied=169.254.169.254/32"},
			err: `--unsafe-allow-default-denied: "169.254.169.254/32" is not a built-in denied entry`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var f ControllerFlags
			fs := pflag.NewFlagSet("controller", pflag.ContinueOnError)
			f.Bind(fs)
			if err := fs.Parse(c.args); err != nil {
				t.Fatal(err)
			}
			opts, err := f.ManagerOptions()
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("got %v, want an error containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var want []netip.Prefix
			for _, s := range c.wantCIDRs {
				want = append(want, netip.MustParsePrefix(s))
			}
			if !slices.Equal(opts.Config.DeniedPrefixes, want) {
				t.Errorf("denied networks %v, want %v", opts.Config.DeniedPrefixes, want)
			}
			if !slices.Equal(opts.Config.DeniedNames, c.wantNames) {
				t.Errorf("denied names %v, want %v", opts.Config.DeniedNames, c.wantNames)
			}
		})
	}
}
