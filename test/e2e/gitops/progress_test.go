package gitops

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// watchFor starts a watch on the objects of kind in ns (all namespaces for
// "") and returns a function that waits for the first event of type typ
// about name, and returns its object: the object exactly as the API server
// stored it at that moment, which a later read could no longer show.
func watchFor(t *testing.T, kind, ns, name string, typ watch.EventType) func() *unstructured.Unstructured {
	t.Helper()
	watcher, ok := framework.E().Client.(client.WithWatch)
	if !ok {
		t.Fatal("the framework's client cannot watch")
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind(kind + "List"))
	var opts []client.ListOption
	if ns != "" {
		opts = append(opts, client.InNamespace(ns))
	}
	w, err := watcher.Watch(context.Background(), list, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return func() *unstructured.Unstructured {
		t.Helper()
		for {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					t.Fatalf("the watch of %s ended before a %s event of %s", kind, typ, name)
				}
				if u, isU := ev.Object.(*unstructured.Unstructured); isU && ev.Type == typ && u.GetName() == name {
					return u
				}
			case <-time.After(framework.Timeout):
				t.Fatalf("no %s event of %s %s within %s", typ, kind, name, framework.Timeout)
			}
		}
	}
}

// TestProgressOfLiveBackends holds health.lua and kstatus to the states in
// which the controller is not done: caught as the API server stores them,
// through a watch, before the controller's next status, or held there.
func TestProgressOfLiveBackends(t *testing.T) {
	t.Run("created before the controller reports", func(t *testing.T) {
		ns := framework.Namespace(t)
		xb := backend(ns, "web", staticSource("192.0.2.60"))
		added := watchFor(t, "ExternalBackend", ns, xb.Name, watch.Added)
		framework.Create(t, xb)
		judgeObject(t, added(), "Progressing", "Waiting for the controller to report", status.InProgressStatus)
	})

	t.Run("a new generation before the controller looks", func(t *testing.T) {
		ns := framework.Namespace(t)
		xb := backend(ns, "web", staticSource("192.0.2.61"))
		framework.Create(t, xb)
		framework.WaitReady(t, xb)
		modified := watchFor(t, "ExternalBackend", ns, xb.Name, watch.Modified)
		if err := framework.Update(t, xb, func(xb *v1alpha1.ExternalBackend) {
			xb.Spec.Service.Type = v1alpha1.ServiceTypeHeadless // the Service is recreated
		}); err != nil {
			t.Fatal(err)
		}
		u := modified()
		if u.GetGeneration() != 2 {
			t.Fatalf("the first change seen is of generation %d, want the spec change (2)", u.GetGeneration())
		}
		judgeObject(t, u, "Progressing", "observe generation 2", status.InProgressStatus)
		framework.WaitReady(t, xb)
		judge(t, xb, "Healthy", status.CurrentStatus)
	})

	t.Run("adopting a Service", func(t *testing.T) {
		ns := framework.Namespace(t)
		handWritten(t, ns, "192.0.2.62", "192.0.2.63")
		xb := backend(ns, "db", staticSource("192.0.2.62"))
		xb.Spec.Service.Adopt = &v1alpha1.ServiceAdoption{HandWrittenManagedBy: []string{"cluster-admins"}}
		framework.Create(t, xb)
		framework.WaitCondition(t, xb, v1alpha1.ConditionReconciling, metav1.ConditionTrue, v1alpha1.ReasonAdopting)
		judgeObject(t, live(t, xb), "Progressing", "Adopting: handing the Service over: keeping EndpointSlice", status.InProgressStatus)

		// The backend publishes what the hand-written slice did: it goes,
		// and with it Reconciling.
		if err := framework.Update(t, xb, func(xb *v1alpha1.ExternalBackend) {
			xb.Spec.Sources[0] = staticSource("192.0.2.62", "192.0.2.63")
		}); err != nil {
			t.Fatal(err)
		}
		framework.WaitCondition(t, xb, v1alpha1.ConditionAdopted, metav1.ConditionTrue, v1alpha1.ReasonAdopted)
		if c := framework.Get(t, xb).Status.Conditions; hasCondition(c, v1alpha1.ConditionReconciling) {
			t.Errorf("Reconciling is still there once adopted: %v", c)
		}
		judge(t, xb, "Healthy", status.CurrentStatus)
	})

	t.Run("suspended before its first pass", func(t *testing.T) {
		xb := backend(framework.Namespace(t), "batch", staticSource("192.0.2.64"))
		xb.Spec.Suspend = true
		framework.Create(t, xb)
		framework.WaitCondition(t, xb, v1alpha1.ConditionReady, metav1.ConditionUnknown, v1alpha1.ReasonSuspended)
		judge(t, xb, "Suspended", status.InProgressStatus)
	})

	t.Run("suspended while stalled", func(t *testing.T) {
		xb := backend(framework.Namespace(t), "search", v1alpha1.Source{Name: "vendor", DNS: &v1alpha1.DNSSource{Name: "search.example.com"}})
		framework.Create(t, xb)
		framework.WaitCondition(t, xb, v1alpha1.ConditionStalled, metav1.ConditionTrue, v1alpha1.ReasonProviderNotAvailable)
		if err := framework.Update(t, xb, func(xb *v1alpha1.ExternalBackend) { xb.Spec.Suspend = true }); err != nil {
			t.Fatal(err)
		}
		framework.WaitCondition(t, xb, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonSuspended)
		judge(t, xb, "Suspended", status.InProgressStatus)
	})

	t.Run("a write failing on the same generation", func(t *testing.T) {
		ns := framework.Namespace(t)
		xb := backend(ns, "cart", staticSource("192.0.2.65"))
		framework.Create(t, xb)
		framework.WaitReady(t, xb)
		noSlices(t, ns)
		// Our slice deleted: the controller writes it again, and the quota
		// refuses it.
		if err := framework.E().Client.DeleteAllOf(context.Background(), &discoveryv1.EndpointSlice{},
			client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: xb.Name}); err != nil {
			t.Fatal(err)
		}
		cur := framework.WaitCondition(t, xb, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonWriteFailed)
		if cur.Status.ObservedGeneration != cur.Generation {
			t.Fatalf("observedGeneration %d of %d: want the failure on a generation already handled", cur.Status.ObservedGeneration, cur.Generation)
		}
		judge(t, xb, "Degraded", status.InProgressStatus)
	})
}

// hasCondition tells whether conditions hold one of type typ.
func hasCondition(conditions []metav1.Condition, typ string) bool {
	for _, c := range conditions {
		if c.Type == typ {
			return true
		}
	}
	return false
}

// handWritten creates Service db in ns, selectorless as people write them,
// and a hand-written EndpointSlice for it with addrs ready.
func handWritten(t *testing.T, ns string, addrs ...string) {
	t.Helper()
	framework.Create(t, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443}}},
	})
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "db-manual", Namespace: ns, Labels: map[string]string{
			discoveryv1.LabelServiceName: "db", discoveryv1.LabelManagedBy: "cluster-admins",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To[int32](443), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for _, a := range addrs {
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	framework.Create(t, sl)
}

// TestHealthOfLiveProviders holds backendprovider-health.lua and kstatus to
// the BackendProviders the controller really writes: new, checked and
// usable, changed, missing its Secret, and with a selector that does not
// parse, then fixed. One that cannot be used is Failed for kstatus
// (Stalled), not InProgress until a wait times out.
func TestHealthOfLiveProviders(t *testing.T) {
	ns := framework.Namespace(t)
	bp := &v1alpha1.BackendProvider{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-static"},
		Spec: v1alpha1.BackendProviderSpec{
			Static: &v1alpha1.StaticProvider{}, Namespaces: v1alpha1.NamespaceSelection{Names: []string{ns}},
			AllowedCIDRs: []string{"192.0.2.0/24"},
		},
	}
	added := watchFor(t, "BackendProvider", "", bp.Name, watch.Added)
	framework.Create(t, bp)
	t.Cleanup(func() { _ = framework.E().Client.Delete(context.Background(), bp) })
	judgeObject(t, added(), "Progressing", "Waiting for the controller to check", status.InProgressStatus)

	judgeProvider(t, bp.Name, metav1.ConditionTrue, "Healthy", "can be used", status.CurrentStatus)

	modified := watchFor(t, "BackendProvider", "", bp.Name, watch.Modified)
	framework.Edit(t, bp, func(bp *v1alpha1.BackendProvider) { bp.Spec.AllowedCIDRs = []string{"198.51.100.0/24"} })
	judgeObject(t, modified(), "Progressing", "check generation 2", status.InProgressStatus)

	missing := &v1alpha1.BackendProvider{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-consul"},
		Spec: v1alpha1.BackendProviderSpec{
			Consul: &v1alpha1.ConsulProvider{
				Address:        "127.0.0.1:8500",
				TokenSecretRef: &v1alpha1.SecretKeyReference{Name: "consul-token-nobody-made", Key: "token"},
			},
			Namespaces: v1alpha1.NamespaceSelection{Names: []string{ns}},
		},
	}
	framework.Create(t, missing)
	t.Cleanup(func() { _ = framework.E().Client.Delete(context.Background(), missing) })
	judgeProvider(t, missing.Name, metav1.ConditionFalse, "Degraded", v1alpha1.ReasonSecretNotFound+": ", status.FailedStatus)

	// A selector the API server stores but that does not parse.
	invalid := &v1alpha1.BackendProvider{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-invalid"},
		Spec: v1alpha1.BackendProviderSpec{
			Static: &v1alpha1.StaticProvider{}, AllowedCIDRs: []string{"192.0.2.0/24"},
			Namespaces: v1alpha1.NamespaceSelection{Selector: &metav1.LabelSelector{
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: metav1.LabelSelectorOpIn}},
			}},
		},
	}
	framework.Create(t, invalid)
	t.Cleanup(func() { _ = framework.E().Client.Delete(context.Background(), invalid) })
	judgeProvider(t, invalid.Name, metav1.ConditionFalse, "Degraded", v1alpha1.ReasonInvalidProvider+": spec.namespaces.selector", status.FailedStatus)

	// Fixed, it is Ready and no longer Stalled.
	framework.Edit(t, invalid, func(bp *v1alpha1.BackendProvider) {
		bp.Spec.Namespaces.Selector.MatchExpressions[0].Values = []string{"payments"}
	})
	judgeProvider(t, invalid.Name, metav1.ConditionTrue, "Healthy", "can be used", status.CurrentStatus)
	framework.Eventually(t, framework.Timeout, "Stalled removed from "+invalid.Name, func() error {
		var bp v1alpha1.BackendProvider
		if err := framework.E().Client.Get(context.Background(), client.ObjectKeyFromObject(invalid), &bp); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(bp.Status.Conditions, v1alpha1.ConditionStalled); c != nil {
			return fmt.Errorf("Stalled %+v beside a True Ready", c)
		}
		return nil
	})
}

// judgeProvider waits until the BackendProvider's Ready condition of its
// generation has status want, then judges it as the API server sends it.
func judgeProvider(t *testing.T, name string, want metav1.ConditionStatus, health, message string, kstatus status.Status) {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("BackendProvider"))
	framework.Eventually(t, framework.Timeout, "BackendProvider "+name+" Ready="+string(want), func() error {
		if err := framework.E().Client.Get(context.Background(), client.ObjectKey{Name: name}, u); err != nil {
			return err
		}
		var bp v1alpha1.BackendProvider
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &bp); err != nil {
			return err
		}
		c := meta.FindStatusCondition(bp.Status.Conditions, v1alpha1.ConditionReady)
		if c == nil || c.Status != want || c.ObservedGeneration != bp.Generation {
			return fmt.Errorf("Ready %+v of generation %d", c, bp.Generation)
		}
		return nil
	})
	judgeObject(t, u, health, message, kstatus)
}
