package publish

import (
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
)

var (
	ipv4Only = []v1alpha1.AddressType{v1alpha1.AddressTypeIPv4}
	dual     = []v1alpha1.AddressType{v1alpha1.AddressTypeIPv4, v1alpha1.AddressTypeIPv6}
	all      = []v1alpha1.AddressType{v1alpha1.AddressTypeIPv4, v1alpha1.AddressTypeIPv6, v1alpha1.AddressTypeFQDN}
	pgPort   = []v1alpha1.ServicePort{{Name: "pg", Port: 5432}}
)

// up is a serving provider endpoint at addr.
func up(addr string) providers.Endpoint { return providers.Endpoint{Address: addr, Serving: true} }

// one is the results of a single source named "s".
func one(eps ...providers.Endpoint) []SourceResult {
	return []SourceResult{{Name: "s", Endpoints: eps}}
}

// pub is what Normalize is expected to publish, without ports.
type pub struct {
	typ  discoveryv1.AddressType
	addr string
}

// drop is an expected drop: source, original address, and texts the reason contains.
type drop struct {
	source, addr string
	reason       []string
}

func TestNormalize(t *testing.T) {
	alibaba := netip.MustParsePrefix("100.100.100.200/32")
	ec2v6 := netip.MustParsePrefix("fd00:ec2::254/128")
	cases := []struct {
		name    string
		results []SourceResult
		types   []v1alpha1.AddressType
		prefix  []netip.Prefix
		names   []string
		domain  string
		want    []pub
		dropped []drop
	}{
		{
			name:    "IPv4 kept as is",
			results: one(up("192.0.2.1")),
			want:    []pub{{"IPv4", "192.0.2.1"}},
		},
		{
			name:    "IPv6 made canonical",
			results: one(up("2001:DB8:0:0::1"), up("2001:0db8:0000:0000:0000:0000:0000:0002")),
			want:    []pub{{"IPv6", "2001:db8::1"}, {"IPv6", "2001:db8::2"}},
		},
		{
			name:    "IPv4-mapped IPv6 published as IPv4",
			results: one(up("::ffff:192.0.2.1"), up("::FFFF:c633:6407")),
			want:    []pub{{"IPv4", "192.0.2.1"}, {"IPv4", "198.51.100.7"}},
		},
		{
			name:    "IPv4-mapped IPv6 published when only IPv4 is listed",
			results: one(up("::ffff:192.0.2.1")),
			types:   ipv4Only,
			want:    []pub{{"IPv4", "192.0.2.1"}},
		},
		{
			name:    "IPv6 zone dropped",
			results: one(up("2001:db8::1%eth0")),
			dropped: []drop{{"s", "2001:db8::1%eth0", []string{"zone"}}},
		},
		{
			name:    "unspecified dropped",
			results: one(up("0.0.0.0"), up("::")),
			dropped: []drop{{"s", "0.0.0.0", []string{"unspecified"}}, {"s", "::", []string{"unspecified"}}},
		},
		{
			// The API server rejects 0.0.0.0 in an EndpointSlice: once
			// unmapped, ::ffff:0.0.0.0 is that address.
			name:    "IPv4-mapped unspecified dropped",
			results: one(up("::ffff:0.0.0.0")),
			dropped: []drop{{"s", "::ffff:0.0.0.0", []string{"unspecified"}}},
		},
		{
			name:    "loopback dropped",
			results: one(up("127.0.0.1"), up("127.8.9.10"), up("::1"), up("::ffff:127.0.0.1")),
			dropped: []drop{
				{"s", "127.0.0.1", []string{"loopback"}}, {"s", "127.8.9.10", []string{"loopback"}},
				{"s", "::1", []string{"loopback"}}, {"s", "::ffff:127.0.0.1", []string{"loopback"}},
			},
		},
		{
			name:    "link-local dropped",
			results: one(up("169.254.169.254"), up("fe80::1"), up("224.0.0.251"), up("ff02::1"), up("::ffff:169.254.1.1")),
			dropped: []drop{
				{"s", "169.254.169.254", []string{"link-local"}}, {"s", "fe80::1", []string{"link-local"}},
				{"s", "224.0.0.251", []string{"link-local"}}, {"s", "ff02::1", []string{"link-local"}},
				{"s", "::ffff:169.254.1.1", []string{"link-local"}},
			},
		},
		{
			name:    "multicast dropped",
			results: one(up("239.1.2.3"), up("ff05::2")),
			dropped: []drop{{"s", "239.1.2.3", []string{"multicast"}}, {"s", "ff05::2", []string{"multicast"}}},
		},
		{
			// Not naming the network: an operator lists the cluster's own
			// there.
			name:    "denied prefix dropped naming the flag",
			results: one(up("100.100.100.200"), up("::ffff:100.100.100.200"), up("fd00:ec2::254"), up("100.100.100.201")),
			prefix:  []netip.Prefix{alibaba, ec2v6},
			want:    []pub{{"IPv4", "100.100.100.201"}},
			dropped: []drop{
				{"s", "100.100.100.200", []string{"--denied-cidrs"}},
				{"s", "::ffff:100.100.100.200", []string{"--denied-cidrs"}},
				{"s", "fd00:ec2::254", []string{"--denied-cidrs"}},
			},
		},
		{
			// The deny check reads the IPv4 address inside NAT64, SIIT,
			// IPv4-compatible and 6to4 addresses: a gateway or tunnel
			// takes traffic for them to that IPv4 address.
			name: "IPv6 embedding a denied IPv4 address dropped naming it",
			results: one(up("64:ff9b::6464:64c8"), up("64:FF9B::100.100.100.200"), up("64:ff9b:1::6464:64c8"),
				up("::ffff:0:6464:64c8"), up("::100.100.100.200"), up("2002:6464:64c8::1"), up("64:ff9b::a0a:a0a"),
				up("2001:0:c000:201::9b9b:9b37"), up("2001:db8::5efe:6464:64c8")),
			prefix: []netip.Prefix{alibaba, ec2v6, netip.MustParsePrefix("10.0.0.0/8")},
			dropped: []drop{
				{"s", "64:ff9b::6464:64c8", []string{"embeds IPv4 100.100.100.200 (NAT64 64:ff9b::/96), which is denied: address is in a network the controller denies"}},
				{"s", "64:FF9B::100.100.100.200", []string{"embeds IPv4 100.100.100.200 (NAT64 64:ff9b::/96)"}},
				{"s", "64:ff9b:1::6464:64c8", []string{"embeds IPv4 100.100.100.200 (NAT64 local-use 64:ff9b:1::/48 (last 32 bits))"}},
				{"s", "::ffff:0:6464:64c8", []string{"embeds IPv4 100.100.100.200 (IPv4-translated ::ffff:0:0:0/96)"}},
				{"s", "::100.100.100.200", []string{"embeds IPv4 100.100.100.200 (IPv4-compatible ::/96)"}},
				{"s", "2002:6464:64c8::1", []string{"embeds IPv4 100.100.100.200 (6to4 2002::/16)"}},
				{"s", "64:ff9b::a0a:a0a", []string{"embeds IPv4 10.10.10.10", "--denied-cidrs"}},
				// Teredo: the client 100.100.100.200, stored inverted.
				{"s", "2001:0:c000:201::9b9b:9b37", []string{"embeds IPv4 100.100.100.200 (Teredo 2001::/32 (client, last 32 bits inverted))"}},
				{"s", "2001:db8::5efe:6464:64c8", []string{"embeds IPv4 100.100.100.200 (ISATAP interface identifier ::5efe:0:0/96)"}},
			},
		},
		{
			// 64:ff9b:1::/48 is read both ways: as a /96 inside the /48,
			// and at RFC 6052's /48 position around the u octet.
			name: "NAT64 local-use denied in either reading",
			results: one(up("64:ff9b:1:6464:64:c800::"), up("64:ff9b:1:6464:64:c800:c000:201"), up("64:ff9b:1:c000:2:100:6464:64c8"),
				up("64:ff9b:1:a9fe:a9:fe00::1"), up("64:ff9b:1:c000:2:100:c000:202")),
			prefix: []netip.Prefix{alibaba},
			want:   []pub{{"IPv6", "64:ff9b:1:c000:2:100:c000:202"}},
			dropped: []drop{
				{"s", "64:ff9b:1:6464:64:c800::", []string{"100.100.100.200 (NAT64 local-use 64:ff9b:1::/48 (RFC 6052 /48 position))"}},
				{"s", "64:ff9b:1:6464:64:c800:c000:201", []string{"100.100.100.200 (NAT64 local-use 64:ff9b:1::/48 (RFC 6052 /48 position))"}},
				{"s", "64:ff9b:1:c000:2:100:6464:64c8", []string{"100.100.100.200 (NAT64 local-use 64:ff9b:1::/48 (last 32 bits))"}},
				{"s", "64:ff9b:1:a9fe:a9:fe00::1", []string{"169.254.169.254 (NAT64 local-use 64:ff9b:1::/48 (RFC 6052 /48 position))", "link-local"}},
			},
		},
		{
			// The API server rejects these IPv4 addresses but not the IPv6
			// ones that reach them: the metadata service, the node itself.
			name: "IPv6 embedding what the API server rejects dropped naming it",
			results: one(up("64:ff9b::a9fe:a9fe"), up("64:ff9b::127.0.0.1"), up("64:ff9b::"), up("::ffff:0:169.254.169.254"),
				up("::127.0.0.1"), up("2002:a9fe:a9fe::"), up("2002:7f00:1::1"), up("64:ff9b::e000:fb")),
			dropped: []drop{
				{"s", "64:ff9b::a9fe:a9fe", []string{"embeds IPv4 169.254.169.254 (NAT64 64:ff9b::/96), which is denied: link-local"}},
				{"s", "64:ff9b::127.0.0.1", []string{"embeds IPv4 127.0.0.1 (NAT64 64:ff9b::/96), which is denied: loopback"}},
				{"s", "64:ff9b::", []string{"embeds IPv4 0.0.0.0 (NAT64 64:ff9b::/96), which is denied: unspecified"}},
				{"s", "::ffff:0:169.254.169.254", []string{"embeds IPv4 169.254.169.254 (IPv4-translated ::ffff:0:0:0/96)", "link-local"}},
				{"s", "::127.0.0.1", []string{"embeds IPv4 127.0.0.1 (IPv4-compatible ::/96)", "loopback"}},
				{"s", "2002:a9fe:a9fe::", []string{"embeds IPv4 169.254.169.254 (6to4 2002::/16)", "link-local"}},
				{"s", "2002:7f00:1::1", []string{"embeds IPv4 127.0.0.1 (6to4 2002::/16)", "loopback"}},
				{"s", "64:ff9b::e000:fb", []string{"embeds IPv4 224.0.0.251", "link-local"}},
			},
		},
		{
			// Allowed, they stay the IPv6 addresses the source gave.
			name: "IPv6 embedding an allowed IPv4 address published as IPv6",
			results: one(up("64:ff9b::192.0.2.1"), up("64:ff9b:1::c000:202"), up("::ffff:0:192.0.2.3"), up("::192.0.2.4"),
				up("2002:c000:205::1"), up("2001:db8::6464:64c8")),
			prefix: []netip.Prefix{alibaba},
			want: []pub{{"IPv6", "64:ff9b::c000:201"}, {"IPv6", "64:ff9b:1::c000:202"}, {"IPv6", "::ffff:0:c000:203"},
				{"IPv6", "::c000:204"}, {"IPv6", "2002:c000:205::1"}, {"IPv6", "2001:db8::6464:64c8"}},
		},
		{
			name:    "IPv4-embedding IPv6 judged by an IPv4-mapped denied prefix",
			results: one(up("64:ff9b::6464:64c8"), up("64:ff9b::6464:64c9")),
			prefix:  []netip.Prefix{netip.MustParsePrefix("::ffff:100.100.100.200/128")},
			want:    []pub{{"IPv6", "64:ff9b::6464:64c9"}},
			dropped: []drop{{"s", "64:ff9b::6464:64c8", []string{"embeds IPv4 100.100.100.200", "--denied-cidrs"}}},
		},
		{
			// libc and URL parsers read these as 100.100.100.200; DNS
			// would never be asked, and --denied-cidrs never sees them.
			name: "numeric names dropped naming the IPv4 address they read as",
			results: one(up("0x64.0x64.0x64.0xc8"), up("1684301000"), up("100.100.100.200."), up("0144.0144.0144.0310"),
				up("100.0x64.100.200"), up("0X64.0X64.0X64.0XC8"), up("100.100.25800"), up("0xa9fea9fe"), up("169.254.0xa9fe")),
			types:  all,
			prefix: []netip.Prefix{alibaba},
			dropped: []drop{
				{"s", "0x64.0x64.0x64.0xc8", []string{"IPv4 address 100.100.100.200", "give the IP address"}},
				{"s", "1684301000", []string{"IPv4 address 100.100.100.200"}},
				{"s", "100.100.100.200.", []string{"IPv4 address 100.100.100.200"}},
				{"s", "0144.0144.0144.0310", []string{"IPv4 address 100.100.100.200"}},
				{"s", "100.0x64.100.200", []string{"IPv4 address 100.100.100.200"}},
				{"s", "0X64.0X64.0X64.0XC8", []string{"IPv4 address 100.100.100.200"}},
				{"s", "100.100.25800", []string{"IPv4 address 100.100.100.200"}},
				{"s", "0xa9fea9fe", []string{"IPv4 address 169.254.169.254"}},
				{"s", "169.254.0xa9fe", []string{"IPv4 address 169.254.169.254"}},
			},
		},
		{
			// A URL parser refuses a host ending in a number that is no
			// address; no top-level domain is numeric.
			name:    "names ending in a numeric label dropped",
			results: one(up("db.example.123"), up("db.0x1f"), up("db.0x"), up("1.2.3.4.5"), up("1.2.3.256"), up("08.1.1.1"), up("4294967296")),
			types:   all,
			dropped: []drop{
				{"s", "db.example.123", []string{"numeric label"}}, {"s", "db.0x1f", []string{"numeric label"}},
				{"s", "db.0x", []string{"numeric label"}}, {"s", "1.2.3.4.5", []string{"numeric label"}},
				{"s", "1.2.3.256", []string{"numeric label"}}, {"s", "08.1.1.1", []string{"numeric label"}},
				{"s", "4294967296", []string{"numeric label"}},
			},
		},
		{
			name:    "names with numeric labels before the last published",
			results: one(up("123.example.com"), up("0x64.example.com"), up("1e100.net"), up("100.100.100.200.example.com")),
			types:   all,
			prefix:  []netip.Prefix{alibaba},
			want: []pub{{"FQDN", "123.example.com"}, {"FQDN", "0x64.example.com"}, {"FQDN", "1e100.net"},
				{"FQDN", "100.100.100.200.example.com"}},
		},
		{
			name:    "a numeric name is refused as such, whatever the address types",
			results: one(up("0x64.0x64.0x64.0xc8")),
			dropped: []drop{{"s", "0x64.0x64.0x64.0xc8", []string{"IPv4 address 100.100.100.200"}}},
		},
		{
			name: "names in the cluster's DNS domain dropped",
			results: one(up("kubernetes.default.svc.cluster.local"), up("cluster.local"), up("CLUSTER.Local."),
				up("db.payments.svc"), up("kubernetes.default.svc."), up("payments.svc"), up("169-254-169-254.default.pod"),
				up("cluster.local.example.com"), up("notcluster.local"), up("svc.example.com"), up("db.svc-a.com"), up("pod.example.com")),
			types: all,
			want: []pub{{"FQDN", "cluster.local.example.com"}, {"FQDN", "notcluster.local"}, {"FQDN", "svc.example.com"},
				{"FQDN", "db.svc-a.com"}, {"FQDN", "pod.example.com"}},
			dropped: []drop{
				{"s", "kubernetes.default.svc.cluster.local", []string{"is in the cluster's DNS domain cluster.local: a Service must not point back into the cluster"}},
				{"s", "cluster.local", []string{"cluster's DNS domain cluster.local"}},
				{"s", "CLUSTER.Local.", []string{"cluster's DNS domain cluster.local"}},
				{"s", "db.payments.svc", []string{"ends in .svc", "db.payments.svc.cluster.local", "must not point back into the cluster"}},
				{"s", "kubernetes.default.svc.", []string{"kubernetes.default.svc.cluster.local"}},
				{"s", "payments.svc", []string{"payments.svc.cluster.local"}},
				{"s", "169-254-169-254.default.pod", []string{"ends in .pod", "169-254-169-254.default.pod.cluster.local"}},
			},
		},
		{
			name:    "the configured cluster domain replaces cluster.local",
			results: one(up("db.corp.example"), up("Corp.Example."), up("db.payments.svc"), up("db.cluster.local")),
			types:   all,
			domain:  " Corp.Example. ",
			want:    []pub{{"FQDN", "db.cluster.local"}},
			dropped: []drop{
				{"s", "db.corp.example", []string{"cluster's DNS domain corp.example:"}},
				{"s", "Corp.Example.", []string{"cluster's DNS domain corp.example:"}},
				{"s", "db.payments.svc", []string{"db.payments.svc.corp.example"}},
			},
		},
		{
			name:    "FQDN lowercased without trailing dot",
			results: one(up("DB.Example.COM."), up("replica.example.com")),
			types:   all,
			want:    []pub{{"FQDN", "db.example.com"}, {"FQDN", "replica.example.com"}},
		},
		{
			name:    "one-label name dropped",
			results: one(up("db"), up("localhost.")),
			types:   all,
			dropped: []drop{{"s", "db", []string{"two labels"}}, {"s", "localhost.", []string{"two labels"}}},
		},
		{
			name:    "invalid name dropped",
			results: one(up("db_1.example.com"), up("-db.example.com"), up("db..example.com"), up("not an address")),
			types:   all,
			dropped: []drop{
				{"s", "db_1.example.com", []string{"neither an IP address nor a valid DNS name"}},
				{"s", "-db.example.com", []string{"neither an IP address nor a valid DNS name"}},
				{"s", "db..example.com", []string{"neither an IP address nor a valid DNS name"}},
				{"s", "not an address", []string{"neither an IP address nor a valid DNS name"}},
			},
		},
		{
			name:    "malformed IPv4 is not a name",
			results: one(up("192.0.2.01"), up("192.0.2"), up("192.0.2.256"), up("1.2.3.4.5")),
			types:   all,
			dropped: []drop{
				{"s", "192.0.2.01", []string{"IPv4"}}, {"s", "192.0.2", []string{"IPv4"}},
				{"s", "192.0.2.256", []string{"IPv4"}}, {"s", "1.2.3.4.5", []string{"IPv4"}},
			},
		},
		{
			name: "denied names, exact and wildcard",
			results: one(up("metadata.google.internal"), up("Metadata.Google.Internal."), up("kubernetes.default.svc.cluster.local"),
				up("a.b.cluster.local"), up("cluster.local.example.com"), up("notcluster.local"), up("db.example.com")),
			types: all,
			names: []string{"metadata.google.internal", "*.cluster.local"},
			want:  []pub{{"FQDN", "cluster.local.example.com"}, {"FQDN", "notcluster.local"}, {"FQDN", "db.example.com"}},
			dropped: []drop{
				{"s", "metadata.google.internal", []string{`"metadata.google.internal"`, "--denied-names"}},
				{"s", "Metadata.Google.Internal.", []string{`"metadata.google.internal"`}},
				{"s", "kubernetes.default.svc.cluster.local", []string{`"*.cluster.local"`}},
				{"s", "a.b.cluster.local", []string{`"*.cluster.local"`}},
			},
		},
		{
			name:    "family not in spec.addressTypes dropped",
			results: one(up("192.0.2.1"), up("2001:db8::1"), up("db.example.com")),
			types:   ipv4Only,
			want:    []pub{{"IPv4", "192.0.2.1"}},
			dropped: []drop{
				{"s", "2001:db8::1", []string{"IPv6", "spec.addressTypes"}},
				{"s", "db.example.com", []string{"FQDN", "spec.addressTypes"}},
			},
		},
		{
			name: "failed source ignored",
			results: []SourceResult{
				{Name: "bad", Endpoints: []providers.Endpoint{up("192.0.2.1"), up("127.0.0.1")}, Err: errors.New("boom")},
				{Name: "good", Endpoints: []providers.Endpoint{up("192.0.2.2")}},
			},
			want: []pub{{"IPv4", "192.0.2.2"}},
		},
		{
			name: "duplicates across sources and spellings read once, in source order",
			results: []SourceResult{
				{Name: "a", Endpoints: []providers.Endpoint{up("192.0.2.1"), up("2001:db8::1")}},
				{Name: "b", Endpoints: []providers.Endpoint{up("::ffff:192.0.2.1"), up("2001:DB8::1"), up("192.0.2.3"), up("192.0.2.1")}},
			},
			want: []pub{{"IPv4", "192.0.2.1"}, {"IPv6", "2001:db8::1"}, {"IPv4", "192.0.2.3"}},
		},
		{
			name: "dropped addresses name their source",
			results: []SourceResult{
				{Name: "a", Endpoints: []providers.Endpoint{up("127.0.0.1")}},
				{Name: "b", Endpoints: []providers.Endpoint{up("127.0.0.1")}},
			},
			dropped: []drop{{"a", "127.0.0.1", []string{"loopback"}}, {"b", "127.0.0.1", []string{"loopback"}}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			types := c.types
			if types == nil {
				types = dual
			}
			eps, dropped := Normalize(c.results, Policy{AddressTypes: types, DeniedPrefixes: c.prefix, DeniedNames: c.names,
				ClusterDomain: c.domain, Ports: pgPort})
			var got []pub
			for _, e := range eps {
				got = append(got, pub{e.AddressType, e.Address})
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("published %v, want %v", got, c.want)
			}
			if len(dropped) != len(c.dropped) {
				t.Fatalf("dropped %+v, want %d", dropped, len(c.dropped))
			}
			for i, d := range c.dropped {
				g := dropped[i]
				if g.Source != d.source || g.Address != d.addr {
					t.Errorf("dropped[%d] = %s/%s, want %s/%s", i, g.Source, g.Address, d.source, d.addr)
				}
				for _, r := range d.reason {
					if !strings.Contains(g.Reason, r) {
						t.Errorf("dropped[%d] (%s) reason %q does not contain %q", i, g.Address, g.Reason, r)
					}
				}
			}
		})
	}
}

func TestNormalizeFirstSourceWinsWithItsHealth(t *testing.T) {
	results := []SourceResult{
		{Name: "a", Endpoints: []providers.Endpoint{{Address: "192.0.2.1", Zone: "za", Hostname: "from-a", Serving: false}}},
		{Name: "b", Endpoints: []providers.Endpoint{
			{Address: "192.0.2.1", Zone: "zb", Hostname: "from-b", Serving: true},
			{Address: "2001:db8::1", Serving: true, Terminating: true},
		}},
		{Name: "c", Endpoints: []providers.Endpoint{{Address: "2001:0DB8::1", Serving: true}}},
	}
	eps, dropped := Normalize(results, Policy{AddressTypes: dual, Ports: pgPort})
	if len(dropped) != 0 {
		t.Errorf("dropped %+v, want none: a duplicate is not a drop", dropped)
	}
	if len(eps) != 2 {
		t.Fatalf("endpoints %+v, want 2", eps)
	}
	if e := eps[0]; e.Address != "192.0.2.1" || e.Serving || e.Zone != "za" || e.Hostname != "from-a" {
		t.Errorf("first endpoint %+v, want source a's: not serving, zone za, hostname from-a", e)
	}
	if e := eps[1]; e.Address != "2001:db8::1" || !e.Serving || !e.Terminating || e.Ready() {
		t.Errorf("second endpoint %+v, want source b's: serving and terminating", e)
	}
}

// TestNormalizeOneSourceDuplicates: two endpoints of one source at one
// address (two EC2 instances in two VPCs) publish the same one whatever
// the order the provider lists them in, which may change at every answer
// (a map's): taking the first flipped the slices at every refresh.
func TestNormalizeOneSourceDuplicates(t *testing.T) {
	ready := providers.Endpoint{Address: "192.0.2.1", Hostname: "i-b", Zone: "za", Serving: true}
	for _, tc := range []struct {
		name   string
		a, b   providers.Endpoint
		winner string
	}{
		{"ready before not serving", ready, providers.Endpoint{Address: "192.0.2.1", Hostname: "i-a", Zone: "za"}, "i-b"},
		{"ready before draining", ready, providers.Endpoint{Address: "192.0.2.1", Hostname: "i-a", Zone: "za", Serving: true, Terminating: true}, "i-b"},
		{"draining before not serving", providers.Endpoint{Address: "192.0.2.1", Hostname: "i-b", Serving: true, Terminating: true},
			providers.Endpoint{Address: "192.0.2.1", Hostname: "i-a"}, "i-b"},
		{"then the lower hostname", ready, providers.Endpoint{Address: "192.0.2.1", Hostname: "i-a", Zone: "zb", Serving: true}, "i-a"},
		{"then the lower zone", ready, providers.Endpoint{Address: "192.0.2.1", Hostname: "i-b", Zone: "z0", Serving: true}, "i-b/z0"},
		{"then the lower port", providers.Endpoint{Address: "192.0.2.1", Hostname: "i-b", Zone: "za", Serving: true, Port: 6432},
			providers.Endpoint{Address: "192.0.2.1", Hostname: "i-b", Zone: "za", Serving: true, Port: 5432}, "i-b/za/5432"},
		{"one address in two spellings", ready, providers.Endpoint{Address: "::ffff:192.0.2.1", Hostname: "i-a", Serving: true}, "i-a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, order := range [][]providers.Endpoint{{tc.a, tc.b}, {tc.b, tc.a}} {
				eps, dropped := Normalize([]SourceResult{{Name: "vms", Endpoints: order}}, Policy{AddressTypes: dual, Ports: []v1alpha1.ServicePort{{Name: "pg", Port: 5432}}})
				if len(eps) != 1 || len(dropped) != 0 {
					t.Fatalf("%+v, dropped %+v: want one endpoint", eps, dropped)
				}
				e := eps[0]
				got = append(got, fmt.Sprintf("%s/%s/%d", e.Hostname, e.Zone, *e.Ports[0].Port))
				if !strings.HasPrefix(got[len(got)-1], tc.winner) {
					t.Errorf("listed as %s, %s: published %+v, want %s", order[0].Hostname, order[1].Hostname, e, tc.winner)
				}
			}
			if got[0] != got[1] {
				t.Errorf("the order changes what is published: %s, then %s", got[0], got[1])
			}
		})
	}
}

func TestNormalizeHostname(t *testing.T) {
	cases := map[string]string{
		"db-1":                  "db-1",
		"":                      "",
		"Bad_Host":              "",
		"db-1.example.com":      "", // a label, not a name
		strings.Repeat("a", 64): "",
		strings.Repeat("a", 63): strings.Repeat("a", 63),
		"-leading":              "",
		"0numeric":              "0numeric",
	}
	for in, want := range cases {
		eps, dropped := Normalize(one(providers.Endpoint{Address: "192.0.2.1", Hostname: in, Zone: "z", Serving: true}),
			Policy{AddressTypes: dual, Ports: pgPort})
		if len(dropped) != 0 || len(eps) != 1 {
			t.Errorf("hostname %q: endpoint dropped (%+v); an invalid hostname is cleared, not dropped", in, dropped)
			continue
		}
		if eps[0].Hostname != want {
			t.Errorf("hostname %q: got %q, want %q", in, eps[0].Hostname, want)
		}
		if eps[0].Zone != "z" || !eps[0].Serving {
			t.Errorf("hostname %q: other fields lost: %+v", in, eps[0])
		}
	}
}

func TestNormalizePorts(t *testing.T) {
	h2c := "kubernetes.io/h2c"
	ports := []v1alpha1.ServicePort{
		{Name: "pg", Port: 5432},
		{Name: "admin", Port: 80, TargetPort: ptr.To[int32](8080)},
		{Name: "dns", Port: 53, Protocol: "UDP"},
		{Name: "grpc", Port: 9000, Protocol: "TCP", AppProtocol: &h2c},
	}
	want := func(pg, admin, dns, grpc int32) []discoveryv1.EndpointPort {
		return []discoveryv1.EndpointPort{
			{Name: ptr.To("pg"), Port: ptr.To(pg), Protocol: ptr.To(corev1.ProtocolTCP)},
			{Name: ptr.To("admin"), Port: ptr.To(admin), Protocol: ptr.To(corev1.ProtocolTCP)},
			{Name: ptr.To("dns"), Port: ptr.To(dns), Protocol: ptr.To(corev1.ProtocolUDP)},
			{Name: ptr.To("grpc"), Port: ptr.To(grpc), Protocol: ptr.To(corev1.ProtocolTCP), AppProtocol: &h2c},
		}
	}
	cases := []struct {
		name     string
		override int32
		want     []discoveryv1.EndpointPort
	}{
		{"targetPort defaults to port", 0, want(5432, 8080, 53, 9000)},
		{"provider port replaces only unset targetPorts", 3306, want(3306, 8080, 3306, 3306)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			eps, _ := Normalize(one(providers.Endpoint{Address: "192.0.2.1", Port: c.override, Serving: true}),
				Policy{AddressTypes: dual, Ports: ports})
			if len(eps) != 1 {
				t.Fatalf("endpoints %+v", eps)
			}
			if !reflect.DeepEqual(eps[0].Ports, c.want) {
				t.Errorf("ports\n got %+v\nwant %+v", eps[0].Ports, c.want)
			}
		})
	}
}

func TestNormalizeNoPortsNoEndpoints(t *testing.T) {
	eps, dropped := Normalize(nil, Policy{AddressTypes: dual})
	if len(eps) != 0 || len(dropped) != 0 {
		t.Errorf("Normalize(nil) = %+v, %+v", eps, dropped)
	}
	eps, _ = Normalize(one(up("192.0.2.1")), Policy{AddressTypes: dual})
	if len(eps) != 1 || len(eps[0].Ports) != 0 {
		t.Errorf("no Service ports: %+v", eps)
	}
}

// DNS names compare without regard to case or a trailing dot, on either
// side: a denied name written as the operator might write it (with a space
// after a comma in the flag too) still denies the name however the source
// spells it.
func TestNormalizeDeniedNamesIgnoreCaseAndTrailingDot(t *testing.T) {
	denied := []string{"metadata.google.internal", "Metadata.Google.Internal", "metadata.google.internal.", "METADATA.GOOGLE.INTERNAL..",
		" metadata.google.internal", "metadata.google.internal ", "*.Google.Internal", "*.google.internal.", " *.GOOGLE.internal. "}
	given := []string{"metadata.google.internal", "Metadata.Google.Internal.", "METADATA.GOOGLE.INTERNAL"}
	for _, d := range denied {
		for _, name := range given {
			eps, dropped := Normalize(one(up(name)), Policy{AddressTypes: all, DeniedNames: []string{"other.example.com", d}})
			if len(eps) != 0 || len(dropped) != 1 || !strings.Contains(dropped[0].Reason, "--denied-names") {
				t.Errorf("--denied-names=%q: %s published (%+v, dropped %+v); want it denied", d, name, eps, dropped)
			}
		}
	}
	// A wildcard denies the names under it, on a label boundary.
	for _, name := range []string{"notgoogle.internal", "google.internal.example.com"} {
		if eps, _ := Normalize(one(up(name)), Policy{AddressTypes: all, DeniedNames: []string{"*.google.internal"}}); len(eps) != 1 {
			t.Errorf("%s denied by *.google.internal; want it published", name)
		}
	}
}

func TestNormalizeEmptyAddressDropped(t *testing.T) {
	eps, dropped := Normalize(one(up("")), Policy{AddressTypes: all, Ports: pgPort})
	if len(eps) != 0 || len(dropped) != 1 || dropped[0].Reason == "" {
		t.Errorf("empty address: published %+v, dropped %+v; want it dropped with a reason", eps, dropped)
	}
}

// TestNormalizeHeldAnswer: a source failing transiently keeps its last
// answer, first in spec order with its own health, ahead of a later source.
func TestNormalizeHeldAnswer(t *testing.T) {
	results := []SourceResult{
		{Name: "dns", Err: errors.New("SERVFAIL"), Held: true, Endpoints: []providers.Endpoint{{Address: "192.0.2.1", Serving: true}}},
		{Name: "dr", Endpoints: []providers.Endpoint{{Address: "192.0.2.1"}, {Address: "192.0.2.2", Serving: true}}},
		{Name: "gone", Err: errors.New("NXDOMAIN"), Endpoints: []providers.Endpoint{{Address: "192.0.2.3", Serving: true}}},
	}
	got, _ := Normalize(results, Policy{AddressTypes: []v1alpha1.AddressType{v1alpha1.AddressTypeIPv4}})
	if len(got) != 2 || got[0].Address != "192.0.2.1" || !got[0].Serving || got[1].Address != "192.0.2.2" {
		t.Errorf("Normalize = %+v, want 192.0.2.1 serving (held from dns) and 192.0.2.2, nothing from the failed unheld source", got)
	}
}

// TestNormalizeAllowedNetworks: a source through a BackendProvider with
// allowedCIDRs publishes only addresses inside them, and no names; an
// unrestricted source next to it is not narrowed.
func TestNormalizeAllowedNetworks(t *testing.T) {
	allowed := []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("2001:db8::/64")}
	eps := func(addrs ...string) []providers.Endpoint {
		var out []providers.Endpoint
		for _, a := range addrs {
			out = append(out, providers.Endpoint{Address: a, Serving: true})
		}
		return out
	}
	got, dropped := Normalize([]SourceResult{
		{Name: "tenant", Restricted: true, Allowed: allowed, Endpoints: eps("192.0.2.7", "198.51.100.7", "2001:db8::7", "2001:db8:1::7", "db.example.com")},
		{Name: "locked", Restricted: true, Endpoints: eps("203.0.113.9")},
		{Name: "open", Endpoints: eps("198.51.100.8")},
	}, Policy{AddressTypes: []v1alpha1.AddressType{"IPv4", "IPv6", "FQDN"}})
	var published, refused []string
	for _, e := range got {
		published = append(published, e.Address)
	}
	for _, d := range dropped {
		refused = append(refused, d.Source+"/"+d.Address)
		if !strings.Contains(d.Reason, "allowedCIDRs") {
			t.Errorf("%s dropped for %q, want a reason naming allowedCIDRs", d.Address, d.Reason)
		}
	}
	if want := []string{"192.0.2.7", "2001:db8::7", "198.51.100.8"}; !slices.Equal(published, want) {
		t.Errorf("published %v, want %v", published, want)
	}
	if want := []string{"tenant/198.51.100.7", "tenant/2001:db8:1::7", "tenant/db.example.com", "locked/203.0.113.9"}; !slices.Equal(refused, want) {
		t.Errorf("dropped %v, want %v", refused, want)
	}
}

// TestCanonicalAddress: the address matched against published endpoints
// is the one Normalize publishes, and a name Normalize refuses is never
// made into one it would publish (the Kelvin sign is not a k).
func TestCanonicalAddress(t *testing.T) {
	fqdn := Policy{AddressTypes: []v1alpha1.AddressType{"IPv4", "IPv6", "FQDN"}}
	for _, c := range []struct {
		in, want string
		// published tells whether Normalize publishes in.
		published bool
	}{
		{"192.0.2.1", "192.0.2.1", true},
		{"::ffff:192.0.2.1", "192.0.2.1", true},
		{"2001:0DB8:0000::1", "2001:db8::1", true},
		{"Kafka.Example.COM.", "kafka.example.com", true},
		{"\u212Aafka.example.com", "\u212Aafka.example.com", false},
		{"\u212AAFKA.example.com", "\u212Aafka.example.com", false},
	} {
		if got := CanonicalAddress(c.in); got != c.want {
			t.Errorf("CanonicalAddress(%q) = %q, want %q", c.in, got, c.want)
		}
		got, _ := Normalize(one(up(c.in)), fqdn)
		switch {
		case c.published && (len(got) != 1 || got[0].Address != c.want):
			t.Errorf("Normalize(%q) = %+v, want %q published, as CanonicalAddress has it", c.in, got, c.want)
		case !c.published && len(got) != 0:
			t.Errorf("Normalize(%q) = %+v, want it dropped", c.in, got)
		}
	}
}
