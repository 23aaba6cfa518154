package upgrade_test

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/utils/ptr"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/netlab"
	"github.com/backendslice/backendslice/test/replica"
)

// upgradeRun is one rolling upgrade as the test drove it.
type upgradeRun struct {
	order string
	// start is when the first new replica was started, end when the flips
	// stopped, flipsAfter after a new replica led.
	start, end time.Time
	steps      []step
	// expected are the addresses each Service must publish throughout.
	expected map[string]map[string]bool
}

// flipped is what the flipper did: the backend, its instances' addresses
// and the flips made.
type flipped struct {
	name  string
	addrs []string
	flips []replica.Flip
}

// upgradeResult is what one rolling upgrade cost, as the watch and the
// client saw it.
type upgradeResult struct {
	order string
	steps []step
	start time.Time
	// handovers are the lease's moves after each SIGTERM of a leader.
	handovers []leaseMove
	// before and during are the times from a flip to the write that
	// published it, for the flips made before the upgrade and during it.
	before, during []time.Duration
	unpublished    []string
	// Writes to slices and Services during the upgrade: all of them, and
	// those that only published a flip; extra describes each other one.
	writes, flipWrites int
	extra              []string
	// Status writes of the flipped backend, and of every other one, and
	// when the last of those was, from start.
	statusFlip, statusOther int
	otherStatus             []string
	lastOtherStatus         time.Duration
	// baseline is set for an upgrade to the -baseline's controller.
	baseline bool
	// broken describes each moment a Service lacked an endpoint, held one
	// twice, or published a steady one not ready.
	broken []string
	// traffic is what the client connecting to the flipped backend's
	// cluster IP through kube-proxy saw, from before the flips to after.
	traffic netlab.ClientResult
}

// leaseMove is how long after a leader's SIGTERM its lease was released
// and taken by another replica (-1: not seen).
type leaseMove struct {
	what              string
	released, taken   time.Duration
	previous, current string
}

// replay is the namespace's slices as the watch saw them, event by event.
type replay struct {
	slices map[string]*discoveryv1.EndpointSlice
}

// published is how svc's slices publish addr now, and in how many slices.
func (r replay) published(svc, addr string) (ready, serving bool, copies int) {
	for _, s := range r.slices {
		if s.Labels[discoveryv1.LabelServiceName] != svc {
			continue
		}
		for _, e := range s.Endpoints {
			if len(e.Addresses) > 0 && e.Addresses[0] == addr {
				ready, serving = ptr.Deref(e.Conditions.Ready, false), ptr.Deref(e.Conditions.Serving, false)
				copies++
			}
		}
	}
	return ready, serving, copies
}

// analyse replays the events the watch saw against the flips made.
func (u upgradeRun) analyse(events []event, f flipped) upgradeResult {
	res := upgradeResult{order: u.order, steps: u.steps, start: u.start}
	flipAddrs := map[string]bool{}
	for _, a := range f.addrs {
		flipAddrs[a] = true
	}
	r := replay{slices: map[string]*discoveryv1.EndpointSlice{}}
	flips := f.flips
	pending := map[int]bool{}
	next := 0
	for _, e := range events {
		for ; next < len(flips) && !flips[next].At.After(e.at); next++ {
			pending[next] = true
		}
		r.apply(e)
		for i := range pending {
			if _, serving, n := r.published(f.name, flips[i].Addr); n > 0 && serving == flips[i].Serving {
				delete(pending, i)
				res.flipTime(flips[i], e.at.Sub(flips[i].At), u)
			}
		}
		if e.at.Before(u.start) {
			continue
		}
		res.count(e, f.name, flipAddrs)
		if e.kind == kindSlice {
			res.broken = append(res.broken, r.check(u.expected, flipAddrs, e, u.start)...)
		}
	}
	for i := range flips[next:] {
		pending[next+i] = true
	}
	for _, i := range slices.Sorted(maps.Keys(pending)) {
		res.unpublished = append(res.unpublished, fmt.Sprintf("%s serving=%t, flipped at +%s", flips[i].Addr, flips[i].Serving, flips[i].At.Sub(u.start).Round(time.Millisecond)))
	}
	res.handovers = leaseMoves(events, u.steps)
	return res
}

// apply takes one event into the replay.
func (r replay) apply(e event) {
	s, ok := e.obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return
	}
	if e.verb == verbDelete {
		delete(r.slices, s.Name)
		return
	}
	r.slices[s.Name] = s
}

// flipTime files the time a flip took to reach the slices.
func (res *upgradeResult) flipTime(f replica.Flip, took time.Duration, u upgradeRun) {
	if f.At.Before(u.start) {
		res.before = append(res.before, took)
	} else {
		res.during = append(res.during, took)
	}
}

// count classifies one write made during the upgrade.
func (res *upgradeResult) count(e event, flipService string, flipAddrs map[string]bool) {
	switch e.kind {
	case kindSlice, kindService:
		res.writes++
		res.countWrite(e, flipService, flipAddrs)
	case kindBackend:
		o, _ := e.old.(*v1alpha1.ExternalBackend)
		n, _ := e.obj.(*v1alpha1.ExternalBackend)
		switch {
		case o == nil || n == nil: // an add or a delete: the test's own
		case n.Name == flipService:
			res.statusFlip++
		default:
			res.statusOther++
			res.otherStatus = append(res.otherStatus, fmt.Sprintf("%s: %s", n.Name, statusDiff(o, n)))
			res.lastOtherStatus = e.at.Sub(res.start)
		}
	}
}

// countWrite files a write to a slice or a Service: a flip's own, or one
// more, said in a line.
func (res *upgradeResult) countWrite(e event, flipService string, flipAddrs map[string]bool) {
	what := e.verb
	switch o := e.old.(type) {
	case *discoveryv1.EndpointSlice:
		n, _ := e.obj.(*discoveryv1.EndpointSlice)
		own, diff := sliceWrite(o, n, flipService, flipAddrs)
		if own {
			res.flipWrites++
			return
		}
		what = diff
	case *corev1.Service:
		n, _ := e.obj.(*corev1.Service)
		what = "changed " + strings.Join(changedParts(o.Labels, n.Labels, o.Annotations, n.Annotations, o.OwnerReferences, n.OwnerReferences, o.Spec, n.Spec), ", ")
	}
	res.extra = append(res.extra, fmt.Sprintf("+%s %s %s: %s", e.at.Sub(res.start).Round(time.Millisecond), e.kind, e.obj.GetName(), what))
}

// sliceWrite tells whether an update of a slice only published flips (the
// conditions of flipped endpoints of the flipped backend), and if not,
// what else it changed.
func sliceWrite(o, n *discoveryv1.EndpointSlice, flipService string, flipAddrs map[string]bool) (bool, string) {
	a, b := o.DeepCopy(), n.DeepCopy()
	var changed []string
	if len(a.Endpoints) == len(b.Endpoints) {
		for i := range a.Endpoints {
			if slices.Equal(a.Endpoints[i].Addresses, b.Endpoints[i].Addresses) && !equality.Semantic.DeepEqual(a.Endpoints[i].Conditions, b.Endpoints[i].Conditions) {
				changed = append(changed, b.Endpoints[i].Addresses[0])
				b.Endpoints[i].Conditions = a.Endpoints[i].Conditions
			}
		}
	}
	parts := changedParts(a.Labels, b.Labels, a.Annotations, b.Annotations, a.OwnerReferences, b.OwnerReferences, a.Endpoints, b.Endpoints)
	if !equality.Semantic.DeepEqual(a.Ports, b.Ports) {
		parts = append(parts, "ports")
	}
	switch {
	case len(parts) > 0:
		return false, "changed " + strings.Join(parts, ", ")
	case len(changed) == 0:
		return false, "rewritten with nothing changed"
	case n.Labels[discoveryv1.LabelServiceName] != flipService || slices.ContainsFunc(changed, func(a string) bool { return !flipAddrs[a] }):
		return false, "conditions of " + strings.Join(changed, ", ") + ", which no flip changed"
	}
	return true, ""
}

// changedParts names which of the pairs (labels, annotations, owner
// references, then a spec-like part) differ.
func changedParts(pairs ...any) []string {
	names := []string{"labels", "annotations", "ownerReferences", "endpoints"}
	var out []string
	for i := 0; i+1 < len(pairs); i += 2 {
		if !equality.Semantic.DeepEqual(pairs[i], pairs[i+1]) {
			name := names[min(i/2, len(names)-1)]
			if _, svc := pairs[i].(corev1.ServiceSpec); svc {
				name = "spec"
			}
			out = append(out, name)
		}
	}
	return out
}

// statusDiff names what a backend's write changed.
func statusDiff(o, n *v1alpha1.ExternalBackend) string {
	if !equality.Semantic.DeepEqual(o.Spec, n.Spec) || !equality.Semantic.DeepEqual(o.Finalizers, n.Finalizers) {
		return "spec or finalizers"
	}
	var parts []string
	if !equality.Semantic.DeepEqual(o.Status.Conditions, n.Status.Conditions) {
		parts = append(parts, "conditions")
	}
	if !equality.Semantic.DeepEqual(o.Status.Endpoints, n.Status.Endpoints) {
		parts = append(parts, "endpoint counts")
	}
	if !equality.Semantic.DeepEqual(o.Status.Sources, n.Status.Sources) {
		parts = append(parts, "sources")
	}
	if o.Status.ReadyEndpoints != n.Status.ReadyEndpoints {
		parts = append(parts, fmt.Sprintf("readyEndpoints %q to %q", o.Status.ReadyEndpoints, n.Status.ReadyEndpoints))
	}
	if len(parts) == 0 {
		return "other status or metadata"
	}
	return strings.Join(parts, ", ")
}

// check tells what the Service of the slice event e lacks: an expected
// address missing or in two slices, or, outside the flipped ones, an
// address not ready.
func (r replay) check(expected map[string]map[string]bool, flipAddrs map[string]bool, e event, start time.Time) []string {
	svc := e.obj.GetLabels()[discoveryv1.LabelServiceName]
	var out []string
	for _, a := range slices.Sorted(maps.Keys(expected[svc])) {
		ready, _, n := r.published(svc, a)
		var what string
		switch {
		case n == 0:
			what = "missing"
		case n > 1:
			what = fmt.Sprintf("in %d slices", n)
		case !ready && !flipAddrs[a]:
			what = "not ready"
		default:
			continue
		}
		out = append(out, fmt.Sprintf("+%s after the %s of slice %s: %s %s in Service %s",
			e.at.Sub(start).Round(time.Millisecond), e.verb, e.obj.GetName(), a, what, svc))
	}
	return out
}

// leaseMoves times, for each SIGTERM of a leader, the release of its lease
// and its taking by another replica, from the Lease's events.
func leaseMoves(events []event, steps []step) []leaseMove {
	var out []leaseMove
	for _, st := range steps {
		if !st.signal {
			continue
		}
		m := leaseMove{what: st.what, released: -1, taken: -1}
		for _, e := range events {
			l, ok := e.obj.(*coordinationv1.Lease)
			if !ok {
				continue
			}
			holder := ptr.Deref(l.Spec.HolderIdentity, "")
			switch {
			case !e.at.After(st.at):
				m.previous = holder
			case holder == "" && m.released < 0:
				m.released = e.at.Sub(st.at)
			case holder != "" && holder != m.previous && m.taken < 0:
				m.taken, m.current = e.at.Sub(st.at), holder
			}
		}
		out = append(out, m)
	}
	return out
}

// check fails the test on what an upgrade must never do.
func (res upgradeResult) check(t *testing.T) {
	t.Helper()
	for _, b := range first(res.broken, 20) {
		t.Errorf("an endpoint was not kept: %s", b)
	}
	for _, x := range first(res.extra, 20) {
		t.Errorf("a write beyond the flips': %s", x)
	}
	for _, u := range res.unpublished {
		t.Errorf("a flip never reached the slices: %s", u)
	}
	if len(res.during) == 0 {
		t.Errorf("no flip was made and published during the upgrade: nothing was measured")
	}
	for _, m := range res.handovers {
		if m.taken < 0 {
			t.Errorf("after the %s, no other replica took the lease", m.what)
		}
	}
	if err := res.traffic.Err(); err != nil {
		t.Errorf("the client connecting through kube-proxy during the upgrade: %v", err)
	}
	t.Logf("%s: %d flips during the upgrade, longest %s to the slice (before it: %d, longest %s); %d slice and Service writes, %d of them the flips'; status writes: %d of the flipped backend, %d of the others %v; %d connections through kube-proxy, %d failed, by host %v",
		res.order, len(res.during), longest(res.during), len(res.before), longest(res.before), res.writes, res.flipWrites, res.statusFlip, res.statusOther, first(res.otherStatus, 5),
		res.traffic.Conns, res.traffic.Failed, res.traffic.ByHost)
}

// first are the first n of xs.
func first(xs []string, n int) []string { return xs[:min(n, len(xs))] }

// longest is the longest of ds, rounded for the report.
func longest(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return slices.Max(ds).Round(time.Millisecond)
}

// median is the median of ds, rounded for the report.
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2].Round(time.Millisecond)
}
