package decide

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/coalesce"
	"github.com/backendslice/backendslice/internal/publish"
	"github.com/backendslice/backendslice/internal/sliceplan"
	"github.com/backendslice/backendslice/providers"
)

// backend is a dual-stack backend with one port and a drain period of
// 30s, at generation 2, status observed at observed.
func backend(observed int64) *v1alpha1.ExternalBackend {
	return &v1alpha1.ExternalBackend{
		ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: "db", Generation: 2},
		Spec: v1alpha1.ExternalBackendSpec{
			AddressTypes: []v1alpha1.AddressType{v1alpha1.AddressTypeIPv4, v1alpha1.AddressTypeIPv6},
			DrainPeriod:  &metav1.Duration{Duration: 30 * time.Second},
			Service:      v1alpha1.ServiceSpec{Ports: []v1alpha1.ServicePort{{Name: "pg", Port: 5432, TargetPort: ptr.To[int32](5432), Protocol: "TCP"}}},
		},
		Status: v1alpha1.ExternalBackendStatus{ObservedGeneration: observed},
	}
}

// answer is one admitted source's answer of serving endpoints.
func answer(addrs ...string) Sources {
	var eps []providers.Endpoint
	for _, a := range addrs {
		eps = append(eps, providers.Endpoint{Address: a, Serving: true})
	}
	return Sources{Results: []publish.SourceResult{{Name: "s", Endpoints: eps}}, Grants: []Grant{{}}}
}

// restrictedTo is src with its one source restricted to cidr, as through
// a BackendProvider with allowedCIDRs.
func restrictedTo(src Sources, cidr string) Sources {
	allowed := []netip.Prefix{netip.MustParsePrefix(cidr)}
	src.Grants = []Grant{{Restricted: true, Allowed: allowed}}
	src.Results[0].Restricted, src.Results[0].Allowed = true, allowed
	return src
}

// slicesOf are our slices holding eps, as the planner writes them.
func slicesOf(eps ...publish.Endpoint) []discoveryv1.EndpointSlice {
	plan := sliceplan.Compute(sliceplan.Input{
		Template: sliceplan.Template{Namespace: "payments", ServiceName: "db",
			Labels: map[string]string{discoveryv1.LabelServiceName: "db"}},
		Desired:              publish.Groups(eps),
		MaxEndpointsPerSlice: 100,
	})
	var out []discoveryv1.EndpointSlice
	for _, s := range plan.Create {
		out = append(out, *s)
	}
	return out
}

func servedEndpoint(t discoveryv1.AddressType, addr string) publish.Endpoint {
	return publish.Endpoint{AddressType: t, Address: addr, Serving: true,
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("pg"), Port: ptr.To[int32](5432), Protocol: ptr.To(corev1.ProtocolTCP)}}}
}

// decided runs both halves of the decision, as the reconciler does with
// no probes.
func decided(in Inputs, mem Memory) (Publication, Memory) {
	in.Candidates = Normalize(in)
	return Decide(in, mem)
}

// TestDecide takes the decision through its cases: what the sources said,
// what the slices show, and what it publishes.
func TestDecide(t *testing.T) {
	now := time.Date(2026, 12, 3, 6, 0, 0, 0, time.UTC)
	both := sets.New(corev1.IPv4Protocol, corev1.IPv6Protocol)
	ipv4Only := sets.New(corev1.IPv4Protocol)
	old := servedEndpoint(discoveryv1.AddressTypeIPv4, "192.0.2.9")
	dual := []v1alpha1.AddressType{"IPv4", "IPv6"}
	window := coalesce.Window{Quiet: time.Second, Max: 5 * time.Second}
	type want struct {
		addresses []string // published, in order
		draining  []string
		dropped   []string
		families  []v1alpha1.AddressType
		notServed int
		held      bool
		requeue   time.Duration
		limit     string
	}
	for _, c := range []struct {
		name     string
		cfg      Config
		observed int64 // the backend's status.observedGeneration (2 is current)
		sources  Sources
		slices   []publish.Endpoint
		served   sets.Set[corev1.IPFamily]
		want     want
	}{
		{name: "both families, both served", observed: 2, served: both,
			sources: answer("192.0.2.1", "2001:db8::1"),
			want:    want{addresses: []string{"192.0.2.1", "2001:db8::1"}, families: dual}},
		{name: "single-stack cluster: IPv6 left out and counted, and no IPv6 family", observed: 2, served: ipv4Only,
			sources: answer("192.0.2.1", "2001:db8::1"),
			want:    want{addresses: []string{"192.0.2.1"}, families: []v1alpha1.AddressType{"IPv4"}, notServed: 1}},
		{name: "a denied address is dropped with a reason", observed: 2, served: both,
			cfg:     Config{DeniedPrefixes: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/28")}},
			sources: answer("192.0.2.1", "192.0.2.200"),
			want:    want{addresses: []string{"192.0.2.200"}, dropped: []string{"192.0.2.1"}, families: dual}},
		{name: "a vanished endpoint drains for the drain period", observed: 2, served: both,
			sources: answer("192.0.2.1"), slices: []publish.Endpoint{old},
			want: want{addresses: []string{"192.0.2.1", "192.0.2.9"}, draining: []string{"192.0.2.9"}, families: dual, requeue: 30 * time.Second}},
		{name: "a name normalisation drops (Kelvin sign) is not the published ASCII name, which drains", observed: 2, served: both,
			sources: answer("192.0.2.1", "\u212Aafka.example.com"), slices: []publish.Endpoint{servedEndpoint(discoveryv1.AddressTypeFQDN, "kafka.example.com")},
			want: want{addresses: []string{"192.0.2.1", "kafka.example.com"}, draining: []string{"kafka.example.com"}, dropped: []string{"\u212Aafka.example.com"},
				families: dual, requeue: 30 * time.Second}},
		{name: "a draining endpoint outside the provider's allowedCIDRs leaves at once", observed: 2, served: both,
			sources: restrictedTo(answer("192.0.2.1"), "192.0.2.0/31"), slices: []publish.Endpoint{old},
			want: want{addresses: []string{"192.0.2.1"}, families: dual}},
		{name: "every source refused, nothing remembered (a restart): what is published leaves at once", observed: 2, served: both,
			sources: Sources{Results: []publish.SourceResult{{Name: "s", Err: errors.New("refused")}}, Grants: []Grant{{Refused: true}}},
			slices:  []publish.Endpoint{old},
			want:    want{families: dual}},
		{name: "past --max-endpoints-per-backend each family keeps its ready endpoints first; a draining one goes at once", observed: 2, served: both,
			cfg:     Config{MaxEndpointsPerBackend: 1},
			sources: answer("192.0.2.10", "2001:db8::1"), slices: []publish.Endpoint{old},
			want: want{addresses: []string{"192.0.2.10", "2001:db8::1"}, families: dual, requeue: 30 * time.Second,
				limit: "1 endpoint(s) not published (IPv4 1): past the controller's limit of 1 endpoints of one address family per backend (--max-endpoints-per-backend), which publishes ready endpoints first, then by address"}},
		{name: "coalescing holds a provider change back: the slices' endpoints stay", observed: 2, served: both,
			cfg:     Config{Coalesce: window},
			sources: answer("192.0.2.1"), slices: []publish.Endpoint{old},
			want: want{addresses: []string{"192.0.2.9"}, families: dual, held: true, requeue: time.Second}},
		{name: "coalescing lets a spec change go out at once", observed: 1, served: both,
			cfg:     Config{Coalesce: window},
			sources: answer("192.0.2.1"), slices: []publish.Endpoint{old},
			want: want{addresses: []string{"192.0.2.1", "192.0.2.9"}, draining: []string{"192.0.2.9"}, families: dual, requeue: 30 * time.Second}},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := Inputs{Backend: backend(c.observed), Served: c.served, Now: now, Config: c.cfg}
			var mem Memory
			if c.cfg.Coalesce.Enabled() {
				// The window holds only changes after a first answer went out.
				first := in
				first.Sources = answer(old.Address)
				_, mem = decided(first, Memory{})
			}
			in.Sources, in.Published = c.sources, slicesOf(c.slices...)
			pub, _ := decided(in, mem)
			var got want
			for _, e := range pub.Endpoints {
				got.addresses = append(got.addresses, e.Address)
			}
			for _, d := range pub.Draining {
				got.draining = append(got.draining, d.Address)
			}
			for _, d := range pub.Dropped {
				got.dropped = append(got.dropped, d.Address)
			}
			got.families, got.notServed, got.held, got.requeue, got.limit = pub.Families, pub.NotServed.Total(), pub.Held, pub.RequeueAfter, pub.Limit
			slices.Sort(got.addresses)
			if !equalWant(got.addresses, c.want.addresses) || !equalWant(got.draining, c.want.draining) || !equalWant(got.dropped, c.want.dropped) ||
				!slices.Equal(got.families, c.want.families) || got.notServed != c.want.notServed || got.held != c.want.held || got.requeue != c.want.requeue ||
				got.limit != c.want.limit {
				t.Errorf("Decide:\n got %+v\nwant %+v", got, c.want)
			}
		})
	}
}

// equalWant compares two lists, nil and empty alike.
func equalWant(a, b []string) bool { return len(a) == len(b) && (len(a) == 0 || slices.Equal(a, b)) }

// TestDecideChangesNothing: the decision returns the memory to keep and
// leaves the one it was given as it was, so that a pass whose writes fail
// keeps the memory of the last pass that published: its retry starts the
// drains again from the slices and status, and a held answer is held
// from the pass that held it.
func TestDecideChangesNothing(t *testing.T) {
	now := time.Date(2026, 12, 3, 6, 0, 0, 0, time.UTC)
	old := servedEndpoint(discoveryv1.AddressTypeIPv4, "192.0.2.9")
	in := Inputs{Backend: backend(2), Served: sets.New(corev1.IPv4Protocol), Now: now,
		Config: Config{Coalesce: coalesce.Window{Quiet: time.Second, Max: 5 * time.Second}}, Sources: answer(old.Address)}
	_, published := decided(in, Memory{})

	in.Sources, in.Published = answer("192.0.2.1"), slicesOf(old)
	mem := Memory{Drains: []v1alpha1.DrainingEndpoint{{Address: "192.0.2.7", Since: metav1.NewTime(now.Add(-time.Second))}}, Burst: published.Burst}
	before := Memory{Drains: slices.Clone(mem.Drains), Burst: mem.Burst}
	pub, next := decided(in, mem)
	if !pub.Held {
		t.Fatalf("a provider change right after the first answer: %+v, want it held", pub)
	}
	if !slices.Equal(mem.Drains, before.Drains) || mem.Burst != before.Burst {
		t.Errorf("the memory given changed: %+v, was %+v", mem, before)
	}
	if next.Burst == mem.Burst {
		t.Error("the memory to keep does not start the window's burst")
	}
	// Kept, the burst ends when its quiet time is up; not kept (the writes
	// failed), the same answer a second later starts a burst of its own.
	in.Now = now.Add(time.Second)
	if pub, _ := decided(in, next); pub.Held {
		t.Error("kept: the answer is still held once the quiet time is up")
	}
	if pub, _ := decided(in, mem); !pub.Held {
		t.Error("not kept: the answer goes out at once, though no burst of it was kept")
	}
}
