package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/controllers"
)

// staticBackend is an ExternalBackend with one static source of addrs and a
// TCP port 5432 named "pg".
func staticBackend(ns, name string, addrs ...string) *v1alpha1.ExternalBackend {
	eps := make([]v1alpha1.StaticEndpoint, 0, len(addrs))
	for _, a := range addrs {
		eps = append(eps, v1alpha1.StaticEndpoint{Address: a})
	}
	return &v1alpha1.ExternalBackend{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.ExternalBackendSpec{
			Service: v1alpha1.ServiceSpec{Ports: []v1alpha1.ServicePort{{Name: "pg", Port: 5432}}},
			Sources: []v1alpha1.Source{{Name: "fixed", Static: &v1alpha1.StaticSource{Endpoints: eps}}},
		},
	}
}

// ctx is the context of API calls in tests.
var ctx = context.Background()

// mustCreate creates obj or fails the test.
func mustCreate(t *testing.T, obj client.Object) {
	t.Helper()
	if err := k8s.Create(ctx, obj); err != nil {
		t.Fatalf("creating %s: %v", obj.GetName(), err)
	}
}

// update reads the ExternalBackend, applies change, and writes it back,
// retrying on conflicts with the controller's status writes.
func update(t *testing.T, xb *v1alpha1.ExternalBackend, change func(*v1alpha1.ExternalBackend)) error {
	t.Helper()
	var err error
	for range 10 {
		cur := &v1alpha1.ExternalBackend{}
		if err = k8s.Get(ctx, client.ObjectKeyFromObject(xb), cur); err != nil {
			return err
		}
		change(cur)
		if err = k8s.Update(ctx, cur); err == nil {
			*xb = *cur
			return nil
		}
		if !apierrors.IsConflict(err) {
			return err
		}
	}
	return err
}

// mustUpdate is update that fails the test on error.
func mustUpdate(t *testing.T, xb *v1alpha1.ExternalBackend, change func(*v1alpha1.ExternalBackend)) {
	t.Helper()
	if err := update(t, xb, change); err != nil {
		t.Fatalf("updating %s: %v", xb.Name, err)
	}
}

// get reads the current ExternalBackend.
func get(t *testing.T, xb *v1alpha1.ExternalBackend) *v1alpha1.ExternalBackend {
	t.Helper()
	cur := &v1alpha1.ExternalBackend{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(xb), cur); err != nil {
		t.Fatalf("reading %s: %v", xb.Name, err)
	}
	return cur
}

// condition returns the condition of type t, or an error naming what is there.
func condition(xb *v1alpha1.ExternalBackend, t string) (*metav1.Condition, error) {
	c := meta.FindStatusCondition(xb.Status.Conditions, t)
	if c == nil {
		return nil, fmt.Errorf("no %s condition yet (conditions: %v)", t, xb.Status.Conditions)
	}
	return c, nil
}

// waitCondition waits until condition t has status and reason, for the current generation.
func waitCondition(t *testing.T, xb *v1alpha1.ExternalBackend, typ string, status metav1.ConditionStatus, reason string) *v1alpha1.ExternalBackend {
	t.Helper()
	var cur *v1alpha1.ExternalBackend
	eventually(t, timeout, fmt.Sprintf("%s %s=%s/%s", xb.Name, typ, status, reason), func() error {
		cur = get(t, xb)
		c, err := condition(cur, typ)
		if err != nil {
			return err
		}
		if c.Status != status || c.Reason != reason || c.ObservedGeneration != cur.Generation {
			return fmt.Errorf("%s is %s/%s (generation %d of %d): %s", typ, c.Status, c.Reason, c.ObservedGeneration, cur.Generation, c.Message)
		}
		return nil
	})
	return cur
}

// waitReady waits until the backend is Ready with its generation observed.
func waitReady(t *testing.T, xb *v1alpha1.ExternalBackend) *v1alpha1.ExternalBackend {
	t.Helper()
	cur := waitCondition(t, xb, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
	if cur.Status.ObservedGeneration != cur.Generation {
		t.Fatalf("Ready but observedGeneration %d != generation %d", cur.Status.ObservedGeneration, cur.Generation)
	}
	return cur
}

// ourSlices lists the slices the controller manages for a Service.
func ourSlices(t *testing.T, ns, svc string) []discoveryv1.EndpointSlice {
	t.Helper()
	var list discoveryv1.EndpointSliceList
	if err := k8s.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{
		discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: controllers.ManagedByValue,
	}); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(list.Items, func(a, b discoveryv1.EndpointSlice) int { return compareStrings(a.Name, b.Name) })
	return list.Items
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// published maps each address in our slices to its endpoint, failing on an
// address published twice.
func published(sl []discoveryv1.EndpointSlice) (map[string]discoveryv1.Endpoint, error) {
	out := map[string]discoveryv1.Endpoint{}
	for _, s := range sl {
		for _, e := range s.Endpoints {
			if len(e.Addresses) != 1 {
				return nil, fmt.Errorf("slice %s: endpoint with %d addresses", s.Name, len(e.Addresses))
			}
			if _, dup := out[e.Addresses[0]]; dup {
				return nil, fmt.Errorf("address %s published twice", e.Addresses[0])
			}
			out[e.Addresses[0]] = e
		}
	}
	return out, nil
}

// waitAddresses waits until our slices publish exactly addrs.
func waitAddresses(t *testing.T, ns, svc string, addrs ...string) []discoveryv1.EndpointSlice {
	t.Helper()
	var sl []discoveryv1.EndpointSlice
	eventually(t, timeout, "slices of "+svc, func() error {
		sl = ourSlices(t, ns, svc)
		got, err := published(sl)
		if err != nil {
			return err
		}
		if len(got) != len(addrs) {
			return fmt.Errorf("%d addresses published, want %d", len(got), len(addrs))
		}
		for _, a := range addrs {
			if _, ok := got[a]; !ok {
				return fmt.Errorf("%s not published", a)
			}
		}
		return nil
	})
	return sl
}

// getService reads a Service.
func getService(t *testing.T, ns, name string) *corev1.Service {
	t.Helper()
	svc := &corev1.Service{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, svc); err != nil {
		t.Fatalf("reading Service %s: %v", name, err)
	}
	return svc
}

// conditionsOf renders an endpoint's conditions as "ready/serving/terminating".
func conditionsOf(e discoveryv1.Endpoint) string {
	return fmt.Sprintf("%t/%t/%t", ptr.Deref(e.Conditions.Ready, false), ptr.Deref(e.Conditions.Serving, false), ptr.Deref(e.Conditions.Terminating, false))
}
