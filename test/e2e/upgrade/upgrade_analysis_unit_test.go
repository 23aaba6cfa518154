package upgrade_test

import (
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/replica"
)

// TestUpgradeAnalysis checks the replay TestRollingUpgrade judges an
// upgrade by, on made-up events: a check that could not fail would let an
// upgrade that loses endpoints or rewrites slices pass.
func TestUpgradeAnalysis(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ep := func(addr string, ready bool) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready), Serving: ptr.To(ready), Terminating: ptr.To(false)}}
	}
	slice := func(name, svc string, rv string, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv, Labels: map[string]string{discoveryv1.LabelServiceName: svc}}, Endpoints: eps}
	}
	relabelled := slice("web-0", "web", "3", ep("192.0.2.1", true), ep("192.0.2.2", true))
	relabelled.Labels["other"] = "x"
	lease := func(holder string) *coordinationv1.Lease {
		return &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder)}}
	}
	// Before the upgrade (at 1000 ms): both Services published, the flip
	// backend's 203.0.113.121 serving.
	base := []event{
		{at: at(0), kind: kindSlice, verb: verbAdd, obj: slice("web-0", "web", "1", ep("192.0.2.1", true), ep("192.0.2.2", true))},
		{at: at(0), kind: kindSlice, verb: verbAdd, obj: slice("flip-0", "flip", "1", ep("203.0.113.121", true))},
		{at: at(0), kind: kindLease, verb: verbAdd, obj: lease("old-a")},
	}
	web1 := base[0].obj
	flip1 := base[1].obj
	cases := []struct {
		name    string
		events  []event
		flips   []replica.Flip
		during  []time.Duration
		flipped int
		extra   []string
		broken  []string
		lost    []string
	}{
		{name: "a flip published by its own write", flips: []replica.Flip{{At: at(2000), Addr: "203.0.113.121", Serving: false}},
			events:  []event{{at: at(2300), kind: kindSlice, verb: verbUpdate, old: flip1, obj: slice("flip-0", "flip", "2", ep("203.0.113.121", false))}},
			during:  []time.Duration{300 * time.Millisecond},
			flipped: 1},
		{name: "a flip never published", flips: []replica.Flip{{At: at(2000), Addr: "203.0.113.121", Serving: false}},
			lost: []string{"203.0.113.121 serving=false"}},
		{name: "an endpoint dropped and written back", events: []event{
			{at: at(2000), kind: kindSlice, verb: verbUpdate, old: web1, obj: slice("web-0", "web", "2", ep("192.0.2.1", true))},
			{at: at(2100), kind: kindSlice, verb: verbUpdate, old: slice("web-0", "web", "2", ep("192.0.2.1", true)), obj: slice("web-0", "web", "3", ep("192.0.2.1", true), ep("192.0.2.2", true))},
		}, extra: []string{"changed endpoints", "changed endpoints"}, broken: []string{"192.0.2.2 missing in Service web"}},
		{name: "a slice deleted and created again", events: []event{
			{at: at(2000), kind: kindSlice, verb: verbDelete, obj: web1},
			{at: at(2100), kind: kindSlice, verb: verbAdd, obj: slice("web-1", "web", "5", ep("192.0.2.1", true), ep("192.0.2.2", true))},
		}, extra: []string{"delete", "add"}, broken: []string{"192.0.2.1 missing", "192.0.2.2 missing"}},
		{name: "a slice created before the old one goes", events: []event{
			{at: at(2000), kind: kindSlice, verb: verbAdd, obj: slice("web-1", "web", "5", ep("192.0.2.1", true), ep("192.0.2.2", true))},
			{at: at(2100), kind: kindSlice, verb: verbDelete, obj: web1},
		}, extra: []string{"add", "delete"}, broken: []string{"192.0.2.1 in 2 slices", "192.0.2.2 in 2 slices"}},
		{name: "a relabelled slice", events: []event{{at: at(2000), kind: kindSlice, verb: verbUpdate, old: web1, obj: relabelled}},
			extra: []string{"changed labels"}},
		{name: "a slice rewritten as it was", events: []event{{at: at(2000), kind: kindSlice, verb: verbUpdate, old: web1,
			obj: slice("web-0", "web", "2", ep("192.0.2.1", true), ep("192.0.2.2", true))}},
			extra: []string{"nothing changed"}},
		{name: "a steady endpoint turned not ready", events: []event{{at: at(2000), kind: kindSlice, verb: verbUpdate, old: web1,
			obj: slice("web-0", "web", "2", ep("192.0.2.1", true), ep("192.0.2.2", false))}},
			extra: []string{"conditions of 192.0.2.2, which no flip changed"}, broken: []string{"192.0.2.2 not ready"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			u := upgradeRun{start: at(1000), end: at(5000), expected: map[string]map[string]bool{
				"web": {"192.0.2.1": true, "192.0.2.2": true}, "flip": {"203.0.113.121": true},
			}}
			f := flipped{name: "flip", addrs: []string{"203.0.113.121"}, flips: c.flips}
			res := u.analyse(append(append([]event(nil), base...), c.events...), f)
			if len(res.during) != len(c.during) || (len(c.during) > 0 && res.during[0] != c.during[0]) {
				t.Errorf("flip times %v, want %v", res.during, c.during)
			}
			if res.flipWrites != c.flipped {
				t.Errorf("%d writes of flips, want %d", res.flipWrites, c.flipped)
			}
			contains(t, "writes beyond the flips'", res.extra, c.extra)
			contains(t, "endpoints not kept", res.broken, c.broken)
			contains(t, "unpublished flips", res.unpublished, c.lost)
		})
	}
}

// TestStatusWrites checks how status writes are counted: the flipped
// backend's apart, each other one's said with what it changed, and the
// last of those timed from the upgrade's start.
func TestStatusWrites(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	backend := func(name, ready string) *v1alpha1.ExternalBackend {
		return &v1alpha1.ExternalBackend{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: v1alpha1.ExternalBackendStatus{ReadyEndpoints: ready}}
	}
	write := func(ms int, name, was, now string) event {
		return event{at: t0.Add(time.Duration(ms) * time.Millisecond), kind: kindBackend, verb: verbUpdate, old: backend(name, was), obj: backend(name, now)}
	}
	events := []event{
		write(500, "a", "", "1/1"), // before the upgrade: not counted
		write(1200, "flip", "1/2", "2/2"),
		write(2500, "a", "", "1/1"),
		write(4000, "b", "", "2/2"),
		{at: t0.Add(4500 * time.Millisecond), kind: kindBackend, verb: verbAdd, obj: backend("c", "")}, // the test's own create
	}
	u := upgradeRun{start: t0.Add(time.Second), end: t0.Add(5 * time.Second)}
	res := u.analyse(events, flipped{name: "flip"})
	if res.statusFlip != 1 || res.statusOther != 2 || res.lastOtherStatus != 3*time.Second {
		t.Errorf("status writes: %d of the flipped backend, %d others, the last at +%s; want 1, 2, +3s", res.statusFlip, res.statusOther, res.lastOtherStatus)
	}
	contains(t, "other status writes", res.otherStatus, []string{`a: readyEndpoints "" to "1/1"`, `b: readyEndpoints "" to "2/2"`})
}

// TestLeaseMoves checks how a handover is read from the Lease's events:
// released, then taken by another holder, each from the signal.
func TestLeaseMoves(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	lease := func(ms int, holder string) event {
		return event{at: t0.Add(time.Duration(ms) * time.Millisecond), kind: kindLease, verb: verbUpdate,
			obj: &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder)}}}
	}
	events := []event{lease(0, "a"), lease(2000, "a"), lease(3100, ""), lease(4500, "b"), lease(6000, "b")}
	steps := []step{{at: t0.Add(3 * time.Second), what: "SIGTERM a (leader)", signal: true}, {at: t0.Add(5 * time.Second), what: "SIGTERM c (standby)"}}
	got := leaseMoves(events, steps)
	want := []leaseMove{{what: "SIGTERM a (leader)", released: 100 * time.Millisecond, taken: 1500 * time.Millisecond, previous: "a", current: "b"}}
	if len(got) != 1 || got[0] != want[0] {
		t.Errorf("lease moves %+v, want %+v", got, want)
	}
}

// contains checks that got has exactly one entry per want, each holding
// its want as a substring, in order.
func contains(t *testing.T, what string, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %q, want %d matching %q", what, got, len(want), want)
		return
	}
	for i := range want {
		if !strings.Contains(got[i], want[i]) {
			t.Errorf("%s[%d]: %q, want it to say %q", what, i, got[i], want[i])
		}
	}
}
