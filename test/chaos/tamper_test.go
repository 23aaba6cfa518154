package chaos_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/e2e/framework"
	"github.com/backendslice/backendslice/test/replica"
)

// tamper is one change someone makes to what the controller wrote, on a
// backend of its own.
type tamper struct {
	name string
	// backend is the suffix of the backend it is made on.
	backend string
	// do makes it, on the backend's Service or its first slice.
	do func(ctx context.Context, svc *corev1.Service, slice *discoveryv1.EndpointSlice) error
}

// tampers are the issue's: our Service or slices edited, relabelled,
// deleted, their owner references removed, a selector added to the Service.
var tampers = []tamper{
	{"tamper: slice endpoints edited", "slice-edit", func(ctx context.Context, _ *corev1.Service, s *discoveryv1.EndpointSlice) error {
		return updateSlice(ctx, s, func(s *discoveryv1.EndpointSlice) {
			s.Endpoints[0].Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(false), Terminating: ptr.To(true)}
			s.Endpoints = append(s.Endpoints[:1], s.Endpoints[2:]...)
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip4(0, 240)}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
		})
	}},
	{"tamper: slice ports edited", "slice-ports", func(ctx context.Context, _ *corev1.Service, s *discoveryv1.EndpointSlice) error {
		return updateSlice(ctx, s, func(s *discoveryv1.EndpointSlice) { s.Ports[0].Port = ptr.To[int32](1234) })
	}},
	{"tamper: slice backend label removed", "slice-unlabel", func(ctx context.Context, _ *corev1.Service, s *discoveryv1.EndpointSlice) error {
		return updateSlice(ctx, s, func(s *discoveryv1.EndpointSlice) { delete(s.Labels, v1alpha1.BackendLabel) })
	}},
	{"tamper: slice service-name label changed", "slice-relabel", func(ctx context.Context, _ *corev1.Service, s *discoveryv1.EndpointSlice) error {
		return updateSlice(ctx, s, func(s *discoveryv1.EndpointSlice) { s.Labels[discoveryv1.LabelServiceName] = "someone-elses" })
	}},
	{"tamper: slice deleted", "slice-delete", func(ctx context.Context, _ *corev1.Service, s *discoveryv1.EndpointSlice) error {
		return framework.E().Client.Delete(ctx, s)
	}},
	{"tamper: slice owner reference removed", "slice-unown", func(ctx context.Context, _ *corev1.Service, s *discoveryv1.EndpointSlice) error {
		return updateSlice(ctx, s, func(s *discoveryv1.EndpointSlice) { s.OwnerReferences = nil })
	}},
	{"tamper: Service ports edited", "svc-edit", func(ctx context.Context, svc *corev1.Service, _ *discoveryv1.EndpointSlice) error {
		return updateService(ctx, svc, func(svc *corev1.Service) { svc.Spec.Ports[0].Port = 81 })
	}},
	{"tamper: Service backend label removed", "svc-unlabel", func(ctx context.Context, svc *corev1.Service, _ *discoveryv1.EndpointSlice) error {
		return updateService(ctx, svc, func(svc *corev1.Service) { delete(svc.Labels, v1alpha1.BackendLabel) })
	}},
	{"tamper: Service deleted", "svc-delete", func(ctx context.Context, svc *corev1.Service, _ *discoveryv1.EndpointSlice) error {
		return deleteService(ctx, svc)
	}},
	{"tamper: Service owner reference removed", "svc-unown", func(ctx context.Context, svc *corev1.Service, _ *discoveryv1.EndpointSlice) error {
		return updateService(ctx, svc, func(svc *corev1.Service) { svc.OwnerReferences = nil })
	}},
	{"tamper: selector added to Service", "svc-selector", func(ctx context.Context, svc *corev1.Service, _ *discoveryv1.EndpointSlice) error {
		return updateService(ctx, svc, func(svc *corev1.Service) { svc.Spec.Selector = map[string]string{"app": "hijacked"} })
	}},
}

// faultQuiet is where the report notes the quiet windows after tampering.
const faultQuiet = "tamper: quiet window after every repair"

// faultLookalike is the report's name of the slices with our labels that
// are not ours.
const faultLookalike = "slices with our labels that are not ours (hand-made, another tool's)"

// TestTampering makes each tamper on a backend of its own, first while the
// controller runs, then while it is dead (it must repair at start). Each
// must be repaired (the invariants hold), and then, over a quiet window of
// -quiet, the controller must make no write at all and no more reconciles
// than there are backends, and no resource version of our Services, slices
// or ExternalBackends may move: a repair that fights itself shows there.
// Next to them, a backend has two lookalike slices with all our labels (a
// hand-made one squatting the name of its first slice, and another
// tool's): they must never be adopted, rewritten or deleted, and our own
// slices must publish the backend's endpoints anyway.
func TestTampering(t *testing.T) {
	ns := namespace(t)
	w := env.world
	w.plantOthers(t, ns, "t-taken")
	w.plantLookalikes(t, ns, "t-lookalike", "t-lookalike", ip4(0, 0), ip4(0, 250))
	names := []string{"t-lookalike"}
	for _, tp := range tampers {
		names = append(names, "t-"+tp.backend)
	}
	for _, name := range names {
		w.createBackend(t, replica.Backend(ns, name, 2*time.Second, replica.StaticSource("vms", ip4(0, 0), ip4(0, 1), ip6(1, 0))))
	}
	faultOf := func(k types.NamespacedName) string {
		if k.Name == "t-lookalike" {
			return faultLookalike
		}
		for _, tp := range tampers {
			if k.Name == "t-"+tp.backend {
				return tp.name
			}
		}
		return ""
	}
	r := newReplica(t, "controller")
	start := time.Now()
	r.Start()
	// The squatter is there before the first slice: the first sync counts.
	convergeEach(t, at(start), func(k types.NamespacedName) string {
		return map[bool]string{true: faultLookalike}[k.Name == "t-lookalike"]
	}, ns)

	for _, running := range []bool{true, false} {
		when := "while the controller runs"
		if !running {
			when = "while the controller is dead"
			at := r.Kill()
			w.down(at)
		}
		roundStart, applied := time.Now(), map[string]time.Time{}
		for _, tp := range tampers {
			if err := apply(tp, ns); err != nil {
				t.Fatalf("%s %s: %v", tp.name, when, err)
			}
			applied[tp.name] = time.Now()
		}
		since := func(fault string) time.Time {
			if at, ok := applied[fault]; ok {
				return at
			}
			return roundStart // the lookalikes, there all along
		}
		if !running {
			r.Start()
			up := time.Now()
			w.up(up)
			since = at(up) // repairs start with the controller
		}
		t.Logf("every tamper made %s", when)
		convergeEach(t, since, faultOf, ns)
		quietWindow(t, r, ns, when, len(names), faultOf)
	}
}

// apply makes tamper tp on its backend's Service or first slice.
func apply(tp tamper, ns string) error {
	ctx := context.Background()
	c := framework.E().Client
	name := "t-" + tp.backend
	svc := &corev1.Service{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, svc); err != nil {
		return fmt.Errorf("reading Service %s: %w", name, err)
	}
	var list discoveryv1.EndpointSliceList
	if err := c.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: v1alpha1.ManagedByValue}); err != nil {
		return err
	}
	list.Items = slices.DeleteFunc(list.Items, func(s discoveryv1.EndpointSlice) bool {
		return s.AddressType != discoveryv1.AddressTypeIPv4 || !isOwnedBy(&s, svc)
	})
	if len(list.Items) == 0 {
		return fmt.Errorf("service %s has no IPv4 slice", name)
	}
	return tp.do(ctx, svc, &list.Items[0])
}

// isOwnedBy tells whether svc controls slice s.
func isOwnedBy(s *discoveryv1.EndpointSlice, svc *corev1.Service) bool {
	for _, r := range s.OwnerReferences {
		if r.UID == svc.UID && ptr.Deref(r.Controller, false) {
			return true
		}
	}
	return false
}

// updateSlice changes a slice as the test (retrying on conflicts).
func updateSlice(ctx context.Context, s *discoveryv1.EndpointSlice, change func(*discoveryv1.EndpointSlice)) error {
	return retryConflict(ctx, s, func() { change(s) })
}

// updateService changes a Service as the test (retrying on conflicts).
func updateService(ctx context.Context, svc *corev1.Service, change func(*corev1.Service)) error {
	return retryConflict(ctx, svc, func() { change(svc) })
}

// retryConflict applies change to obj and writes it, reading it again
// after a conflict with the controller, a few times.
func retryConflict(ctx context.Context, obj client.Object, change func()) error {
	c := framework.E().Client
	var err error
	for range 5 {
		change()
		if err = c.Update(ctx, obj, client.FieldOwner(testManager)); !apierrors.IsConflict(err) {
			return err
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
	}
	return err
}

// quietWindow counts, over -quiet with nothing changing, the controller's
// reconciles and writes and the resource versions of every Service,
// EndpointSlice and ExternalBackend of ns: no writes, no moved versions,
// at most one reconcile a backend.
func quietWindow(t *testing.T, r *replica.Replica, ns, when string, nBackends int, faultOf func(types.NamespacedName) string) {
	t.Helper()
	before, versions := r.MustScrape(), resourceVersions(t, ns)
	if before.Reconciles() == 0 {
		// It has reconciled every backend by now: a zero means the scrape
		// reads the wrong metric, and would hide any loop.
		t.Fatalf("controller %s reports no backendslice_reconciles_total after converging", r.Name)
	}
	time.Sleep(*quiet)
	after, moved := r.MustScrape(), resourceVersions(t, ns)
	r.RequireRunning()
	reconciles, writes := after.Reconciles()-before.Reconciles(), after.Writes()-before.Writes()
	t.Logf("quiet window of %s: %v reconciles, %v writes", *quiet, reconciles, writes)
	var loops []violation
	rewritten := 0
	for _, k := range slices.SortedFunc(maps.Keys(moved), func(a, b versionKey) int { return strings.Compare(a.String(), b.String()) }) {
		if versions[k] != moved[k] {
			rewritten++
			loops = append(loops, violation{cat: wrong, backend: k.backend,
				msg: fmt.Sprintf("%s was written during the quiet window (resourceVersion %s -> %s)", k, versions[k], moved[k])})
		}
	}
	if writes != 0 {
		loops = append(loops, violation{cat: wrong, msg: fmt.Sprintf("%v Service/EndpointSlice writes in the quiet window of %s (want 0)", writes, *quiet)})
	}
	if reconciles > float64(nBackends) {
		loops = append(loops, violation{cat: wrong, msg: fmt.Sprintf("%v reconciles in the quiet window of %s for %d backends (at most one each)", reconciles, *quiet, nBackends)})
	}
	for _, tp := range tampers {
		var mine []violation
		for _, l := range loops {
			if l.backend == (types.NamespacedName{}) || faultOf(l.backend) == tp.name {
				mine = append(mine, l)
			}
		}
		env.ledger.broken(tp.name, mine)
	}
	env.ledger.note(faultQuiet, "tampered %s: %v reconciles and %v writes in %s after the repairs, %d objects rewritten (%d backends)",
		when, reconciles, writes, *quiet, rewritten, nBackends)
	if len(loops) > 0 {
		t.Errorf("not at rest after the repairs (seed %d):%s", env.seed, verdict{violations: loops})
	}
}

// versionKey names an object in a quiet window, with the backend it is of.
type versionKey struct {
	kind, name string
	backend    types.NamespacedName
}

func (k versionKey) String() string { return k.kind + " " + k.backend.Namespace + "/" + k.name }

// resourceVersions are the resource versions of the Services, slices and
// ExternalBackends of ns.
func resourceVersions(t *testing.T, ns string) map[versionKey]string {
	t.Helper()
	ctx := context.Background()
	c := framework.E().Client
	out := map[versionKey]string{}
	var xbs v1alpha1.ExternalBackendList
	var svcs corev1.ServiceList
	var sls discoveryv1.EndpointSliceList
	for _, l := range []client.ObjectList{&xbs, &svcs, &sls} {
		if err := c.List(ctx, l, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
	}
	for _, x := range xbs.Items {
		out[versionKey{"ExternalBackend", x.Name, types.NamespacedName{Namespace: ns, Name: x.Name}}] = x.ResourceVersion
	}
	for _, s := range svcs.Items {
		out[versionKey{"Service", s.Name, labelledBackend(&s)}] = s.ResourceVersion
	}
	for _, s := range sls.Items {
		out[versionKey{"EndpointSlice", s.Name, labelledBackend(&s)}] = s.ResourceVersion
	}
	return out
}
