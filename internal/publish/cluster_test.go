package publish

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/backendslice/backendslice/providers"
)

// TestNormalizeClusterNetworks: an address of the cluster's own (a
// Node's, the API server's, in a Service or Pod range) is dropped, in
// every spelling that reaches it, saying only that it is the cluster's:
// never whose it is, nor the range. Whose says it, for the logs. Its
// neighbours are published.
func TestNormalizeClusterNetworks(t *testing.T) {
	const (
		node      = "Node n1's InternalIP address (its kubelet listens there)"
		apiServer = "an address of the API server (EndpointSlice default/kubernetes)"
	)
	cluster := ClusterNetworks{
		Ranges: []ClusterRange{
			{Prefix: netip.MustParsePrefix("10.96.0.0/24"), Of: "ServiceCIDR kubernetes"},
			{Prefix: netip.MustParsePrefix("10.244.1.0/24"), Of: "Node n1's Pod range"},
		},
		Hosts: map[netip.Addr]string{
			netip.MustParseAddr("192.0.2.21"):    node,
			netip.MustParseAddr("2001:db8::21"):  "Node n1's ExternalIP address (its kubelet listens there)",
			netip.MustParseAddr("198.51.100.44"): apiServer,
		},
	}
	// secrets are what no reason may say.
	secrets := []string{"API server", "n1", "Node", "InternalIP", "ExternalIP", "kubelet", "EndpointSlice", "ServiceCIDR", "kubernetes", "10.96.0.0", "10.244.1.0", "/24"}
	cases := []struct {
		addr string
		// reading is the address the reason names (the IPv4 one an IPv6
		// spelling holds), and whose what Whose says; both empty: published.
		reading, whose string
	}{
		{"192.0.2.21", "192.0.2.21", "192.0.2.21 is " + node},
		{"::ffff:192.0.2.21", "192.0.2.21", "192.0.2.21 is " + node},
		{"64:ff9b::c000:215", "192.0.2.21", "192.0.2.21 is " + node},
		{"2001:db8::21", "2001:db8::21", "Node n1's ExternalIP"},
		{"198.51.100.44", "198.51.100.44", apiServer},
		{"10.96.0.7", "10.96.0.7", "10.96.0.7 is in 10.96.0.0/24 (ServiceCIDR kubernetes)"},
		{"10.244.1.9", "10.244.1.9", "10.244.1.9 is in 10.244.1.0/24 (Node n1's Pod range)"},
		{"192.0.2.22", "", ""},
		{"2001:db8::22", "", ""},
		{"198.51.100.45", "", ""},
		{"10.244.2.9", "", ""},
	}
	for _, c := range cases {
		t.Run(c.addr, func(t *testing.T) {
			if got := cluster.Whose(c.addr); !strings.Contains(got, c.whose) || (c.whose == "") != (got == "") {
				t.Errorf("Whose(%s) = %q, want it to say %q", c.addr, got, c.whose)
			}
			pol := Policy{AddressTypes: dual, Cluster: cluster}
			out, dropped := Normalize(one(up(c.addr)), pol)
			if c.reading == "" {
				if len(out) != 1 || len(dropped) != 0 {
					t.Fatalf("published %v, dropped %v; want it published", out, dropped)
				}
				return
			}
			if len(out) != 0 || len(dropped) != 1 {
				t.Fatalf("published %v, dropped %v; want it dropped", out, dropped)
			}
			// Denies judges a published endpoint the same way, so that one
			// held or draining leaves once its address is the cluster's (it
			// reads any IP the same way: only FQDN is told apart).
			denied := pol.Denies(Endpoint{Address: CanonicalAddress(c.addr), AddressType: "IPv6"})
			want := ClusterAddressReason(netip.MustParseAddr(c.reading))
			for _, got := range []string{dropped[0].Reason, denied} {
				if got != want {
					t.Errorf("reason %q, want %q", got, want)
				}
				if i := slices.IndexFunc(secrets, func(s string) bool { return strings.Contains(got, s) }); i >= 0 {
					t.Errorf("reason %q names %q", got, secrets[i])
				}
			}
		})
	}
}

// TestOutsideAllowedSaidFirst: an address outside the source's
// allowedCIDRs is dropped for that, even when it is also the cluster's
// own, so that a tenant learns nothing of addresses it may not publish.
func TestOutsideAllowedSaidFirst(t *testing.T) {
	cluster := ClusterNetworks{Hosts: map[netip.Addr]string{netip.MustParseAddr("10.0.7.1"): "Node n1's InternalIP address"}}
	allowed := []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}
	for _, c := range []struct {
		allowed []netip.Prefix
		want    string
	}{
		{allowed, "outside the networks the BackendProvider allows"},
		{[]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, "an address of this cluster's own network"},
	} {
		_, dropped := Normalize([]SourceResult{{Name: "s", Restricted: true, Allowed: c.allowed, Endpoints: []providers.Endpoint{up("10.0.7.1")}}},
			Policy{AddressTypes: dual, Cluster: cluster})
		if len(dropped) != 1 || !strings.Contains(dropped[0].Reason, c.want) {
			t.Errorf("allowed %v: dropped %+v, want one reason saying %q", c.allowed, dropped, c.want)
		}
	}
}
