package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// handWrittenService is a selectorless Service db with port pg 5432, as a
// team writes it by hand, and returns it as created (with its cluster IP).
func handWrittenService(t *testing.T, ns string, edit func(*corev1.Service)) *corev1.Service {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db", Labels: map[string]string{"team": "payments"}},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "pg", Port: 5432, Protocol: corev1.ProtocolTCP}}},
	}
	if edit != nil {
		edit(svc)
	}
	framework.Create(t, svc)
	return svc
}

// handWrittenSlice is an IPv4 slice of Service db named name, managed by
// managedBy ("" for no label), with addrs ready on pg 5432.
func handWrittenSlice(t *testing.T, ns, name, managedBy string, addrs ...string) *discoveryv1.EndpointSlice {
	t.Helper()
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: "db"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("pg"), Port: ptr.To[int32](5432), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	if managedBy != "" {
		s.Labels[discoveryv1.LabelManagedBy] = managedBy
	}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	framework.Create(t, s)
	return s
}

// legacyEndpoints is an Endpoints object for Service db with addrs ready on pg 5432.
func legacyEndpoints(t *testing.T, ns string, addrs ...string) *corev1.Endpoints { //nolint:staticcheck // the legacy object adoption retires
	t.Helper()
	ports := []corev1.EndpointPort{{Name: "pg", Port: 5432, Protocol: corev1.ProtocolTCP}}
	var ips []corev1.EndpointAddress
	for _, a := range addrs {
		ips = append(ips, corev1.EndpointAddress{IP: a})
	}
	ep := &corev1.Endpoints{ //nolint:staticcheck // the legacy object adoption retires
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"},
		Subsets:    []corev1.EndpointSubset{{Addresses: ips, Ports: ports}}, //nolint:staticcheck // as above
	}
	framework.Create(t, ep)
	return ep
}

// readyFloor watches every slice of Service db in ns and records any moment,
// once the watch has shown every address of floor ready, at which the
// ready addresses across all of them, whoever wrote them, are fewer than
// floor: what kube-proxy would then route to. stop ends the watch and
// returns those moments, or says that floor was never reached.
func readyFloor(t *testing.T, ns string, floor ...string) (stop func() []string) {
	t.Helper()
	watcher, ok := framework.E().Client.(client.WithWatch)
	if !ok {
		t.Fatal("the framework's client cannot watch")
	}
	w, err := watcher.Watch(context.Background(), &discoveryv1.EndpointSliceList{},
		client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: "db"})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var lows []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		current := map[string]*discoveryv1.EndpointSlice{}
		reached := false
		for ev := range w.ResultChan() {
			s, ok := ev.Object.(*discoveryv1.EndpointSlice)
			if !ok {
				continue
			}
			if ev.Type == watch.Deleted {
				delete(current, s.Name)
			} else {
				current[s.Name] = s
			}
			ready := sets.New[string]()
			for _, sl := range current {
				for _, e := range sl.Endpoints {
					if len(e.Addresses) > 0 && ptr.Deref(e.Conditions.Ready, true) {
						ready.Insert(e.Addresses[0])
					}
				}
			}
			if ready.HasAll(floor...) {
				reached = true
			} else if reached {
				mu.Lock()
				lows = append(lows, fmt.Sprintf("after %s of %s: ready %v", ev.Type, s.Name, sets.List(ready)))
				mu.Unlock()
			}
		}
		if !reached {
			mu.Lock()
			lows = append(lows, "the watch never showed every address of the floor ready")
			mu.Unlock()
		}
	}()
	return func() []string {
		w.Stop()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return lows
	}
}

// exists tells whether obj is still on the API server.
func exists(t *testing.T, obj client.Object) bool {
	t.Helper()
	err := framework.E().Client.Get(ctx, client.ObjectKeyFromObject(obj), obj)
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

// adopting is a static backend db of addrs that adopts Service db.
func adopting(ns string, addrs ...string) *v1alpha1.ExternalBackend {
	xb := staticBackend(ns, "db", addrs...)
	xb.Spec.Service.Adopt = &v1alpha1.ServiceAdoption{HandWrittenManagedBy: []string{"cluster-admins"}}
	return xb
}

// TestAdoption adopts a hand-written Service with two hand-written slices,
// the mirror's slice, another tool's slice and a legacy Endpoints object:
// the Service keeps its cluster IP; a hand-written slice goes only once
// ours carry its ready endpoints (the second waits for an address the
// backend publishes later, and status says which); the Endpoints object
// goes once ours carry it; the mirror's and the other tool's slices stay;
// and at no moment are fewer addresses ready across the Service's slices
// than before.
func TestAdoption(t *testing.T) {
	ns := framework.Namespace(t)
	svc := handWrittenService(t, ns, nil)
	first := handWrittenSlice(t, ns, "db-manual-1", "", "192.0.2.31")
	second := handWrittenSlice(t, ns, "db-manual-2", "cluster-admins", "192.0.2.32")
	mirror := handWrittenSlice(t, ns, "db-mirror", "endpointslicemirroring-controller.k8s.io", "192.0.2.31")
	other := handWrittenSlice(t, ns, "db-other-tool", "other-tool.example.com", "192.0.2.33")
	ep := legacyEndpoints(t, ns, "192.0.2.31")
	stop := readyFloor(t, ns, "192.0.2.31", "192.0.2.32", "192.0.2.33")

	xb := adopting(ns, "192.0.2.31")
	framework.Create(t, xb)
	cur := waitCondition(t, xb, v1alpha1.ConditionAdopted, metav1.ConditionFalse, v1alpha1.ReasonAdopting)
	expectCondition(t, cur, v1alpha1.ConditionAdopted, metav1.ConditionFalse, v1alpha1.ReasonAdopting, "db-manual-2", "192.0.2.32")
	waitEvent(t, xb, corev1.EventTypeNormal, "HandWrittenRemoved")
	if exists(t, first) || exists(t, ep) {
		t.Error("the hand-written slice or the Endpoints object ours carry is still there")
	}
	if !exists(t, second) {
		t.Error("the hand-written slice with an address ours lack was deleted")
	}

	mustUpdate(t, xb, withAddresses("192.0.2.31", "192.0.2.32"))
	waitCondition(t, xb, v1alpha1.ConditionAdopted, metav1.ConditionTrue, v1alpha1.ReasonAdopted)
	if exists(t, second) {
		t.Error("the hand-written slice ours now carry is still there")
	}
	if !exists(t, mirror) || !exists(t, other) {
		t.Error("another controller's slice was deleted")
	}
	adopted := getService(t, ns, "db")
	if adopted.Spec.ClusterIP != svc.Spec.ClusterIP || adopted.UID != svc.UID {
		t.Errorf("Service %s/%s after adoption, want the same object with cluster IP %s", adopted.UID, adopted.Spec.ClusterIP, svc.Spec.ClusterIP)
	}
	expectControlledBy(t, adopted, xb)
	if adopted.Labels["team"] != "payments" {
		t.Errorf("the Service's own labels were lost: %v", adopted.Labels)
	}
	if lows := stop(); len(lows) > 0 {
		t.Errorf("fewer endpoints were ready than before the adoption: %v", lows)
	}
}

// TestAdoptionRefused: a Service with a selector, one another controller
// owns, and a NodePort Service are refused with a reason that says why and
// what to do, and stall; the Service is left as it was.
func TestAdoptionRefused(t *testing.T) {
	cases := map[string]struct {
		edit  func(*corev1.Service)
		words []string
	}{
		"selector": {func(s *corev1.Service) { s.Spec.Selector = map[string]string{"app": "db"} }, []string{"has a selector", "remove spec.selector"}},
		"owned": {func(s *corev1.Service) {
			s.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: "5b1c7e1e-0000-4000-8000-000000000001", Controller: ptr.To(true)}}
		}, []string{"controlled by ConfigMap owner"}},
		"node-port": {func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort }, []string{"of type NodePort"}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ns := framework.Namespace(t)
			svc := handWrittenService(t, ns, c.edit)
			xb := adopting(ns, "192.0.2.34")
			framework.Create(t, xb)
			cur := waitCondition(t, xb, v1alpha1.ConditionSynced, metav1.ConditionFalse, v1alpha1.ReasonAdoptionRefused)
			expectCondition(t, cur, v1alpha1.ConditionSynced, metav1.ConditionFalse, v1alpha1.ReasonAdoptionRefused, c.words...)
			expectCondition(t, cur, v1alpha1.ConditionStalled, metav1.ConditionTrue, v1alpha1.ReasonAdoptionRefused)
			if got := getService(t, ns, "db"); got.ResourceVersion != svc.ResourceVersion {
				t.Errorf("the refused Service was written: resourceVersion %s, was %s", got.ResourceVersion, svc.ResourceVersion)
			}
		})
	}
}

// TestAdoptionAcrossRestart restarts the controller while an adoption
// waits for an address: the new process finds where it stands from the
// API server alone, and completes once the address is published, with
// the Service and every endpoint kept. Not parallel: it restarts the
// controller every test shares.
func TestAdoptionAcrossRestart(t *testing.T) {
	ns := framework.Namespace(t)
	svc := handWrittenService(t, ns, nil)
	waiting := handWrittenSlice(t, ns, "db-manual", "", "192.0.2.35", "192.0.2.36")
	stop := readyFloor(t, ns, "192.0.2.35", "192.0.2.36")
	xb := adopting(ns, "192.0.2.35")
	framework.Create(t, xb)
	waitCondition(t, xb, v1alpha1.ConditionAdopted, metav1.ConditionFalse, v1alpha1.ReasonAdopting)

	framework.RestartControllerAfter(t, func() { mustUpdate(t, xb, withAddresses("192.0.2.35", "192.0.2.36")) })
	waitCondition(t, xb, v1alpha1.ConditionAdopted, metav1.ConditionTrue, v1alpha1.ReasonAdopted)
	waitPublished(t, ns, "db", allReady("192.0.2.35", "192.0.2.36"))
	if exists(t, waiting) {
		t.Error("the hand-written slice is still there")
	}
	if got := getService(t, ns, "db"); got.Spec.ClusterIP != svc.Spec.ClusterIP {
		t.Errorf("cluster IP %s, want %s kept", got.Spec.ClusterIP, svc.Spec.ClusterIP)
	}
	if lows := stop(); len(lows) > 0 {
		t.Errorf("fewer endpoints were ready than before the adoption: %v", lows)
	}
	if !slices.ContainsFunc(framework.Slices(t, ns, "db"), func(s discoveryv1.EndpointSlice) bool { return len(s.Endpoints) == 2 }) {
		t.Error("our slice does not carry both addresses")
	}
}
