package chaos_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/e2e/framework"
	"github.com/backendslice/backendslice/test/replica"
)

// TestInvariantsCatchBreakage breaks, by hand and while no controller
// runs, each invariant the other tests rely on, and checks that check
// reports each one, in its category, naming the object: a checker that
// passes everything would make every other test here pass. Then the
// controller starts and must repair all of it.
func TestInvariantsCatchBreakage(t *testing.T) {
	ns := namespace(t)
	w := env.world
	ctx := context.Background()
	c := framework.E().Client
	k := types.NamespacedName{Namespace: ns, Name: "x"}
	w.createBackend(t, replica.Backend(ns, "x", time.Second, replica.StaticSource("vms", ip4(0, 0), ip4(0, 1))))
	expectBroken(t, ns, map[category]string{lost: "has no Service x", pending: "observedGeneration"})

	r := newReplica(t, "controller")
	start := time.Now()
	r.Start()
	converge(t, "", start, ns)
	w.down(r.Kill())

	var list discoveryv1.EndpointSliceList
	if err := c.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{v1alpha1.BackendLabel: "x"}); err != nil || len(list.Items) != 1 {
		t.Fatalf("want the one IPv4 slice of x, got %d (%v)", len(list.Items), err)
	}
	ours := list.Items[0]
	// A copy of our slice, owned by our Service: every address twice.
	twin := ours.DeepCopy()
	twin.ObjectMeta = *ours.ObjectMeta.DeepCopy()
	twin.Name, twin.ResourceVersion, twin.UID = "x-twin", "", ""
	if err := c.Create(ctx, twin, client.FieldOwner(testManager)); err != nil {
		t.Fatal(err)
	}
	// Our slice: the first endpoint's conditions wrong, an endpoint no
	// source reports added.
	if err := updateSlice(ctx, &ours, func(s *discoveryv1.EndpointSlice) {
		s.Endpoints[0].Conditions.Ready = ptr.To(false)
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip4(0, 99)}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}); err != nil {
		t.Fatal(err)
	}
	// A slice with our managed-by label and no owner, which the test does
	// not know as foreign: nobody's.
	stray := foreignSlice(ns, "x-stray", map[string]string{discoveryv1.LabelManagedBy: v1alpha1.ManagedByValue}, ip4(0, 98))
	if err := c.Create(ctx, stray, client.FieldOwner(testManager)); err != nil {
		t.Fatal(err)
	}
	// A selector on our Service.
	svc := &corev1.Service{}
	if err := c.Get(ctx, k, svc); err != nil {
		t.Fatal(err)
	}
	if err := updateService(ctx, svc, func(s *corev1.Service) { s.Spec.Selector = map[string]string{"app": "x"} }); err != nil {
		t.Fatal(err)
	}
	// A new address in the spec, which no controller publishes now.
	w.editBackend(t, k, func(xb *v1alpha1.ExternalBackend) {
		xb.Spec.Sources[0].Static.Endpoints = append(xb.Spec.Sources[0].Static.Endpoints, v1alpha1.StaticEndpoint{Address: ip4(0, 2)})
	})
	expectBroken(t, ns, map[category]string{
		duplicated: "is in two slices",
		wrong:      "has a selector",
		stale:      ip4(0, 99),
		orphaned:   "has no controller reference",
		lost:       ip4(0, 2),
		pending:    "observedGeneration",
	})

	// Another manager's Service changed: someone touched it.
	other := framework.Namespace(t)
	t.Cleanup(func() { w.forget(other) })
	w.plantOthers(t, other, "taken")
	foreign := &corev1.Service{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: other, Name: "other-app"}, foreign); err != nil {
		t.Fatal(err)
	}
	if err := updateService(ctx, foreign, func(s *corev1.Service) { s.Labels["touched"] = "yes" }); err != nil {
		t.Fatal(err)
	}
	expectBroken(t, other, map[category]string{foreignTouched: "Service " + other + "/other-app"})

	// The stray is not the controller's to remove (it never wrote it).
	// The twin is ours by every mark: the controller may fold it away or
	// keep it, but each address must end in one slice.
	if err := c.Delete(ctx, stray); err != nil {
		t.Fatal(err)
	}
	r.Start()
	up := time.Now()
	w.up(up)
	converge(t, "", up, ns)
}

// expectBroken checks the namespaces once and fails unless, for every
// category of want, a violation of it mentions want's text.
func expectBroken(t *testing.T, ns string, want map[category]string) {
	t.Helper()
	v, err := env.world.check(context.Background(), ns)
	if err != nil {
		t.Fatal(err)
	}
	for cat, text := range want {
		found := false
		for _, x := range v.violations {
			found = found || (x.cat == cat && strings.Contains(x.msg, text))
		}
		if !found {
			t.Errorf("check did not report %s (%q); it reported:%s", cat, text, v)
		}
	}
}
