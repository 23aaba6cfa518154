package chaos_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// testManager is the field manager of everything the test writes itself,
// so that no object it plants looks written by the controller.
const testManager = "chaos-test"

// someoneElse is the managed-by label value of another EndpointSlice controller.
const someoneElse = "someone-else.example.com"

// objectKey names a Service or EndpointSlice.
type objectKey struct{ kind, namespace, name string }

// foreignObject is an object of another manager, or a hand-made one, as
// it was planted: the controller must never change or delete it.
type foreignObject struct {
	key             types.NamespacedName
	kind            string
	uid             types.UID
	resourceVersion string
	why             string
}

// changed reads the object again and says how it changed, or "".
func (f foreignObject) changed(ctx context.Context) string {
	var obj client.Object = &corev1.Service{}
	if f.kind == "EndpointSlice" {
		obj = &discoveryv1.EndpointSlice{}
	}
	err := framework.E().Client.Get(ctx, f.key, obj)
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("%s %s (%s) was deleted", f.kind, f.key, f.why)
	case err != nil:
		return fmt.Sprintf("%s %s (%s): reading it: %v", f.kind, f.key, f.why, err)
	case obj.GetUID() != f.uid:
		return fmt.Sprintf("%s %s (%s) was deleted and made again (uid %s, was %s)", f.kind, f.key, f.why, obj.GetUID(), f.uid)
	case obj.GetResourceVersion() != f.resourceVersion:
		var managers []string
		for _, m := range obj.GetManagedFields() {
			managers = append(managers, m.Manager+"/"+string(m.Operation))
		}
		return fmt.Sprintf("%s %s (%s) was modified: resourceVersion %s, planted at %s; labels now %v, owners %v, field managers %v",
			f.kind, f.key, f.why, obj.GetResourceVersion(), f.resourceVersion, obj.GetLabels(), ownerNames(obj), managers)
	}
	return ""
}

func ownerNames(o metav1.Object) []string {
	var out []string
	for _, r := range o.GetOwnerReferences() {
		out = append(out, fmt.Sprintf("%s/%s controller=%t", r.Kind, r.Name, ptr.Deref(r.Controller, false)))
	}
	return out
}

// foreignSet is the set of planted objects, to tell them from ours.
func (w *world) foreignSet() map[objectKey]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[objectKey]bool{}
	for _, f := range w.foreign {
		out[objectKey{f.kind, f.key.Namespace, f.key.Name}] = true
	}
	return out
}

// foreignObjects are the planted objects of namespaces.
func (w *world) foreignObjects(namespaces ...string) []foreignObject {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(w.foreign), func(f foreignObject) bool { return !slices.Contains(namespaces, f.key.Namespace) })
}

// plant creates obj as the test (never as the controller) and records it
// as foreign, to be found unchanged by every check.
func (w *world) plant(t *testing.T, obj client.Object, why string) {
	t.Helper()
	if err := framework.E().Client.Create(context.Background(), obj, client.FieldOwner(testManager)); err != nil {
		t.Fatalf("planting %s %s/%s: %v", kindOf(obj), obj.GetNamespace(), obj.GetName(), err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.foreign = append(w.foreign, foreignObject{
		key:  types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()},
		kind: kindOf(obj), uid: obj.GetUID(), resourceVersion: obj.GetResourceVersion(), why: why,
	})
}

func kindOf(obj client.Object) string {
	if _, ok := obj.(*discoveryv1.EndpointSlice); ok {
		return "EndpointSlice"
	}
	return "Service"
}

// plantOthers creates, in ns, what another manager would have there: a
// Service with a selector and an EndpointSlice of another controller for
// it, and a Service named taken (for a backend whose Service name is
// someone else's).
func (w *world) plantOthers(t *testing.T, ns, taken string) {
	t.Helper()
	for _, name := range []string{"other-app", taken} {
		w.plant(t, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app.kubernetes.io/managed-by": "someone-else"}},
			Spec: corev1.ServiceSpec{
				Selector: map[string]string{"app": name},
				Ports:    []corev1.ServicePort{{Name: "http", Port: 80}},
			},
		}, "another team's Service")
	}
	w.plant(t, foreignSlice(ns, "other-app-abc12", map[string]string{
		discoveryv1.LabelServiceName: "other-app",
		discoveryv1.LabelManagedBy:   someoneElse,
	}, ip4(0, 250)), "another controller's slice")
}

// plantLookalikes creates, for backend xb publishing through Service svc,
// two slices that carry all our labels but are not ours, with address
// ours (an address xb publishes: our own slices must still publish it)
// and address theirs (one it does not):
//
//   - a hand-made one, with no owner, named as our first IPv4 slice would
//     be, planted before the controller writes any (it must pick another
//     name and never take this one over);
//   - another tool's, controlled by a ConfigMap of that tool.
func (w *world) plantLookalikes(t *testing.T, ns, xb, svc, ours, theirs string) {
	t.Helper()
	labels := map[string]string{
		discoveryv1.LabelServiceName: svc,
		discoveryv1.LabelManagedBy:   v1alpha1.ManagedByValue,
		v1alpha1.BackendLabel:        xb,
	}
	w.plant(t, foreignSlice(ns, svc+"-ipv4-0", labels, ours, theirs), "a hand-made slice with our labels")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other-tool-" + xb}}
	if err := framework.E().Client.Create(context.Background(), cm, client.FieldOwner(testManager)); err != nil {
		t.Fatal(err)
	}
	s := foreignSlice(ns, svc+"-other-tool", maps.Clone(labels), ours, theirs)
	s.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: "v1", Kind: "ConfigMap", Name: cm.Name, UID: cm.UID, Controller: ptr.To(true),
	}}
	w.plant(t, s, "another tool's slice with our labels")
}

// foreignSlice is an IPv4 slice with ready endpoints at addrs.
func foreignSlice(ns, name string, labels map[string]string, addrs ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("app"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{a},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
		})
	}
	return s
}
