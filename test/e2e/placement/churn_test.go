package placement_test

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/sliceplan"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

const (
	// limit is the backends' maxEndpointsPerSlice: 100 IPv4 endpoints make
	// three full slices and one of 10, and a volatile slice takes a tenth,
	// 3 endpoints: the flappers.
	limit = 30
	// flappers is how many endpoints flap, each from another full slice.
	flappers = 3
	// volatileAt is the flip that makes the flappers volatile: 3 changes
	// within the minute do (DefaultChurn), and their first publication,
	// moments before, is the first (sliceplan.Changed counts an endpoint
	// added as changed).
	volatileAt = 2
	// flips is how many times the flappers' health flips in each run.
	flips = 6
	// quiet is how long a restarted controller is watched for writes.
	quiet = 3 * time.Second
)

// addresses are the backends' endpoints: 100 IPv4 addresses from the
// three documentation ranges and 4 IPv6 ones, which a dual-stack API
// server gets in slices of their own family.
func addresses() []string {
	var out []string
	for i := 1; i <= 40; i++ {
		out = append(out, fmt.Sprintf("192.0.2.%d", i), fmt.Sprintf("198.51.100.%d", i))
	}
	for i := 1; i <= 20; i++ {
		// Below framework.TestDenied (203.0.113.128/25).
		out = append(out, fmt.Sprintf("203.0.113.%d", i))
	}
	for i := 1; i <= 4; i++ {
		out = append(out, fmt.Sprintf("2001:db8::%d", i))
	}
	return out
}

// backend is a backend of static endpoints, each with its health.
type backend struct {
	xb     *v1alpha1.ExternalBackend
	health map[string]v1alpha1.Health
}

// newBackend creates a backend of addresses(), all healthy, in a namespace
// of its own, and waits until it publishes them.
func newBackend(t *testing.T) *backend {
	t.Helper()
	b := &backend{health: map[string]v1alpha1.Health{}}
	for _, a := range addresses() {
		b.health[a] = v1alpha1.HealthHealthy
	}
	b.xb = framework.Backend(framework.Namespace(t), "db", v1alpha1.Source{Name: "fixed", Static: &v1alpha1.StaticSource{}})
	b.xb.Spec.MaxEndpointsPerSlice = ptr.To[int32](limit)
	b.setSpec(b.xb)
	framework.Create(t, b.xb)
	framework.WaitReady(t, b.xb)
	b.expectPublished(t, framework.WaitStates(t, b.xb.Namespace, "db", b.want()))
	return b
}

// setSpec writes the health of every address into xb's static source.
func (b *backend) setSpec(xb *v1alpha1.ExternalBackend) {
	eps := make([]v1alpha1.StaticEndpoint, 0, len(b.health))
	for _, a := range addresses() {
		eps = append(eps, v1alpha1.StaticEndpoint{Address: a, Health: b.health[a]})
	}
	xb.Spec.Sources[0].Static.Endpoints = eps
}

// want is what the slices must publish: each served address with the
// conditions of its health (see framework.States).
func (b *backend) want() map[string]string {
	out := map[string]string{}
	for a, h := range framework.ServedOf(b.health) {
		out[a] = map[v1alpha1.Health]string{v1alpha1.HealthHealthy: "true/true/false", v1alpha1.HealthUnhealthy: "false/false/false"}[h]
	}
	return out
}

// expectPublished checks that sl publish every served address exactly
// once, each in a slice of its family, with the health the spec gives it.
func (b *backend) expectPublished(t *testing.T, sl []discoveryv1.EndpointSlice) {
	t.Helper()
	for _, s := range sl {
		for _, e := range s.Endpoints {
			ip, err := netip.ParseAddr(e.Addresses[0])
			if err != nil || ip.Is4() != (s.AddressType == discoveryv1.AddressTypeIPv4) {
				t.Errorf("slice %s of type %s holds %s", s.Name, s.AddressType, e.Addresses[0])
			}
		}
	}
	got, err := framework.States(sl)
	if err != nil {
		t.Fatal(err)
	}
	if want := b.want(); !maps.Equal(got, want) {
		t.Fatalf("the slices publish %v, the spec says %v", got, want)
	}
}

// step is what one flip wrote.
type step struct {
	// requests are the controller's write requests to the namespace's
	// slices.
	requests int64
	// written are the slices created, changed or deleted, by name.
	written []string
	// slices are the slices after the flip.
	slices []discoveryv1.EndpointSlice
}

// flip sets the health of addrs, waits until the controller has observed
// the change, and checks that the slices publish it right then: the
// controller never holds a change back, wherever it places the endpoints.
func (b *backend) flip(t *testing.T, addrs []string, h v1alpha1.Health) step {
	t.Helper()
	ns := b.xb.Namespace
	before, requests := versions(framework.Slices(t, ns, "db")), writes.Of(ns, "endpointslices")
	for _, a := range addrs {
		b.health[a] = h
	}
	framework.Edit(t, b.xb, b.setSpec)
	// The status follows the pass's slice writes: once it reports the
	// generation, the slices must show it.
	framework.WaitReady(t, b.xb)
	sl := framework.Slices(t, ns, "db")
	b.expectPublished(t, sl)
	return step{requests: writes.Of(ns, "endpointslices") - requests, written: changed(before, versions(sl)), slices: sl}
}

// versions maps each slice's name to its resource version.
func versions(sl []discoveryv1.EndpointSlice) map[string]string {
	out := make(map[string]string, len(sl))
	for _, s := range sl {
		out[s.Name] = s.ResourceVersion
	}
	return out
}

// changed names the slices created, changed or deleted between two
// versions maps, sorted.
func changed(before, after map[string]string) []string {
	out := sets.New[string]()
	for name, v := range after {
		if before[name] != v {
			out.Insert(name)
		}
	}
	for name := range before {
		if _, ok := after[name]; !ok {
			out.Insert(name)
		}
	}
	return sets.List(out)
}

// pickFlappers picks one endpoint from each of flappers full IPv4 slices,
// and returns them with the names of their slices.
func pickFlappers(t *testing.T, sl []discoveryv1.EndpointSlice) (addrs, full []string) {
	t.Helper()
	for _, s := range sl {
		if s.AddressType == discoveryv1.AddressTypeIPv4 && len(s.Endpoints) == limit && len(addrs) < flappers {
			addrs = append(addrs, s.Endpoints[len(s.Endpoints)/2].Addresses[0])
			full = append(full, s.Name)
		}
	}
	if len(addrs) < flappers {
		t.Fatalf("%d full IPv4 slices of %d, want %d: %v", len(full), limit, flappers, full)
	}
	slices.Sort(addrs)
	return addrs, full
}

// volatileSlices are the slices marked volatile, with their addresses.
func volatileSlices(sl []discoveryv1.EndpointSlice) map[string][]string {
	out := map[string][]string{}
	for _, s := range sl {
		if s.Annotations[sliceplan.VolatileAnnotation] != sliceplan.VolatileValue {
			continue
		}
		var addrs []string
		for _, e := range s.Endpoints {
			addrs = append(addrs, e.Addresses[0])
		}
		slices.Sort(addrs)
		out[s.Name] = addrs
	}
	return out
}

// restart restarts the controller and waits until the new one has
// reconciled a backend: its caches are filled, and it has seen the slices
// it finds.
func restart(t *testing.T) {
	t.Helper()
	framework.RestartController(t)
	framework.Eventually(t, framework.Timeout, "the new controller reconciling", func() error {
		if n, _ := framework.MetricValue(t, "backendslice_reconciles_total", map[string]string{"result": "success"}); n == 0 {
			return fmt.Errorf("no reconcile yet")
		}
		return nil
	})
}

// healthAt is the flappers' health after flip i (from 1): unhealthy on odd
// flips, healthy again on even ones.
func healthAt(i int) v1alpha1.Health {
	if i%2 == 1 {
		return v1alpha1.HealthUnhealthy
	}
	return v1alpha1.HealthHealthy
}

// TestFlappersGatherInOneSmallSlice flips the health of three endpoints
// that sit in three full slices, together, again and again, with
// churn-aware placement on (the default 1m window, 3 changes):
//   - the first flip writes the three full slices, as without it;
//   - the second, their third change (their publication was the first),
//     makes them volatile and moves them into one new slice marked
//     volatile that holds exactly them (one write more);
//   - every later flip writes that slice alone, never a full one;
//   - at every flip the slices publish the spec's health as soon as the
//     status reports the generation: placement never holds a change back;
//   - a restarted controller writes nothing while quiet, the volatile
//     slice keeps them, and their next flip still writes it alone.
//
// Then, side by side, the controller runs with churn-aware placement off
// (Churn.Window 0) and a second backend goes through the same flips: every
// flip writes the three full slices, and no slice is marked volatile. That
// run shows the counts above are what placement saves, not what any
// controller does.
func TestFlappersGatherInOneSmallSlice(t *testing.T) {
	on := newBackend(t)
	addrs, full := pickFlappers(t, framework.Slices(t, on.xb.Namespace, "db"))
	t.Logf("flappers %v in slices %v", addrs, full)
	var onWrites []int64
	var gathered string
	for i := 1; i <= flips; i++ {
		s := on.flip(t, addrs, healthAt(i))
		onWrites = append(onWrites, s.requests)
		vol := volatileSlices(s.slices)
		switch {
		case i < volatileAt:
			if len(vol) != 0 || s.requests != flappers || !slices.Equal(s.written, full) {
				t.Fatalf("flip %d, before the flappers are volatile: %d slice writes to %v, volatile slices %v; want %d writes to %v and none volatile",
					i, s.requests, s.written, vol, flappers, full)
			}
		case i == volatileAt:
			if len(vol) != 1 {
				t.Fatalf("flip %d made the flappers volatile: volatile slices %v, want one holding %v", i, vol, addrs)
			}
			for name, held := range vol {
				gathered = name
				if !slices.Equal(held, addrs) {
					t.Fatalf("volatile slice %s holds %v, want exactly the flappers %v", name, held, addrs)
				}
			}
			if want := append(slices.Clone(full), gathered); s.requests != flappers+1 || !sets.New(s.written...).Equal(sets.New(want...)) {
				t.Errorf("flip %d, gathering: %d slice writes to %v, want %d: the full slices they leave and the new one, %v",
					i, s.requests, s.written, flappers+1, want)
			}
		default:
			if s.requests != 1 || !slices.Equal(s.written, []string{gathered}) {
				t.Errorf("flip %d, once gathered: %d slice writes to %v, want 1 to the volatile slice %s", i, s.requests, s.written, gathered)
			}
			if held := vol[gathered]; len(vol) != 1 || !slices.Equal(held, addrs) {
				t.Errorf("flip %d: volatile slices %v, want only %s holding %v", i, vol, gathered, addrs)
			}
		}
	}

	// A restart: the volatile mark is on the slice, the history in memory.
	ns := on.xb.Namespace
	before, requests := versions(framework.Slices(t, ns, "db")), writes.Of(ns, "endpointslices")
	restart(t)
	time.Sleep(quiet)
	sl := framework.Slices(t, ns, "db")
	if n, w := writes.Of(ns, "endpointslices")-requests, changed(before, versions(sl)); n != 0 || len(w) != 0 {
		t.Errorf("the restarted controller made %d slice writes to %v in %s of quiet, want none", n, w, quiet)
	}
	if vol := volatileSlices(sl); len(vol) != 1 || !slices.Equal(vol[gathered], addrs) {
		t.Errorf("after the restart: volatile slices %v, want %s holding %v", vol, gathered, addrs)
	}
	on.expectPublished(t, sl)
	// The flappers are not volatile to the new controller yet, but they sit
	// in their slice already: their next flip writes it alone.
	if s := on.flip(t, addrs, healthAt(flips+1)); s.requests != 1 || !slices.Equal(s.written, []string{gathered}) {
		t.Errorf("the first flip after the restart: %d slice writes to %v, want 1 to %s", s.requests, s.written, gathered)
	}

	// Side by side: the same flips with churn-aware placement off.
	churnOff.Store(true)
	restart(t)
	t.Cleanup(func() {
		churnOff.Store(false)
		restart(t)
	})
	off := newBackend(t)
	offAddrs, offFull := pickFlappers(t, framework.Slices(t, off.xb.Namespace, "db"))
	var offWrites []int64
	for i := 1; i <= flips; i++ {
		s := off.flip(t, offAddrs, healthAt(i))
		offWrites = append(offWrites, s.requests)
		if vol := volatileSlices(s.slices); len(vol) != 0 {
			t.Errorf("flip %d with churn-aware placement off: volatile slices %v", i, vol)
		}
		if s.requests != flappers || !slices.Equal(s.written, offFull) {
			t.Errorf("flip %d with churn-aware placement off: %d slice writes to %v, want %d, to the full slices %v",
				i, s.requests, s.written, flappers, offFull)
		}
	}
	t.Logf("slice writes per flip of %d flappers in %d full slices: on %v, off %v", flappers, flappers, onWrites, offWrites)
}
