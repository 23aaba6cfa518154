package e2e

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// timeout bounds every wait for the controller.
const timeout = framework.Timeout

// TestDualStackStaticBackend publishes a backend with IPv4 and IPv6
// endpoints. On a dual-stack API server both families go out, with a
// dual-stack Service; on a single-stack one, only IPv4, with a single-stack
// Service, and the IPv6 endpoint is counted and named on status and in an
// event instead of the Service being refused for ever.
func TestDualStackStaticBackend(t *testing.T) {
	ns := newNamespace(t)
	xb := staticBackend(ns, "db", "192.0.2.10", "192.0.2.11", "2001:db8::10")
	xb.Spec.Sources[0].Static.Endpoints[0].Zone = "zone-a"
	xb.Spec.Sources[0].Static.Endpoints[0].Hostname = "db-0"
	xb.Spec.Sources[0].Static.Endpoints[1].Health = v1alpha1.HealthUnhealthy
	xb.Spec.Service.Ports[0].TargetPort = ptr.To[int32](15432)
	mustCreate(t, xb)

	cur := waitReady(t, xb)
	sl := waitAddresses(t, ns, "db", framework.Served("192.0.2.10", "192.0.2.11", "2001:db8::10")...)
	wantFamilies, wantPolicy := []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}, corev1.IPFamilyPolicyPreferDualStack
	wantCounts := v1alpha1.EndpointCounts{Total: 3, Ready: 2, Serving: 2, IPv4: 2, IPv6: 1}
	if !framework.DualStack() {
		wantFamilies, wantPolicy = []corev1.IPFamily{corev1.IPv4Protocol}, corev1.IPFamilyPolicySingleStack
		wantCounts = v1alpha1.EndpointCounts{Total: 2, Ready: 1, Serving: 1, IPv4: 2, NotServed: 1}
		expectCondition(t, cur, v1alpha1.ConditionResolved, metav1.ConditionTrue, v1alpha1.ReasonFamilyNotServed, "1 endpoint(s) of family [IPv6]", "[IPv4] only")
		waitEvent(t, xb, corev1.EventTypeWarning, v1alpha1.ReasonFamilyNotServed)
	}

	svc := getService(t, ns, "db")
	if svc.Spec.Selector != nil {
		t.Errorf("Service has a selector %v; it must be selectorless", svc.Spec.Selector)
	}
	if !metav1.IsControlledBy(svc, cur) {
		t.Errorf("Service is not controlled by the ExternalBackend: %v", svc.OwnerReferences)
	}
	if got := svc.Spec.IPFamilies; !slices.Equal(got, wantFamilies) {
		t.Errorf("Service ipFamilies = %v, want %v", got, wantFamilies)
	}
	if p := ptr.Deref(svc.Spec.IPFamilyPolicy, ""); p != wantPolicy {
		t.Errorf("Service ipFamilyPolicy = %s, want %s", p, wantPolicy)
	}
	if len(sl) != len(wantFamilies) {
		t.Fatalf("%d slices, want one per family of %v", len(sl), wantFamilies)
	}
	for _, s := range sl {
		if s.Labels[discoveryv1.LabelServiceName] != "db" || s.Labels[discoveryv1.LabelManagedBy] != v1alpha1.ManagedByValue {
			t.Errorf("slice %s labels %v", s.Name, s.Labels)
		}
		if _, headless := s.Labels[corev1.IsHeadlessService]; headless {
			t.Errorf("slice %s of a ClusterIP Service carries the headless label", s.Name)
		}
		if !metav1.IsControlledBy(&s, svc) {
			t.Errorf("slice %s is not controlled by the Service: %v", s.Name, s.OwnerReferences)
		}
		if len(s.Ports) != 1 || ptr.Deref(s.Ports[0].Name, "") != "pg" || ptr.Deref(s.Ports[0].Port, 0) != 15432 ||
			ptr.Deref(s.Ports[0].Protocol, "") != corev1.ProtocolTCP {
			t.Errorf("slice %s ports %v, want pg 15432/TCP", s.Name, s.Ports)
		}
		for _, e := range s.Endpoints {
			if e.NodeName != nil {
				t.Errorf("external endpoint %s has nodeName %s", e.Addresses[0], *e.NodeName)
			}
		}
	}
	eps, _ := published(sl)
	if e := eps["192.0.2.10"]; ptr.Deref(e.Zone, "") != "zone-a" || ptr.Deref(e.Hostname, "") != "db-0" || conditionsOf(e) != "true/true/false" {
		t.Errorf("192.0.2.10 = zone %v hostname %v conditions %s", e.Zone, e.Hostname, conditionsOf(e))
	}
	if e := eps["192.0.2.11"]; conditionsOf(e) != "false/false/false" {
		t.Errorf("unhealthy endpoint conditions %s, want ready=false serving=false", conditionsOf(e))
	}
	if cur.Status.Endpoints != wantCounts || cur.Status.Slices != int32(len(wantFamilies)) || cur.Status.ServiceName != "db" {
		t.Errorf("status endpoints %+v slices %d service %q", cur.Status.Endpoints, cur.Status.Slices, cur.Status.ServiceName)
	}
	if len(cur.Status.Sources) != 1 || cur.Status.Sources[0].Endpoints != 3 || cur.Status.Sources[0].LastSuccessTime == nil {
		t.Errorf("status sources %+v", cur.Status.Sources)
	}
}
