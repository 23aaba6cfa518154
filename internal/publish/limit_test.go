package publish

import (
	"maps"
	"slices"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
)

func TestLimit(t *testing.T) {
	v4 := func(addr string) Endpoint {
		return Endpoint{AddressType: discoveryv1.AddressTypeIPv4, Address: addr, Serving: true}
	}
	v6 := func(addr string) Endpoint {
		return Endpoint{AddressType: discoveryv1.AddressTypeIPv6, Address: addr, Serving: true}
	}
	unhealthy := func(e Endpoint) Endpoint { e.Serving = false; return e }
	draining := func(e Endpoint) Endpoint { e.Terminating = true; return e }
	for _, c := range []struct {
		name string
		eps  []Endpoint
		most int
		kept []string
		left LeftOut
	}{{
		name: "no limit keeps all",
		eps:  []Endpoint{v4("192.0.2.3"), v4("192.0.2.1"), v4("192.0.2.2")},
		kept: []string{"192.0.2.3", "192.0.2.1", "192.0.2.2"},
		left: LeftOut{},
	}, {
		name: "at the limit keeps all",
		eps:  []Endpoint{v4("192.0.2.3"), v4("192.0.2.1")},
		most: 2,
		kept: []string{"192.0.2.3", "192.0.2.1"},
		left: LeftOut{},
	}, {
		name: "past it the lowest addresses stay, in numeric order, in their place",
		eps:  []Endpoint{v4("192.0.2.10"), v4("192.0.2.9"), v4("192.0.2.100"), v4("192.0.2.2")},
		most: 2,
		kept: []string{"192.0.2.9", "192.0.2.2"},
		left: LeftOut{"IPv4": 2},
	}, {
		name: "ready first, then serving, then the rest, whatever their address",
		eps: []Endpoint{unhealthy(v4("192.0.2.1")), draining(v4("192.0.2.2")), v4("192.0.2.9"),
			draining(unhealthy(v4("192.0.2.3"))), v4("192.0.2.8")},
		most: 3,
		kept: []string{"192.0.2.2", "192.0.2.9", "192.0.2.8"},
		left: LeftOut{"IPv4": 2},
	}, {
		name: "each family has the limit of its own",
		eps:  []Endpoint{v6("2001:db8::2"), v4("192.0.2.2"), v6("2001:db8::1"), v4("192.0.2.1"), v6("2001:db8::3")},
		most: 2,
		kept: []string{"2001:db8::2", "192.0.2.2", "2001:db8::1", "192.0.2.1"},
		left: LeftOut{"IPv6": 1},
	}, {
		name: "FQDN names in text order",
		eps: []Endpoint{{AddressType: discoveryv1.AddressTypeFQDN, Address: "b.example.com", Serving: true},
			{AddressType: discoveryv1.AddressTypeFQDN, Address: "a.example.com", Serving: true}},
		most: 1,
		kept: []string{"a.example.com"},
		left: LeftOut{"FQDN": 1},
	}} {
		t.Run(c.name, func(t *testing.T) {
			kept, left := Limit(c.eps, c.most)
			var got []string
			for _, e := range kept {
				got = append(got, e.Address)
			}
			if !slices.Equal(got, c.kept) {
				t.Errorf("kept %v, want %v", got, c.kept)
			}
			if !maps.Equal(left, c.left) {
				t.Errorf("left out %v, want %v", left, c.left)
			}
		})
	}
}

// TestLimitRotation: past the limit, endpoints coming and going among
// those left out leave the kept ones as they were, and so write nothing.
func TestLimitRotation(t *testing.T) {
	v4 := func(addr string) Endpoint {
		return Endpoint{AddressType: discoveryv1.AddressTypeIPv4, Address: addr, Serving: true}
	}
	base := []Endpoint{v4("192.0.2.1"), v4("192.0.2.2"), v4("192.0.2.3")}
	first, _ := Limit(append(slices.Clone(base), v4("198.51.100.7"), v4("203.0.113.9")), 3)
	second, left := Limit(append([]Endpoint{v4("203.0.113.200"), v4("198.51.100.1")}, base...), 3)
	if Fingerprint(first) != Fingerprint(second) || len(second) != 3 || left.Total() != 2 {
		t.Errorf("kept %v, then %v (left out %v): want the same three", first, second, left)
	}
}
