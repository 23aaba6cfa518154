package publish

import (
	"net/netip"
	"reflect"
	"testing"
)

func TestEmbeddedIPv4s(t *testing.T) {
	v4 := netip.MustParseAddr
	local := formNAT64Local + " (last 32 bits)"
	local48 := formNAT64Local + " (RFC 6052 /48 position)"
	cases := []struct {
		addr string
		want []Embedding
	}{
		{"192.0.2.1", nil},
		{"2001:db8::c000:201", nil},
		{"2001:db8::1.2.3.4%eth0", nil},
		{"::ffff:1.2.3.4", []Embedding{{v4("1.2.3.4"), formMapped}}},
		{"::ffff:0:1.2.3.4", []Embedding{{v4("1.2.3.4"), formTranslated}}},
		{"::ffff:1:1.2.3.4", nil},
		{"::1.2.3.4", []Embedding{{v4("1.2.3.4"), formCompatible}}},
		{"::2", []Embedding{{v4("0.0.0.2"), formCompatible}}},
		// IPv6's own unspecified and loopback addresses embed nothing.
		{"::", nil},
		{"::1", nil},
		{"64:ff9b::1.2.3.4", []Embedding{{v4("1.2.3.4"), formNAT64}}},
		{"64:ff9b::1.2.3.4%eth0", []Embedding{{v4("1.2.3.4"), formNAT64}}},
		{"64:ff9b::", []Embedding{{v4("0.0.0.0"), formNAT64}}},
		{"64:ff9b::1:0:0:0", nil},
		{"64:ff9b:2::1.2.3.4", nil},
		{"64:ff9b:1::1.2.3.4", []Embedding{{v4("1.2.3.4"), local}}},
		// RFC 6052 /48: 01 02 at bits 48-63, the u octet, 03 04 at bits 72-87.
		{"64:ff9b:1:102:3:400::", []Embedding{{v4("1.2.3.4"), local48}}},
		{"64:ff9b:1:102:3:400:506:708", []Embedding{{v4("5.6.7.8"), local}, {v4("1.2.3.4"), local48}}},
		{"64:ff9b:1:102:3:400:102:304", []Embedding{{v4("1.2.3.4"), local}}},
		{"64:ff9b:1::", []Embedding{{v4("0.0.0.0"), local}}},
		{"2002:102:304::1", []Embedding{{v4("1.2.3.4"), form6to4}}},
		{"2002::", []Embedding{{v4("0.0.0.0"), form6to4}}},
		{"2003:102:304::1", nil},
		// Teredo: server 65.54.227.120, client 192.0.2.45 stored inverted
		// (3fff:fdd2), as RFC 4380's example.
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", []Embedding{
			{v4("192.0.2.45"), formTeredo + " (client, last 32 bits inverted)"},
			{v4("65.54.227.120"), formTeredo + " (server, bits 32 to 63)"}}},
		// The metadata address as a Teredo client: 169.254.169.254 inverted.
		{"2001:0:102:304::5601:5601", []Embedding{
			{v4("169.254.169.254"), formTeredo + " (client, last 32 bits inverted)"},
			{v4("1.2.3.4"), formTeredo + " (server, bits 32 to 63)"}}},
		// The documentation prefix 2001:db8::/32 is not Teredo.
		{"2001:db8:4136:e378:8000:63bf:3fff:fdd2", nil},
		{"2001:db8::5efe:169.254.169.254", []Embedding{{v4("169.254.169.254"), formISATAP}}},
		{"fe80::200:5efe:10.0.0.1", []Embedding{{v4("10.0.0.1"), formISATAP}}},
		{"2001:db8::100:5efe:10.0.0.1", nil},
	}
	for _, c := range cases {
		got := EmbeddedIPv4s(netip.MustParseAddr(c.addr))
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("EmbeddedIPv4s(%s) = %v, want %v", c.addr, got, c.want)
		}
		a, form, ok := EmbeddedIPv4(netip.MustParseAddr(c.addr))
		if ok != (len(c.want) > 0) || ok && (a != c.want[0].IPv4 || form != c.want[0].Form) {
			t.Errorf("EmbeddedIPv4(%s) = %v, %q, %v, want the first of %v", c.addr, a, form, ok, c.want)
		}
	}
}
