package publish

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"

	"github.com/backendslice/backendslice/internal/sliceplan"
)

// groupKey is the planner's identity of a port set, ignoring port order.
func groupKey(ports []discoveryv1.EndpointPort) string { return sliceplan.GroupKey("", ports) }

func port(name string, p int32) discoveryv1.EndpointPort {
	return discoveryv1.EndpointPort{Name: ptr.To(name), Port: ptr.To(p), Protocol: ptr.To(corev1.ProtocolTCP)}
}

func apiEndpoint(addr string, ready, serving, terminating *bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{
		Addresses:  []string{addr},
		Conditions: discoveryv1.EndpointConditions{Ready: ready, Serving: serving, Terminating: terminating},
	}
}

func TestReady(t *testing.T) {
	for _, c := range []struct{ serving, terminating, ready bool }{
		{true, false, true}, {true, true, false}, {false, false, false}, {false, true, false},
	} {
		if got := (Endpoint{Serving: c.serving, Terminating: c.terminating}).Ready(); got != c.ready {
			t.Errorf("serving=%v terminating=%v: Ready() = %v, want %v", c.serving, c.terminating, got, c.ready)
		}
	}
}

func TestFromSlices(t *testing.T) {
	pA := []discoveryv1.EndpointPort{port("pg", 5432)}
	pB := []discoveryv1.EndpointPort{port("pg", 6432)}
	withZone := apiEndpoint("192.0.2.1", ptr.To(true), ptr.To(true), ptr.To(false))
	withZone.Zone, withZone.Hostname = ptr.To("za"), ptr.To("db-1")
	slices := []discoveryv1.EndpointSlice{
		{
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       pA,
			Endpoints: []discoveryv1.Endpoint{
				withZone,
				// serving unset: the API defaults it to ready.
				apiEndpoint("192.0.2.2", ptr.To(true), nil, nil),
				apiEndpoint("192.0.2.3", ptr.To(false), nil, ptr.To(true)),
				apiEndpoint("192.0.2.4", nil, nil, nil),
				// serving set wins over ready.
				apiEndpoint("192.0.2.5", ptr.To(false), ptr.To(true), ptr.To(true)),
				{Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}, // no address: skipped
			},
		},
		{
			// A second slice holding 192.0.2.1 again (a stale cache): read once, first wins.
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       pB,
			Endpoints: []discoveryv1.Endpoint{
				apiEndpoint("192.0.2.1", ptr.To(false), ptr.To(false), ptr.To(true)),
				apiEndpoint("192.0.2.6", ptr.To(true), ptr.To(true), ptr.To(false)),
			},
		},
		{
			// The same text in another family is another endpoint.
			AddressType: discoveryv1.AddressTypeFQDN,
			Ports:       pA,
			Endpoints:   []discoveryv1.Endpoint{apiEndpoint("192.0.2.1", ptr.To(true), nil, nil)},
		},
	}
	want := []Endpoint{
		{AddressType: "IPv4", Address: "192.0.2.1", Zone: "za", Hostname: "db-1", Serving: true, Ports: pA},
		{AddressType: "IPv4", Address: "192.0.2.2", Serving: true, Ports: pA},
		{AddressType: "IPv4", Address: "192.0.2.3", Serving: false, Terminating: true, Ports: pA},
		{AddressType: "IPv4", Address: "192.0.2.4", Ports: pA},
		{AddressType: "IPv4", Address: "192.0.2.5", Serving: true, Terminating: true, Ports: pA},
		{AddressType: "IPv4", Address: "192.0.2.6", Serving: true, Ports: pB},
		{AddressType: "FQDN", Address: "192.0.2.1", Serving: true, Ports: pA},
	}
	got := FromSlices(slices)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("FromSlices\n got %+v\nwant %+v", got, want)
	}
	if FromSlices(nil) != nil {
		t.Error("FromSlices(nil) is not empty")
	}
}

func TestToAPIRoundTrip(t *testing.T) {
	for _, e := range []Endpoint{
		{AddressType: "IPv4", Address: "192.0.2.1", Zone: "za", Hostname: "h", Serving: true},
		{AddressType: "IPv4", Address: "192.0.2.2", Serving: true, Terminating: true},
		{AddressType: "IPv6", Address: "2001:db8::1"},
	} {
		api := e.toAPI()
		if len(api.Addresses) != 1 || api.Addresses[0] != e.Address {
			t.Errorf("%s: addresses %v", e.Address, api.Addresses)
		}
		if *api.Conditions.Ready != e.Ready() || *api.Conditions.Serving != e.Serving || *api.Conditions.Terminating != e.Terminating {
			t.Errorf("%s: conditions ready=%v serving=%v terminating=%v", e.Address,
				*api.Conditions.Ready, *api.Conditions.Serving, *api.Conditions.Terminating)
		}
		if (e.Zone == "") != (api.Zone == nil) || (e.Hostname == "") != (api.Hostname == nil) {
			t.Errorf("%s: empty zone or hostname must be unset: zone %v hostname %v", e.Address, api.Zone, api.Hostname)
		}
		back := FromSlices([]discoveryv1.EndpointSlice{{AddressType: e.AddressType, Endpoints: []discoveryv1.Endpoint{api}}})
		if len(back) != 1 || !reflect.DeepEqual(back[0], e) {
			t.Errorf("round trip of %+v gave %+v", e, back)
		}
	}
}

func TestGroups(t *testing.T) {
	pg := []discoveryv1.EndpointPort{port("pg", 5432)}
	pgOther := []discoveryv1.EndpointPort{port("pg", 6432)}
	two := []discoveryv1.EndpointPort{port("pg", 5432), port("admin", 8080)}
	twoSwapped := []discoveryv1.EndpointPort{port("admin", 8080), port("pg", 5432)}
	eps := []Endpoint{
		{AddressType: "IPv6", Address: "2001:db8::2", Serving: true, Ports: pg},
		{AddressType: "IPv4", Address: "192.0.2.9", Serving: true, Ports: pg},
		{AddressType: "IPv4", Address: "192.0.2.1", Serving: true, Terminating: true, Ports: pg},
		{AddressType: "IPv4", Address: "198.51.100.1", Serving: true, Ports: pgOther},
		{AddressType: "IPv6", Address: "2001:db8::1", Ports: pg},
		{AddressType: "FQDN", Address: "db.example.com", Serving: true, Ports: pg},
		{AddressType: "IPv4", Address: "203.0.113.2", Serving: true, Ports: two},
		{AddressType: "IPv4", Address: "203.0.113.1", Serving: true, Ports: twoSwapped},
	}
	groups := Groups(eps)
	type summary struct {
		typ   discoveryv1.AddressType
		ports string
		addrs []string
	}
	var got []summary
	for _, g := range groups {
		s := summary{typ: g.AddressType, ports: groupKey(g.Ports)}
		for _, e := range g.Endpoints {
			s.addrs = append(s.addrs, e.Addresses[0])
		}
		got = append(got, s)
	}
	want := []summary{
		{"FQDN", groupKey(pg), []string{"db.example.com"}},
		{"IPv4", groupKey(two), []string{"203.0.113.1", "203.0.113.2"}},
		{"IPv4", groupKey(pg), []string{"192.0.2.1", "192.0.2.9"}},
		{"IPv4", groupKey(pgOther), []string{"198.51.100.1"}},
		{"IPv6", groupKey(pg), []string{"2001:db8::1", "2001:db8::2"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Groups\n got %+v\nwant %+v", got, want)
	}
	// Conditions come from toAPI.
	for _, g := range groups {
		for _, e := range g.Endpoints {
			if e.Addresses[0] == "192.0.2.1" && (*e.Conditions.Ready || !*e.Conditions.Terminating || !*e.Conditions.Serving) {
				t.Errorf("192.0.2.1 conditions %+v, want ready=false serving=true terminating=true", e.Conditions)
			}
		}
	}
	// Same input in another order gives the same groups.
	rev := make([]Endpoint, len(eps))
	for i, e := range eps {
		rev[len(eps)-1-i] = e
	}
	again := Groups(rev)
	if len(again) != len(groups) {
		t.Fatalf("reversed input gave %d groups, want %d", len(again), len(groups))
	}
	for i := range groups {
		if groups[i].AddressType != again[i].AddressType || groupKey(groups[i].Ports) != groupKey(again[i].Ports) ||
			!reflect.DeepEqual(groups[i].Endpoints, again[i].Endpoints) {
			t.Errorf("group %d differs for reversed input:\n%+v\n%+v", i, groups[i], again[i])
		}
	}
	if g := Groups(nil); len(g) != 0 {
		t.Errorf("Groups(nil) = %+v", g)
	}
}

func TestGroupsByPortSet(t *testing.T) {
	base := []discoveryv1.EndpointPort{port("a", 1), port("b", 2)}
	swapped := []discoveryv1.EndpointPort{port("b", 2), port("a", 1)}
	// The API server defaults a missing protocol to TCP: the same port set.
	noProto := []discoveryv1.EndpointPort{{Name: ptr.To("a"), Port: ptr.To[int32](1)}, port("b", 2)}
	udp := []discoveryv1.EndpointPort{{Name: ptr.To("a"), Port: ptr.To[int32](1), Protocol: ptr.To(corev1.ProtocolUDP)}, port("b", 2)}
	app := []discoveryv1.EndpointPort{port("a", 1), port("b", 2)}
	app[0].AppProtocol = ptr.To("http")
	other := []discoveryv1.EndpointPort{port("a", 3), port("b", 2)}
	ep := func(addr string, ports []discoveryv1.EndpointPort) Endpoint {
		return Endpoint{AddressType: "IPv4", Address: addr, Ports: ports}
	}
	same := Groups([]Endpoint{ep("192.0.2.1", base), ep("192.0.2.2", swapped), ep("192.0.2.3", noProto)})
	if len(same) != 1 || len(same[0].Endpoints) != 3 {
		t.Errorf("ports differing in order or a defaulted protocol gave %d group(s), want 1", len(same))
	}
	distinct := Groups([]Endpoint{ep("192.0.2.1", base), ep("192.0.2.2", udp), ep("192.0.2.3", app), ep("192.0.2.4", other), ep("192.0.2.5", base[:1]), ep("192.0.2.6", nil)})
	if len(distinct) != 6 {
		t.Errorf("six port sets gave %d group(s), want 6", len(distinct))
	}
}

func TestFingerprint(t *testing.T) {
	a := Endpoint{AddressType: discoveryv1.AddressTypeIPv4, Address: "10.0.0.1", Zone: "a", Serving: true,
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("pg"), Port: ptr.To[int32](5432)}}}
	b := Endpoint{AddressType: discoveryv1.AddressTypeIPv6, Address: "2001:db8::1", Hostname: "db-1", Serving: true}
	base := Fingerprint([]Endpoint{a, b})
	if got := Fingerprint([]Endpoint{b, a}); got != base {
		t.Errorf("order changed the fingerprint: %x, want %x", got, base)
	}
	if Fingerprint(nil) == base {
		t.Error("no endpoints have the fingerprint of two")
	}
	changes := map[string]func(*Endpoint){
		"address":     func(e *Endpoint) { e.Address = "10.0.0.2" },
		"family":      func(e *Endpoint) { e.AddressType = discoveryv1.AddressTypeFQDN },
		"zone":        func(e *Endpoint) { e.Zone = "b" },
		"hostname":    func(e *Endpoint) { e.Hostname = "db-0" },
		"serving":     func(e *Endpoint) { e.Serving = false },
		"terminating": func(e *Endpoint) { e.Terminating = true },
		"port": func(e *Endpoint) {
			e.Ports = []discoveryv1.EndpointPort{{Name: ptr.To("pg"), Port: ptr.To[int32](5433)}}
		},
		"port name": func(e *Endpoint) {
			e.Ports = []discoveryv1.EndpointPort{{Name: ptr.To("sql"), Port: ptr.To[int32](5432)}}
		},
		"no ports": func(e *Endpoint) { e.Ports = nil },
	}
	for name, change := range changes {
		c := a
		change(&c)
		if Fingerprint([]Endpoint{c, b}) == base {
			t.Errorf("changing the %s left the fingerprint as it was", name)
		}
	}
}
