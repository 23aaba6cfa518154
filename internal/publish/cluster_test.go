package publish

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// TestNormalizeClusterNetworks: an address of the cluster's own (a
// Node's, the API server's, in a Service range) is dropped naming whose it
// is, in every spelling that reaches it; its neighbours are published.
func TestNormalizeClusterNetworks(t *testing.T) {
	const node = "Node n1's InternalIP address (its kubelet listens there)"
	const apiServer = "an address of the API server (EndpointSlice default/kubernetes)"
	cluster := ClusterNetworks{
		Ranges: []ClusterRange{{Prefix: netip.MustParsePrefix("10.96.0.0/24"), Of: "ServiceCIDR kubernetes"}},
		Hosts: map[netip.Addr]string{
			netip.MustParseAddr("192.0.2.21"):    node,
			netip.MustParseAddr("2001:db8::21"):  "Node n1's ExternalIP address (its kubelet listens there)",
			netip.MustParseAddr("198.51.100.44"): apiServer,
		},
	}
	cases := []struct {
		addr   string
		reason []string // empty: published
	}{
		{"192.0.2.21", []string{"192.0.2.21 is " + node}},
		{"::ffff:192.0.2.21", []string{"192.0.2.21 is " + node}},
		{"64:ff9b::c000:215", []string{"192.0.2.21 is " + node}},
		{"2001:db8::21", []string{"Node n1's ExternalIP"}},
		{"198.51.100.44", []string{apiServer}},
		{"10.96.0.7", []string{"inside the cluster's own network 10.96.0.0/24 (ServiceCIDR kubernetes)"}},
		{"192.0.2.22", nil},
		{"2001:db8::22", nil},
		{"198.51.100.45", nil},
	}
	for _, c := range cases {
		t.Run(c.addr, func(t *testing.T) {
			pol := Policy{AddressTypes: dual, Cluster: cluster}
			out, dropped := Normalize(one(up(c.addr)), pol)
			if len(c.reason) == 0 {
				if len(out) != 1 || len(dropped) != 0 {
					t.Fatalf("published %v, dropped %v; want it published", out, dropped)
				}
				return
			}
			if len(out) != 0 || len(dropped) != 1 {
				t.Fatalf("published %v, dropped %v; want it dropped", out, dropped)
			}
			for _, words := range c.reason {
				if !strings.Contains(dropped[0].Reason, words) {
					t.Errorf("reason %q does not say %q", dropped[0].Reason, words)
				}
			}
			// Denies judges a published endpoint the same way, so that one
			// held or draining leaves once its address is the cluster's (it
			// reads any IP the same way: only FQDN is told apart).
			e := Endpoint{Address: CanonicalAddress(c.addr), AddressType: "IPv6"}
			if got := pol.Denies(e); !slices.ContainsFunc(c.reason, func(w string) bool { return strings.Contains(got, w) }) {
				t.Errorf("Denies says %q, want it to say %q", got, c.reason)
			}
		})
	}
}
