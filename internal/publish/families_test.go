package publish

import (
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
)

func TestOnlyServed(t *testing.T) {
	eps := []Endpoint{
		{AddressType: discoveryv1.AddressTypeIPv4, Address: "192.0.2.1"},
		{AddressType: discoveryv1.AddressTypeIPv6, Address: "2001:db8::1"},
		{AddressType: discoveryv1.AddressTypeIPv6, Address: "2001:db8::2"},
		{AddressType: discoveryv1.AddressTypeFQDN, Address: "db.example.com"},
	}
	for _, c := range []struct {
		name   string
		served []discoveryv1.AddressType
		kept   []string
		left   LeftOut
	}{
		{"dual-stack keeps all", []discoveryv1.AddressType{"IPv4", "IPv6"}, []string{"192.0.2.1", "2001:db8::1", "2001:db8::2", "db.example.com"}, LeftOut{}},
		{"IPv4 only leaves IPv6 out", []discoveryv1.AddressType{"IPv4"}, []string{"192.0.2.1", "db.example.com"}, LeftOut{"IPv6": 2}},
		{"IPv6 only leaves IPv4 out", []discoveryv1.AddressType{"IPv6"}, []string{"2001:db8::1", "2001:db8::2", "db.example.com"}, LeftOut{"IPv4": 1}},
		{"FQDN never left out", nil, []string{"db.example.com"}, LeftOut{"IPv4": 1, "IPv6": 2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			served := map[discoveryv1.AddressType]bool{}
			for _, f := range c.served {
				served[f] = true
			}
			kept, left := OnlyServed(eps, func(f discoveryv1.AddressType) bool { return served[f] })
			var got []string
			for _, e := range kept {
				got = append(got, e.Address)
			}
			if len(got) != len(c.kept) {
				t.Fatalf("kept %v, want %v", got, c.kept)
			}
			for i := range got {
				if got[i] != c.kept[i] {
					t.Fatalf("kept %v, want %v", got, c.kept)
				}
			}
			if len(left) != len(c.left) || left.Total() != c.left.Total() {
				t.Fatalf("left out %v, want %v", left, c.left)
			}
			for f, n := range c.left {
				if left[f] != n {
					t.Fatalf("left out %v, want %v", left, c.left)
				}
			}
		})
	}
}
