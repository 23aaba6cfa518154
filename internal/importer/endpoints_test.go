package importer

import (
	"strings"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"

	"github.com/backendslice/backendslice/api/v1alpha1"
)

func TestHealthOf(t *testing.T) {
	yes, no := ptr.To(true), ptr.To(false)
	for _, tc := range []struct {
		name    string
		c       discoveryv1.EndpointConditions
		want    v1alpha1.Health
		changed string // a word of the note, "" when the conditions carry over as they are
	}{
		{name: "unset reads as ready", c: discoveryv1.EndpointConditions{}, want: ""},
		{name: "ready", c: discoveryv1.EndpointConditions{Ready: yes, Serving: yes, Terminating: no}, want: ""},
		{name: "not ready, not serving", c: discoveryv1.EndpointConditions{Ready: no, Serving: no}, want: v1alpha1.HealthUnhealthy},
		{name: "draining", c: discoveryv1.EndpointConditions{Ready: no, Serving: yes, Terminating: yes}, want: v1alpha1.HealthDraining},
		{name: "draining, serving unset", c: discoveryv1.EndpointConditions{Ready: no, Terminating: yes}, want: v1alpha1.HealthDraining},
		{name: "mirrored not-ready address", c: discoveryv1.EndpointConditions{Ready: no}, want: v1alpha1.HealthUnhealthy, changed: "unset, which reads as true"},
		{name: "not ready yet serving", c: discoveryv1.EndpointConditions{Ready: no, Serving: yes, Terminating: no}, want: v1alpha1.HealthUnhealthy, changed: "serving=false (Unhealthy)"},
		{name: "ready while terminating", c: discoveryv1.EndpointConditions{Ready: yes, Serving: yes, Terminating: yes}, want: v1alpha1.HealthDraining, changed: "ready=true while terminating"},
		{name: "terminating, not serving", c: discoveryv1.EndpointConditions{Ready: no, Serving: no, Terminating: yes}, want: v1alpha1.HealthUnhealthy, changed: "terminating=false"},
		{name: "ready, not serving", c: discoveryv1.EndpointConditions{Ready: yes, Serving: no}, want: "", changed: "serving=true (Healthy)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, note := healthOf(tc.c)
			if got != tc.want {
				t.Errorf("health %q, want %q", got, tc.want)
			}
			if (note == "") != (tc.changed == "") || !strings.Contains(note, tc.changed) {
				t.Errorf("note %q, want one saying %q", note, tc.changed)
			}
		})
	}
}

func TestReadAddress(t *testing.T) {
	for _, tc := range []struct {
		address string
		t       discoveryv1.AddressType
		want    string
		family  v1alpha1.AddressType
		why     string
	}{
		{address: "192.0.2.1", t: discoveryv1.AddressTypeIPv4, want: "192.0.2.1", family: v1alpha1.AddressTypeIPv4},
		{address: "2001:DB8:0::1", t: discoveryv1.AddressTypeIPv6, want: "2001:db8::1", family: v1alpha1.AddressTypeIPv6},
		{address: "2001:db8::1", t: "", want: "2001:db8::1", family: v1alpha1.AddressTypeIPv6},
		{address: "Origin.Example.com.", t: discoveryv1.AddressTypeFQDN, want: "origin.example.com", family: v1alpha1.AddressTypeFQDN},
		{address: "2001:db8::1", t: discoveryv1.AddressTypeIPv4, why: "an IPv6 address in a slice of addressType IPv4"},
		{address: "::ffff:192.0.2.1", t: discoveryv1.AddressTypeIPv6, why: "write 192.0.2.1 in an IPv4 slice"},
		{address: "fe80::1%eth0", t: discoveryv1.AddressTypeIPv6, why: "zone"},
		{address: "192.0.2.300", t: discoveryv1.AddressTypeIPv4, why: "not an IP address"},
		{address: "not_a name", t: discoveryv1.AddressTypeFQDN, why: "not a DNS name"},
	} {
		t.Run(tc.address, func(t *testing.T) {
			got, family, why := readAddress(tc.address, tc.t)
			if got != tc.want || family != tc.family || (why == "") != (tc.why == "") || !strings.Contains(why, tc.why) {
				t.Errorf("readAddress(%q, %q) = %q, %q, %q; want %q, %q, %q", tc.address, tc.t, got, family, why, tc.want, tc.family, tc.why)
			}
		})
	}
}

func TestChoosePorts(t *testing.T) {
	port := func(name string, n int32) discoveryv1.EndpointPort {
		return discoveryv1.EndpointPort{Name: ptr.To(name), Port: ptr.To(n)}
	}
	slice := func(origin string, ports []discoveryv1.EndpointPort, addrs ...string) group {
		g := group{origin: origin, addressType: discoveryv1.AddressTypeIPv4, ports: ports}
		for _, a := range addrs {
			g.endpoints = append(g.endpoints, discoveryv1.Endpoint{Addresses: []string{a}})
		}
		return g
	}
	for _, tc := range []struct {
		name     string
		groups   []group
		wantSet  string
		wantKept []string
		notes    []string
	}{
		{
			name:     "one set",
			groups:   []group{slice("a", []discoveryv1.EndpointPort{port("http", 8080)}, "192.0.2.1"), slice("b", []discoveryv1.EndpointPort{port("http", 8080)}, "192.0.2.2")},
			wantSet:  "{http:8080/TCP}",
			wantKept: []string{"192.0.2.1", "192.0.2.2"},
		},
		{
			name: "the set of the most endpoints",
			groups: []group{
				slice("a", []discoveryv1.EndpointPort{port("http", 8081)}, "192.0.2.1"),
				slice("b", []discoveryv1.EndpointPort{port("http", 8080)}, "192.0.2.2", "192.0.2.3"),
			},
			wantSet:  "{http:8080/TCP}",
			wantKept: []string{"192.0.2.2", "192.0.2.3"},
			notes:    []string{"left out: a: endpoint 192.0.2.1: reached on ports {http:8081/TCP}, while most endpoints are on {http:8080/TCP}"},
		},
		{
			name: "a tie goes to the set that sorts first, whatever the order",
			groups: []group{
				slice("b", []discoveryv1.EndpointPort{port("http", 8081)}, "192.0.2.2"),
				slice("a", []discoveryv1.EndpointPort{port("http", 8080)}, "192.0.2.1"),
			},
			wantSet:  "{http:8080/TCP}",
			wantKept: []string{"192.0.2.1"},
			notes:    []string{"left out: b: endpoint 192.0.2.2"},
		},
		{
			name:     "a port without a number is not read",
			groups:   []group{slice("a", []discoveryv1.EndpointPort{port("http", 8080), {Name: ptr.To("all")}}, "192.0.2.1")},
			wantSet:  "{http:8080/TCP}",
			wantKept: []string{"192.0.2.1"},
			notes:    []string{`left out: a: port "all" has no number`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nb := &notebook{}
			set, kept := choosePorts(candidates(tc.groups, nb), nb)
			var addrs []string
			for _, c := range kept {
				addrs = append(addrs, c.endpoint.Address)
			}
			if set.String() != tc.wantSet || strings.Join(addrs, ",") != strings.Join(tc.wantKept, ",") {
				t.Errorf("chose %s for %q, want %s for %q", set, addrs, tc.wantSet, tc.wantKept)
			}
			assertNotes(t, nb.notes(), tc.notes...)
		})
	}
}

// assertNotes checks that notes are as many as want, each starting with
// its want, in order.
func assertNotes(t *testing.T, notes []Note, want ...string) {
	t.Helper()
	if len(notes) != len(want) {
		t.Fatalf("%d notes %q, want %d", len(notes), notes, len(want))
	}
	for i, n := range notes {
		if !strings.HasPrefix(n.String(), want[i]) {
			t.Errorf("note %d is %q, want it to start with %q", i, n, want[i])
		}
	}
}

func TestNotebookMergesEndpoints(t *testing.T) {
	nb := &notebook{}
	for _, a := range []string{"192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4", "192.0.2.5", "192.0.2.6", "192.0.2.7", "192.0.2.8", "192.0.2.9", "192.0.2.10"} {
		nb.endpoint(Changed, "EndpointSlice ns/a", a, "not ready")
	}
	nb.endpoint(Changed, "EndpointSlice ns/b", "192.0.2.11", "not ready")
	nb.add(Info, "EndpointSlice ns/a", "a note on the slice")
	assertNotes(t, nb.notes(),
		"changed: EndpointSlice ns/a: endpoints 192.0.2.1, 192.0.2.2, 192.0.2.3, 192.0.2.4, 192.0.2.5, 192.0.2.6, 192.0.2.7, 192.0.2.8 and 2 more: not ready",
		"changed: EndpointSlice ns/b: endpoint 192.0.2.11: not ready",
		"note: EndpointSlice ns/a: a note on the slice")
}

func TestDedupe(t *testing.T) {
	c := func(origin, addr, zone string) candidate {
		return candidate{origin: origin, endpoint: v1alpha1.StaticEndpoint{Address: addr, Zone: zone}}
	}
	nb := &notebook{}
	kept := dedupe([]candidate{c("a", "192.0.2.1", "z1"), c("b", "192.0.2.1", "z1"), c("c", "192.0.2.1", "z2"), c("c", "192.0.2.2", "z2")}, nb)
	if len(kept) != 2 || kept[0].origin != "a" || kept[1].endpoint.Address != "192.0.2.2" {
		t.Errorf("kept %+v", kept)
	}
	assertNotes(t, nb.notes(),
		"note: b: endpoint 192.0.2.1: also in a: carried once",
		"changed: c: endpoint 192.0.2.1: also in a with other conditions, zone or hostname: carried as there")
}
