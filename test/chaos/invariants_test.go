package chaos_test

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// category is the kind of an invariant broken; the report counts each.
type category string

// Categories of broken invariants.
const (
	// lost: an endpoint a source reports is not published (or only as
	// terminating), or a backend has no Service.
	lost category = "lost"
	// duplicated: an address in two of a Service's slices, or two
	// Services for one backend.
	duplicated category = "duplicated"
	// orphaned: a Service or slice of ours that no current backend or
	// Service owns, a slice without a controller reference, an empty slice.
	orphaned category = "orphaned"
	// foreignTouched: an object of another manager changed or deleted.
	foreignTouched category = "foreign touched"
	// stale: an endpoint published that no source reports, other than a
	// draining one within its drain period.
	stale category = "stale"
	// wrong: published with the wrong conditions, ports or labels, or a
	// Service not as the spec says (a selector, other ports).
	wrong category = "wrong"
	// pending: the controller has not handled the latest spec yet.
	pending category = "pending"
)

// categories in report order.
var categories = []category{lost, duplicated, orphaned, foreignTouched, stale, wrong, pending}

// violation is one broken invariant, said precisely enough to act on:
// which object, which address, what was expected.
type violation struct {
	cat category
	msg string
	// backend is the backend it concerns, when there is one.
	backend types.NamespacedName
}

// epState is how an address is published.
type epState struct {
	ready, serving, terminating bool
	slice                       string
}

func (s epState) String() string {
	return fmt.Sprintf("ready=%t serving=%t terminating=%t (slice %s)", s.ready, s.serving, s.terminating, s.slice)
}

// verdict is the outcome of one check.
type verdict struct {
	at         time.Time
	violations []violation
	// published maps each backend to what its current Service's slices
	// publish, for the tests that compare two moments.
	published map[types.NamespacedName]map[string]epState
	// status sums up each backend's status, for failure messages.
	status map[types.NamespacedName]string
}

func (v verdict) ok() bool { return len(v.violations) == 0 }

// String lists the violations, at most 30 of them, by category, and the
// status of the backends they concern.
func (v verdict) String() string {
	var b strings.Builder
	shown := 0
	for _, cat := range categories {
		for _, x := range v.violations {
			if x.cat != cat {
				continue
			}
			if shown == 30 {
				fmt.Fprintf(&b, "\n  ... and %d more", len(v.violations)-shown)
				break
			}
			fmt.Fprintf(&b, "\n  [%s] %s", x.cat, x.msg)
			shown++
		}
	}
	seen := map[types.NamespacedName]bool{}
	for _, x := range v.violations {
		if st, ok := v.status[x.backend]; ok && !seen[x.backend] && len(seen) < 10 {
			seen[x.backend] = true
			fmt.Fprintf(&b, "\n  status of %s: %s", x.backend, st)
		}
	}
	return b.String()
}

// check reads every Service, EndpointSlice and ExternalBackend of the
// namespaces and tells which invariants fail:
//
//   - every backend has exactly one Service, of the name its spec says,
//     controlled by it, selectorless, with the spec's ports and our label;
//   - every slice that carries our managed-by label (and is not a planted
//     foreign one) is controlled by the current Service of a backend, has
//     the Service's labels and ports, is not empty, and holds each of its
//     addresses once; no address is in two slices of one Service;
//   - every endpoint a source reports now is published, not terminating,
//     with its health (ready = serving = healthy);
//   - every published endpoint that no source reports is terminating, not
//     ready, and within its drain period (see world.allowance);
//   - every foreign object is there, at the resource version it was
//     planted with;
//   - every backend's status has observed its latest generation; a
//     backend whose Service name is someone else's says ServiceConflict.
func (w *world) check(ctx context.Context, namespaces ...string) (verdict, error) {
	v := verdict{at: time.Now(), published: map[types.NamespacedName]map[string]epState{}, status: map[types.NamespacedName]string{}}
	c := framework.E().Client
	var xbs []v1alpha1.ExternalBackend
	var svcs []corev1.Service
	var sls []discoveryv1.EndpointSlice
	for _, ns := range namespaces {
		var xl v1alpha1.ExternalBackendList
		var sl corev1.ServiceList
		var el discoveryv1.EndpointSliceList
		for _, l := range []client.ObjectList{&xl, &sl, &el} {
			if err := c.List(ctx, l, client.InNamespace(ns)); err != nil {
				return v, fmt.Errorf("listing in %s: %w", ns, err)
			}
		}
		xbs, svcs, sls = append(xbs, xl.Items...), append(svcs, sl.Items...), append(sls, el.Items...)
	}
	add := func(k types.NamespacedName, cat category, format string, args ...any) {
		v.violations = append(v.violations, violation{cat: cat, msg: fmt.Sprintf(format, args...), backend: k})
	}
	none := types.NamespacedName{}
	foreign := w.foreignSet()

	// Backends, as the API has them (UIDs, generations, status).
	byUID := map[types.UID]*v1alpha1.ExternalBackend{}
	for i := range xbs {
		byUID[xbs[i].UID] = &xbs[i]
		v.status[types.NamespacedName{Namespace: xbs[i].Namespace, Name: xbs[i].Name}] = statusSummary(&xbs[i])
	}
	// Services: ours are those an ExternalBackend controls, or that carry
	// our backend label; anything else must be a planted foreign one.
	current := map[types.NamespacedName]*corev1.Service{} // backend -> its Service
	svcByUID := map[types.UID]*corev1.Service{}
	svcOwner := map[types.UID]types.NamespacedName{} // current Service -> its backend
	for i := range svcs {
		svc := &svcs[i]
		if foreign[objectKey{"Service", svc.Namespace, svc.Name}] {
			continue
		}
		ref := metav1.GetControllerOf(svc)
		if ref == nil || ref.Kind != "ExternalBackend" {
			add(labelledBackend(svc), orphaned, "Service %s/%s (labels %v) is controlled by no ExternalBackend (controller %s)", svc.Namespace, svc.Name, svc.Labels, refString(ref))
			continue
		}
		xb := byUID[ref.UID]
		if xb == nil {
			add(none, orphaned, "Service %s/%s is controlled by ExternalBackend %s (uid %s), which does not exist", svc.Namespace, svc.Name, ref.Name, ref.UID)
			continue
		}
		k := types.NamespacedName{Namespace: xb.Namespace, Name: xb.Name}
		if want := serviceName(xb); svc.Name != want {
			add(k, orphaned, "Service %s/%s of backend %s is left over: the backend's Service is %s now", svc.Namespace, svc.Name, k, want)
			continue
		}
		if prev := current[k]; prev != nil {
			add(k, duplicated, "backend %s has two Services: %s and %s", k, prev.Name, svc.Name)
			continue
		}
		current[k], svcByUID[svc.UID], svcOwner[svc.UID] = svc, svc, k
		checkService(func(cat category, f string, a ...any) { add(k, cat, f, a...) }, k, xb, svc)
	}

	// Slices: collect what each backend's current Service publishes.
	for i := range sls {
		s := &sls[i]
		if foreign[objectKey{"EndpointSlice", s.Namespace, s.Name}] {
			continue
		}
		ref := metav1.GetControllerOf(s)
		if s.Labels[discoveryv1.LabelManagedBy] != v1alpha1.ManagedByValue && (ref == nil || svcByUID[ref.UID] == nil) {
			add(none, orphaned, "EndpointSlice %s/%s (managed-by %q) is neither ours nor a planted foreign one", s.Namespace, s.Name, s.Labels[discoveryv1.LabelManagedBy])
			continue
		}
		if ref == nil {
			add(labelledBackend(s), orphaned, "EndpointSlice %s/%s (labels %v) has no controller reference", s.Namespace, s.Name, s.Labels)
			continue
		}
		svc := svcByUID[ref.UID]
		if ref.Kind != "Service" || svc == nil {
			add(labelledBackend(s), orphaned, "EndpointSlice %s/%s is controlled by %s %s (uid %s), which is not the current Service of any backend", s.Namespace, s.Name, ref.Kind, ref.Name, ref.UID)
			continue
		}
		k := svcOwner[svc.UID]
		xb := w.spec(k)
		if xb == nil {
			continue // a backend of the API the model does not know: not this test's
		}
		if len(s.Endpoints) == 0 {
			add(k, orphaned, "EndpointSlice %s/%s of backend %s is empty (the controller keeps no placeholder slices)", s.Namespace, s.Name, k)
		}
		checkSliceMeta(func(cat category, f string, a ...any) { add(k, cat, f, a...) }, k, xb, svc, s)
		pub := v.published[k]
		if pub == nil {
			pub = map[string]epState{}
			v.published[k] = pub
		}
		for _, e := range s.Endpoints {
			if len(e.Addresses) != 1 {
				add(k, wrong, "EndpointSlice %s/%s: an endpoint has %d addresses %v, want exactly 1", s.Namespace, s.Name, len(e.Addresses), e.Addresses)
				continue
			}
			a := e.Addresses[0]
			if p, err := netip.ParseAddr(a); err != nil || p.String() != a || (p.Is4() != (s.AddressType == discoveryv1.AddressTypeIPv4)) {
				add(k, wrong, "EndpointSlice %s/%s (%s): address %q is not a canonical address of its type", s.Namespace, s.Name, s.AddressType, a)
			}
			st := epState{
				ready:       ptr.Deref(e.Conditions.Ready, false),
				serving:     ptr.Deref(e.Conditions.Serving, false),
				terminating: ptr.Deref(e.Conditions.Terminating, false),
				slice:       s.Name,
			}
			if prev, dup := pub[a]; dup {
				add(k, duplicated, "backend %s: address %s is in two slices of Service %s: %s and %s", k, a, svc.Name, prev.slice, s.Name)
				continue
			}
			pub[a] = st
		}
	}

	// Endpoints against what the sources report.
	for _, k := range w.keys(namespaces...) {
		want, xb := w.expected(k)
		api := findBackend(xbs, k)
		if api == nil {
			add(k, lost, "backend %s is not in the API", k)
			continue
		}
		w.mu.Lock()
		conflict := w.conflicts[k]
		w.mu.Unlock()
		if conflict {
			if !hasReason(api, v1alpha1.ReasonServiceConflict) {
				add(k, pending, "backend %s: status does not say %s (conditions %v)", k, v1alpha1.ReasonServiceConflict, conditionsOf(api))
			}
			continue
		}
		if api.Status.ObservedGeneration != api.Generation {
			add(k, pending, "backend %s: status.observedGeneration %d, generation %d", k, api.Status.ObservedGeneration, api.Generation)
		}
		if current[k] == nil {
			add(k, lost, "backend %s has no Service %s (its %d endpoint(s) are not reachable)", k, serviceName(xb), len(want))
			continue
		}
		pub := v.published[k]
		for _, a := range slices.Sorted(maps.Keys(want)) {
			wt := want[a]
			got, ok := pub[a]
			switch {
			case !ok:
				add(k, lost, "backend %s: %s, reported by %s (serving=%t), is not published in Service %s", k, a, wt.from, wt.serving, serviceName(xb))
			case got.terminating:
				add(k, lost, "backend %s: %s is published terminating (%s), but %s still reports it", k, a, got, wt.from)
			case got.serving != wt.serving || got.ready != wt.serving:
				add(k, wrong, "backend %s: %s is published %s, want ready=serving=%t as %s reports", k, a, got, wt.serving, wt.from)
			}
		}
		for _, a := range slices.Sorted(maps.Keys(pub)) {
			if _, reported := want[a]; reported {
				continue
			}
			got := pub[a]
			vanishedAt, allowed, known := w.allowance(k, a, v.at)
			switch {
			case !known:
				add(k, stale, "backend %s: %s is published (%s) but no source of it has ever reported it", k, a, got)
			case !got.terminating || got.ready:
				add(k, stale, "backend %s: %s is published %s; no source reports it since %s ago, so it must be draining (terminating, not ready)",
					k, a, got, v.at.Sub(vanishedAt).Round(time.Millisecond))
			case v.at.Sub(vanishedAt) > allowed:
				add(k, stale, "backend %s: %s still drains %s after it vanished; drain period %s, allowed at most %s (drain, detection, controller outages)",
					k, a, v.at.Sub(vanishedAt).Round(time.Millisecond), drainPeriod(xb), allowed.Round(time.Millisecond))
			}
		}
	}

	// Objects of other managers.
	for _, f := range w.foreignObjects(namespaces...) {
		if msg := f.changed(ctx); msg != "" {
			add(none, foreignTouched, "%s", msg)
		}
	}
	return v, nil
}

// checkService checks our Service of backend k against its spec.
func checkService(add func(category, string, ...any), k types.NamespacedName, xb *v1alpha1.ExternalBackend, svc *corev1.Service) {
	if len(svc.Spec.Selector) > 0 {
		add(wrong, "Service %s/%s of backend %s has a selector %v; ours are selectorless", svc.Namespace, svc.Name, k, svc.Spec.Selector)
	}
	if svc.Labels[v1alpha1.BackendLabel] != xb.Name {
		add(wrong, "Service %s/%s of backend %s: label %s=%q, want %q", svc.Namespace, svc.Name, k, v1alpha1.BackendLabel, svc.Labels[v1alpha1.BackendLabel], xb.Name)
	}
	want := map[string]string{}
	for _, p := range xb.Spec.Service.Ports {
		want[p.Name] = fmt.Sprintf("%d->%d/%s", p.Port, ptr.Deref(p.TargetPort, p.Port), protocolOf(p.Protocol))
	}
	got := map[string]string{}
	for _, p := range svc.Spec.Ports {
		got[p.Name] = fmt.Sprintf("%d->%s/%s", p.Port, p.TargetPort.String(), p.Protocol)
	}
	if !maps.Equal(want, got) {
		add(wrong, "Service %s/%s of backend %s has ports %v, want %v", svc.Namespace, svc.Name, k, got, want)
	}
}

// checkSliceMeta checks the labels and ports of our slice s of Service svc.
func checkSliceMeta(add func(category, string, ...any), k types.NamespacedName, xb *v1alpha1.ExternalBackend, svc *corev1.Service, s *discoveryv1.EndpointSlice) {
	for l, want := range map[string]string{
		discoveryv1.LabelServiceName: svc.Name,
		discoveryv1.LabelManagedBy:   v1alpha1.ManagedByValue,
		v1alpha1.BackendLabel:        xb.Name,
	} {
		if got, ok := s.Labels[l]; !ok || got != want {
			add(wrong, "EndpointSlice %s/%s of backend %s: label %s=%q, want %q", s.Namespace, s.Name, k, l, got, want)
		}
	}
	want := map[string]string{}
	for _, p := range xb.Spec.Service.Ports {
		want[p.Name] = fmt.Sprintf("%d/%s", ptr.Deref(p.TargetPort, p.Port), protocolOf(p.Protocol))
	}
	got := map[string]string{}
	for _, p := range s.Ports {
		got[ptr.Deref(p.Name, "")] = fmt.Sprintf("%d/%s", ptr.Deref(p.Port, 0), ptr.Deref(p.Protocol, ""))
	}
	if !maps.Equal(want, got) {
		add(wrong, "EndpointSlice %s/%s of backend %s has ports %v, want %v", s.Namespace, s.Name, k, got, want)
	}
}

func protocolOf(p v1alpha1.Protocol) corev1.Protocol {
	if p == "" {
		return corev1.ProtocolTCP
	}
	return corev1.Protocol(p)
}

// labelledBackend is the backend an object's label names, when it names one.
func labelledBackend(o metav1.Object) types.NamespacedName {
	if b := o.GetLabels()[v1alpha1.BackendLabel]; b != "" {
		return types.NamespacedName{Namespace: o.GetNamespace(), Name: b}
	}
	return types.NamespacedName{}
}

func refString(ref *metav1.OwnerReference) string {
	if ref == nil {
		return "none"
	}
	return fmt.Sprintf("%s %s", ref.Kind, ref.Name)
}

func findBackend(xbs []v1alpha1.ExternalBackend, k types.NamespacedName) *v1alpha1.ExternalBackend {
	for i := range xbs {
		if xbs[i].Namespace == k.Namespace && xbs[i].Name == k.Name {
			return &xbs[i]
		}
	}
	return nil
}

func hasReason(xb *v1alpha1.ExternalBackend, reason string) bool {
	return slices.ContainsFunc(xb.Status.Conditions, func(c metav1.Condition) bool { return c.Reason == reason })
}

// statusSummary is a backend's conditions and its sources' errors.
func statusSummary(xb *v1alpha1.ExternalBackend) string {
	parts := conditionsOf(xb)
	for _, s := range xb.Status.Sources {
		if s.LastError != "" || s.Stale {
			parts = append(parts, fmt.Sprintf("source %s stale=%t: %s", s.Name, s.Stale, s.LastError))
		}
	}
	return fmt.Sprintf("generation %d observed %d; %s", xb.Generation, xb.Status.ObservedGeneration, strings.Join(parts, "; "))
}

// conditionsOf lists a status's conditions as type=status/reason.
func conditionsOf(xb *v1alpha1.ExternalBackend) []string {
	var out []string
	for _, c := range xb.Status.Conditions {
		out = append(out, fmt.Sprintf("%s=%s/%s", c.Type, c.Status, c.Reason))
	}
	return out
}

// converge waits until every invariant holds in namespaces, and records
// one injection of fault (unless it is ""): the time from since to the
// first check that passed, or, past the deadline, the violations left,
// which fail the test.
func converge(t *testing.T, fault string, since time.Time, namespaces ...string) verdict {
	t.Helper()
	return convergeEach(t, at(since), func(types.NamespacedName) string { return fault }, namespaces...)
}

// at is the same start time for every fault.
func at(since time.Time) func(string) time.Time { return func(string) time.Time { return since } }

// convergeEach is converge for several faults at once: faultOf names the
// fault each backend's violations belong to, since when each fault ended.
// Each fault is timed from then to the first check that found none of its
// own violations (nor any that concern no backend); the wait ends when
// every invariant holds at once.
func convergeEach(t *testing.T, since func(fault string) time.Time, faultOf func(types.NamespacedName) string, namespaces ...string) verdict {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(convergeTimeout)
	start := time.Now()
	faults := map[string]bool{}
	for _, k := range env.world.keys(namespaces...) {
		faults[faultOf(k)] = true
	}
	delete(faults, "")
	first := map[string]time.Duration{}
	var last verdict
	for {
		v, err := env.world.check(ctx, namespaces...)
		if err != nil {
			// The API server may be restarting: a failed read is no verdict.
			v = verdict{at: time.Now(), violations: []violation{{cat: pending, msg: "reading the cluster: " + err.Error()}}}
		}
		broken := map[string]bool{}
		for _, x := range v.violations {
			if x.backend == (types.NamespacedName{}) {
				for f := range faults {
					broken[f] = true
				}
				continue
			}
			broken[faultOf(x.backend)] = true
		}
		for f := range faults {
			if _, seen := first[f]; !seen && !broken[f] {
				first[f] = v.at.Sub(since(f))
			}
		}
		if v.ok() {
			for _, f := range slices.Sorted(maps.Keys(faults)) {
				env.ledger.injected(f, first[f], verdict{})
				t.Logf("%s: converged in %s", f, first[f].Round(time.Millisecond))
			}
			return v
		}
		last = v
		if time.Now().After(deadline) {
			var failing []string
			for f := range faults {
				if broken[f] {
					failing = append(failing, f)
				}
			}
			slices.Sort(failing)
			for _, f := range slices.Sorted(maps.Keys(faults)) {
				var left verdict
				for _, x := range last.violations {
					if x.backend == (types.NamespacedName{}) || faultOf(x.backend) == f {
						left.violations = append(left.violations, x)
					}
				}
				took, seen := first[f]
				if !seen || !left.ok() {
					took = -1
				}
				env.ledger.injected(f, took, left)
			}
			for _, x := range last.violations {
				if st, ok := last.status[x.backend]; ok && !strings.Contains(st, "sources answer now") {
					if live := env.world.liveSources(x.backend); live != "" {
						last.status[x.backend] = st + "; sources answer now: " + live
					}
				}
			}
			t.Fatalf("the invariants still fail %s after %q (seed %d):%s", time.Since(start).Round(time.Second), failing, env.seed, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
