package e2e

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

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

// expectShards fails the test unless there are between minSlices and
// maxSlices slices, none holding more than limit endpoints.
func expectShards(t *testing.T, sl []discoveryv1.EndpointSlice, minSlices, maxSlices, limit int) {
	t.Helper()
	if len(sl) < minSlices || len(sl) > maxSlices {
		t.Errorf("%d slices, want %d to %d", len(sl), minSlices, maxSlices)
	}
	for _, s := range sl {
		if len(s.Endpoints) > limit {
			t.Errorf("slice %s holds %d endpoints, more than %d", s.Name, len(s.Endpoints), limit)
		}
	}
}

// dualStack is one IPv4 and one IPv6 backend address.
var dualStack = []string{"192.0.2.10", "2001:db8::10"}

func TestShardingAcrossSlices(t *testing.T) {
	t.Parallel()
	addrs := ipv4s(250)
	xb, sl := readyBackend(t, addrs, withDrainPeriod("0s"),
		func(xb *v1alpha1.ExternalBackend) { xb.Spec.MaxEndpointsPerSlice = ptr.To[int32](100) })
	expectShards(t, sl, 3, 3, 100)
	if xb.Status.Slices != 3 || xb.Status.Endpoints.Total != 250 {
		t.Errorf("status slices %d endpoints %d, want 3 and 250", xb.Status.Slices, xb.Status.Endpoints.Total)
	}

	mustUpdate(t, xb, withAddresses(addrs[:120]...))
	waitReady(t, xb)
	sl = waitAddresses(t, xb.Namespace, "db", addrs[:120]...)
	expectShards(t, sl, 1, 2, 100)
}

// TestNoWriteWhenNothingChanged is not parallel: it reads the controller's
// write counters, which other tests would move.
func TestNoWriteWhenNothingChanged(t *testing.T) {
	xb, _ := readyBackend(t, []string{"192.0.2.10", "192.0.2.11", "2001:db8::10"})
	ns := xb.Namespace
	before := versions(t, ns, "db")
	svcWrites, sliceWrites := writes(t, "Service"), writes(t, "EndpointSlice")
	done := reconciles(t, "")

	mustUpdate(t, xb, func(xb *v1alpha1.ExternalBackend) {
		metav1.SetMetaDataAnnotation(&xb.ObjectMeta, "example.com/note", "touched")
		metav1.SetMetaDataLabel(&xb.ObjectMeta, "team", "payments")
	})
	touched := xb.ResourceVersion
	eventually(t, timeout, "a reconcile after the label and annotation change", func() error {
		if n := reconciles(t, ""); n <= done {
			return fmt.Errorf("%v reconciles, none since the change", n)
		}
		return nil
	})
	if now := get(t, xb); now.ResourceVersion != touched {
		t.Errorf("status was written although nothing changed: resourceVersion %s, was %s", now.ResourceVersion, touched)
	}
	// A spec change that publishes the same thing: once its generation is
	// observed, every earlier event has been handled.
	mustUpdate(t, xb, func(xb *v1alpha1.ExternalBackend) { slices.Reverse(xb.Spec.Sources[0].Static.Endpoints) })
	waitReady(t, xb)

	expectUnchanged(t, ns, "db", before)
	if n := writes(t, "Service"); n != svcWrites {
		t.Errorf("%v Service writes, was %v", n, svcWrites)
	}
	if n := writes(t, "EndpointSlice"); n != sliceWrites {
		t.Errorf("%v EndpointSlice writes, was %v", n, sliceWrites)
	}
}

func TestDriftIsReverted(t *testing.T) {
	t.Parallel()
	addrs := []string{"192.0.2.10", "192.0.2.11", "192.0.2.12"}
	xb, sl := readyBackend(t, addrs)
	ns, slice := xb.Namespace, &sl[0]

	t.Run("endpoint condition flipped", func(t *testing.T) {
		framework.Edit(t, slice, func(s *discoveryv1.EndpointSlice) { s.Endpoints[0].Conditions.Ready = ptr.To(false) })
		waitPublished(t, ns, "db", allReady(addrs...))
	})
	t.Run("endpoint removed", func(t *testing.T) {
		framework.Edit(t, slice, func(s *discoveryv1.EndpointSlice) { s.Endpoints = s.Endpoints[1:] })
		waitPublished(t, ns, "db", allReady(addrs...))
	})
	t.Run("slice deleted", func(t *testing.T) {
		mustDelete(t, slice)
		waitPublished(t, ns, "db", allReady(addrs...))
	})
	t.Run("Service selector and port changed", func(t *testing.T) {
		framework.Edit(t, getService(t, ns, "db"), func(s *corev1.Service) {
			s.Spec.Selector = map[string]string{"app": "db"}
			s.Spec.Ports[0].Port = 6543
		})
		eventually(t, timeout, "Service reverted", func() error {
			svc := getService(t, ns, "db")
			if svc.Spec.Selector != nil || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 5432 {
				return fmt.Errorf("selector %v ports %v", svc.Spec.Selector, svc.Spec.Ports)
			}
			return nil
		})
	})
	t.Run("Service deleted", func(t *testing.T) {
		old := getService(t, ns, "db")
		mustDelete(t, old)
		var svc *corev1.Service
		eventually(t, timeout, "Service recreated", func() error {
			svc = &corev1.Service{}
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(old), svc); err != nil {
				return err
			}
			if svc.UID == old.UID {
				return fmt.Errorf("still the old Service")
			}
			return nil
		})
		// No garbage collector runs here: the controller must hand its
		// slices over to the new Service itself.
		eventually(t, timeout, "slices owned by the new Service", func() error {
			for _, s := range ourSlices(t, ns, "db") {
				if !metav1.IsControlledBy(&s, svc) {
					return fmt.Errorf("slice %s owned by %v", s.Name, s.OwnerReferences)
				}
			}
			return nil
		})
		waitPublished(t, ns, "db", allReady(addrs...))
	})
}

// foreignSlice is an EndpointSlice for Service svc that another controller manages.
func foreignSlice(ns, name, svc, addr string, extraLabels map[string]string) *discoveryv1.EndpointSlice {
	labels := map[string]string{discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: "someone-else"}
	for k, v := range extraLabels {
		labels[k] = v
	}
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{addr}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("pg"), Port: ptr.To[int32](5432)}},
	}
}

// expectSliceIntact fails the test unless the slice exists at resourceVersion rv.
func expectSliceIntact(t *testing.T, s *discoveryv1.EndpointSlice, rv string) {
	t.Helper()
	now := &discoveryv1.EndpointSlice{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(s), now); err != nil {
		t.Errorf("foreign slice %s: %v", s.Name, err)
		return
	}
	if now.ResourceVersion != rv {
		t.Errorf("foreign slice %s was modified: resourceVersion %s (was %s), labels %v", s.Name, now.ResourceVersion, rv, now.Labels)
	}
}

func TestForeignSlicesLeftAlone(t *testing.T) {
	t.Parallel()
	xb, _ := readyBackend(t, []string{"192.0.2.10"})
	ns := xb.Namespace
	// One as a person would write it, one that also carries our backend
	// label, so that it sits in the controller's cache.
	foreign := []*discoveryv1.EndpointSlice{
		foreignSlice(ns, "db-by-hand", "db", "198.51.100.7", nil),
		foreignSlice(ns, "db-other", "db", "198.51.100.8", map[string]string{v1alpha1.BackendLabel: "db"}),
	}
	rvs := map[string]string{}
	for _, s := range foreign {
		mustCreate(t, s)
		rvs[s.Name] = s.ResourceVersion
	}

	mustUpdate(t, xb, addEndpoint("192.0.2.11"))
	cur := waitReady(t, xb)
	waitAddresses(t, ns, "db", "192.0.2.10", "192.0.2.11")
	mustUpdate(t, xb, withAddresses("192.0.2.11"))
	waitReady(t, xb)
	waitPublished(t, ns, "db", map[string]string{"192.0.2.10": "false/true/true", "192.0.2.11": "true/true/false"})

	for _, s := range foreign {
		expectSliceIntact(t, s, rvs[s.Name])
	}
	if cur.Status.Slices != 1 || cur.Status.Endpoints.Total != 2 {
		t.Errorf("status counts foreign slices: slices %d endpoints %d, want 1 and 2", cur.Status.Slices, cur.Status.Endpoints.Total)
	}
}

// TestForeignSliceHoldingOurSliceName: a hand-written slice happens to have
// the name the controller would give its first slice. It must be left alone,
// and the backend must still be published under another name.
func TestForeignSliceHoldingOurSliceName(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	foreign := foreignSlice(ns, "db-ipv4-0", "db", "198.51.100.7", nil)
	mustCreate(t, foreign)
	rv := foreign.ResourceVersion

	createReady(t, staticBackend(ns, "db", "192.0.2.10"), "db", "192.0.2.10")
	expectSliceIntact(t, foreign, rv)
}

func TestServiceConflict(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	theirs := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "db"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80}},
		},
	}
	mustCreate(t, theirs)
	xb := staticBackend(ns, "db", "192.0.2.10")
	mustCreate(t, xb)

	cur := waitCondition(t, xb, v1alpha1.ConditionSynced, metav1.ConditionFalse, v1alpha1.ReasonServiceConflict)
	expectCondition(t, cur, v1alpha1.ConditionSynced, metav1.ConditionFalse, v1alpha1.ReasonServiceConflict, "db", "spec.service.name")
	expectCondition(t, cur, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonServiceConflict)
	expectCondition(t, cur, v1alpha1.ConditionStalled, metav1.ConditionTrue, v1alpha1.ReasonServiceConflict)
	waitEvent(t, xb, corev1.EventTypeWarning, v1alpha1.ReasonServiceConflict)
	if now := getService(t, ns, "db"); now.ResourceVersion != theirs.ResourceVersion {
		t.Errorf("the foreign Service was written: resourceVersion %s, was %s: %+v", now.ResourceVersion, theirs.ResourceVersion, now)
	}
	var all discoveryv1.EndpointSliceList
	if err := k8s.List(ctx, &all, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(all.Items) != 0 {
		t.Errorf("%d EndpointSlices exist for a Service we do not own, first %s", len(all.Items), all.Items[0].Name)
	}

	mustDelete(t, theirs)
	// Touch the spec so the controller looks again now, not in a minute.
	mustUpdate(t, xb, func(xb *v1alpha1.ExternalBackend) { xb.Spec.Service.Labels = map[string]string{"tier": "db"} })
	cur = waitReady(t, xb)
	waitAddresses(t, ns, "db", "192.0.2.10")
	expectControlledBy(t, getService(t, ns, "db"), cur)
	if c, _ := condition(cur, v1alpha1.ConditionStalled); c != nil {
		t.Errorf("Stalled is still set after recovery: %+v", c)
	}
}

func TestRenameService(t *testing.T) {
	t.Parallel()
	xb, oldSlices := readyBackend(t, dualStack)
	ns := xb.Namespace
	oldSvc := getService(t, ns, "db")

	mustUpdate(t, xb, func(xb *v1alpha1.ExternalBackend) { xb.Spec.Service.Name = "db-v2" })
	cur := waitReady(t, xb)
	if cur.Status.ServiceName != "db-v2" {
		t.Errorf("status.serviceName %q, want db-v2", cur.Status.ServiceName)
	}
	sl := waitAddresses(t, ns, "db-v2", framework.Served(dualStack...)...)
	svc := getService(t, ns, "db-v2")
	expectControlledBy(t, svc, cur)
	for i := range sl {
		expectControlledBy(t, &sl[i], svc)
	}
	waitGone(t, oldSvc)
	for i := range oldSlices {
		waitGone(t, &oldSlices[i])
	}
}

func TestDrainPeriod(t *testing.T) {
	t.Parallel()
	xb, _ := readyBackend(t, []string{"192.0.2.10", "192.0.2.11", "192.0.2.12"}, withDrainPeriod("3s"))
	ns := xb.Namespace

	// Remove .12, and have .11 drain by its health at the same time. The
	// removal happens late in a wall-clock second: status keeps times to the
	// second, so that is when rounding could cut the drain shortest.
	lateInSecond()
	removed := time.Now()
	mustUpdate(t, xb, func(xb *v1alpha1.ExternalBackend) {
		withAddresses("192.0.2.10", "192.0.2.11")(xb)
		withHealth("192.0.2.11", v1alpha1.HealthDraining)(xb)
	})
	waitPublished(t, ns, "db", map[string]string{
		"192.0.2.10": "true/true/false", "192.0.2.11": "false/true/true", "192.0.2.12": "false/true/true",
	})
	cur := waitStatus(t, xb, "192.0.2.12 listed as draining", func(xb *v1alpha1.ExternalBackend) error {
		if len(xb.Status.Draining) != 1 || xb.Status.Draining[0].Address != "192.0.2.12" {
			return fmt.Errorf("status.draining %v, want only 192.0.2.12", xb.Status.Draining)
		}
		return nil
	})
	if since := cur.Status.Draining[0].Since.Time; since.Before(removed.Truncate(time.Second)) {
		t.Errorf("draining since %s, before it was removed at %s", since, removed)
	}
	// Another reconcile while it drains must not change when the drain ends.
	mustUpdate(t, xb, func(xb *v1alpha1.ExternalBackend) {
		metav1.SetMetaDataAnnotation(&xb.ObjectMeta, "example.com/note", "touched while draining")
	})

	waitPublished(t, ns, "db", map[string]string{"192.0.2.10": "true/true/false", "192.0.2.11": "false/true/true"})
	// The controller saw .12 vanish after the update, so a full drain ends
	// no sooner than 3s after it.
	if drained := time.Since(removed); drained < 3*time.Second {
		t.Errorf("192.0.2.12 removed %s after it left the spec, before its 3s drain period ended", drained)
	}
	cur = waitStatus(t, xb, "draining emptied", func(xb *v1alpha1.ExternalBackend) error {
		if len(xb.Status.Draining) != 0 {
			return fmt.Errorf("status.draining %v", xb.Status.Draining)
		}
		return nil
	})
	if e := cur.Status.Endpoints; e.Total != 2 || e.Ready != 1 || e.Serving != 2 || e.Terminating != 1 {
		t.Errorf("status endpoints %+v, want 2 total, 1 ready, 2 serving, 1 terminating", e)
	}
}

// lateInSecond returns once the wall clock is at least 0.8s into a second.
func lateInSecond() {
	if frac := time.Duration(time.Now().Nanosecond()); frac < 800*time.Millisecond {
		time.Sleep(800*time.Millisecond - frac)
	}
}

func TestZeroDrainPeriod(t *testing.T) {
	t.Parallel()
	xb, _ := readyBackend(t, []string{"192.0.2.10", "192.0.2.11"}, withDrainPeriod("0s"))

	mustUpdate(t, xb, withAddresses("192.0.2.10"))
	cur := waitReady(t, xb)
	waitPublished(t, xb.Namespace, "db", allReady("192.0.2.10"))
	if len(cur.Status.Draining) != 0 || cur.Status.Endpoints.Terminating != 0 {
		t.Errorf("status.draining %v, terminating %d: nothing drains with drainPeriod 0s", cur.Status.Draining, cur.Status.Endpoints.Terminating)
	}
}

func TestHealthOverride(t *testing.T) {
	t.Parallel()
	xb, _ := readyBackend(t, []string{"192.0.2.10", "192.0.2.11", "192.0.2.12"})

	mustUpdate(t, xb, func(xb *v1alpha1.ExternalBackend) {
		withHealth("192.0.2.11", v1alpha1.HealthDraining)(xb)
		withHealth("192.0.2.12", v1alpha1.HealthUnhealthy)(xb)
	})
	cur := waitReady(t, xb)
	waitPublished(t, xb.Namespace, "db", map[string]string{
		"192.0.2.10": "true/true/false", "192.0.2.11": "false/true/true", "192.0.2.12": "false/false/false",
	})
	if len(cur.Status.Draining) != 0 {
		t.Errorf("status.draining %v: an endpoint draining by health has not vanished", cur.Status.Draining)
	}
}

// expectHeadless fails the test unless the Service has no cluster IP and
// every slice of ours carries the headless label.
func expectHeadless(t *testing.T, ns, svc string) *corev1.Service {
	t.Helper()
	var s *corev1.Service
	eventually(t, timeout, "headless Service "+svc, func() error {
		s = getService(t, ns, svc)
		if s.Spec.ClusterIP != corev1.ClusterIPNone {
			return fmt.Errorf("clusterIP %q, want None", s.Spec.ClusterIP)
		}
		for _, sl := range ourSlices(t, ns, svc) {
			if v, ok := sl.Labels[corev1.IsHeadlessService]; !ok || v != "" {
				return fmt.Errorf("slice %s labels %v lack %s=\"\"", sl.Name, sl.Labels, corev1.IsHeadlessService)
			}
			if !metav1.IsControlledBy(&sl, s) {
				return fmt.Errorf("slice %s owned by %v, not Service uid %s", sl.Name, sl.OwnerReferences, s.UID)
			}
		}
		return nil
	})
	return s
}

func TestHeadlessService(t *testing.T) {
	t.Parallel()
	xb, _ := readyBackend(t, dualStack, func(xb *v1alpha1.ExternalBackend) { xb.Spec.Service.Type = v1alpha1.ServiceTypeHeadless })
	expectHeadless(t, xb.Namespace, "db")
}

func TestSwitchClusterIPToHeadless(t *testing.T) {
	t.Parallel()
	xb, _ := readyBackend(t, dualStack)
	ns := xb.Namespace
	before := getService(t, ns, "db")
	if before.Spec.ClusterIP == corev1.ClusterIPNone || before.Spec.ClusterIP == "" {
		t.Fatalf("ClusterIP Service has clusterIP %q", before.Spec.ClusterIP)
	}

	mustUpdate(t, xb, func(xb *v1alpha1.ExternalBackend) { xb.Spec.Service.Type = v1alpha1.ServiceTypeHeadless })
	waitEvent(t, xb, corev1.EventTypeNormal, "ServiceRecreated")
	waitReady(t, xb)
	if after := expectHeadless(t, ns, "db"); after.UID == before.UID {
		t.Errorf("Service was not recreated (same uid %s)", after.UID)
	}
	waitPublished(t, ns, "db", allReady(framework.Served(dualStack...)...))

	mustUpdate(t, xb, func(xb *v1alpha1.ExternalBackend) { xb.Spec.Service.Type = v1alpha1.ServiceTypeClusterIP })
	waitReady(t, xb)
	eventually(t, timeout, "ClusterIP again", func() error {
		svc := getService(t, ns, "db")
		if svc.Spec.ClusterIP == corev1.ClusterIPNone || svc.Spec.ClusterIP == "" {
			return fmt.Errorf("clusterIP %q", svc.Spec.ClusterIP)
		}
		for _, s := range ourSlices(t, ns, "db") {
			if _, ok := s.Labels[corev1.IsHeadlessService]; ok || !metav1.IsControlledBy(&s, svc) {
				return fmt.Errorf("slice %s labels %v owners %v", s.Name, s.Labels, s.OwnerReferences)
			}
		}
		return nil
	})
}

// portsOf renders EndpointSlice ports as "name:port/protocol", sorted.
func portsOf(ps []discoveryv1.EndpointPort) []string {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, fmt.Sprintf("%s:%d/%s", ptr.Deref(p.Name, ""), ptr.Deref(p.Port, 0), ptr.Deref(p.Protocol, "")))
	}
	slices.Sort(out)
	return out
}

// servicePortsOf renders Service ports as "name:port->targetPort/protocol", sorted.
func servicePortsOf(ps []corev1.ServicePort) []string {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, fmt.Sprintf("%s:%d->%s/%s", p.Name, p.Port, p.TargetPort.String(), p.Protocol))
	}
	slices.Sort(out)
	return out
}

// waitPorts waits until the Service has svcPorts and every slice of ours,
// the same slices as uids names (updated in place), has slicePorts.
func waitPorts(t *testing.T, ns string, uids map[string]types.UID, svcPorts, slicePorts []string) {
	t.Helper()
	eventually(t, timeout, "ports", func() error {
		if got := servicePortsOf(getService(t, ns, "db").Spec.Ports); !slices.Equal(got, svcPorts) {
			return fmt.Errorf("Service ports %v, want %v", got, svcPorts)
		}
		sl := ourSlices(t, ns, "db")
		if got := sliceUIDs(sl); !maps.Equal(got, uids) {
			return fmt.Errorf("slices %v, want the same slices %v updated in place", got, uids)
		}
		for _, s := range sl {
			if got := portsOf(s.Ports); !slices.Equal(got, slicePorts) {
				return fmt.Errorf("slice %s ports %v, want %v", s.Name, got, slicePorts)
			}
		}
		return nil
	})
}

func TestPortChange(t *testing.T) {
	t.Parallel()
	xb, sl := readyBackend(t, dualStack)
	ns, uids := xb.Namespace, sliceUIDs(sl)

	mustUpdate(t, xb, func(xb *v1alpha1.ExternalBackend) { xb.Spec.Service.Ports[0].TargetPort = ptr.To[int32](15432) })
	waitReady(t, xb)
	waitPorts(t, ns, uids, []string{"pg:5432->15432/TCP"}, []string{"pg:15432/TCP"})

	mustUpdate(t, xb, func(xb *v1alpha1.ExternalBackend) {
		xb.Spec.Service.Ports = append(xb.Spec.Service.Ports, v1alpha1.ServicePort{Name: "metrics", Port: 9187})
	})
	waitReady(t, xb)
	waitPorts(t, ns, uids, []string{"metrics:9187->9187/TCP", "pg:5432->15432/TCP"}, []string{"metrics:9187/TCP", "pg:15432/TCP"})
	waitPublished(t, ns, "db", allReady(framework.Served(dualStack...)...))
}

func TestSuspend(t *testing.T) {
	t.Parallel()
	xb, _ := readyBackend(t, []string{"192.0.2.10", "192.0.2.11"}, withDrainPeriod("0s"))
	ns := xb.Namespace
	before := versions(t, ns, "db")

	mustUpdate(t, xb, func(xb *v1alpha1.ExternalBackend) { xb.Spec.Suspend = true })
	waitCondition(t, xb, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonSuspended)
	mustUpdate(t, xb, withAddresses("192.0.2.10", "192.0.2.12"))
	waitCondition(t, xb, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonSuspended)
	expectUnchanged(t, ns, "db", before)
	waitAddresses(t, ns, "db", "192.0.2.10", "192.0.2.11")

	mustUpdate(t, xb, func(xb *v1alpha1.ExternalBackend) { xb.Spec.Suspend = false })
	waitReady(t, xb)
	waitPublished(t, ns, "db", allReady("192.0.2.10", "192.0.2.12"))
}

// TestOwnershipChain is not parallel: it checks that the controller makes no
// write and no failed reconcile at all after the backend is deleted.
func TestOwnershipChain(t *testing.T) {
	cur, sl := readyBackend(t, dualStack)
	ns := cur.Namespace

	svc := getService(t, ns, "db")
	refs := svc.OwnerReferences
	if len(refs) != 1 || refs[0].APIVersion != v1alpha1.GroupVersion.String() || refs[0].Kind != "ExternalBackend" ||
		refs[0].UID != cur.UID || !ptr.Deref(refs[0].Controller, false) || !ptr.Deref(refs[0].BlockOwnerDeletion, false) {
		t.Errorf("Service ownerReferences %+v, want the ExternalBackend as controller with blockOwnerDeletion", refs)
	}
	for i := range sl {
		if refs := sl[i].OwnerReferences; len(refs) != 1 || refs[0].APIVersion != "v1" || refs[0].Kind != "Service" {
			t.Errorf("slice %s ownerReferences %+v, want the Service only", sl[i].Name, refs)
		}
		expectControlledBy(t, &sl[i], svc)
	}

	svcWrites, sliceWrites, failures := writes(t, "Service"), writes(t, "EndpointSlice"), reconciles(t, "error")
	gauges := map[string]string{"namespace": ns, "name": "db"}
	if _, n := framework.MetricValue(t, "backendslice_endpoints", gauges); n == 0 {
		t.Errorf("no endpoint gauges for the backend")
	}
	mustDelete(t, cur)
	eventually(t, timeout, "gauges of the deleted backend dropped", func() error {
		if _, n := framework.MetricValue(t, "backendslice_endpoints", gauges); n != 0 {
			return fmt.Errorf("%d gauge series left", n)
		}
		return nil
	})
	// Do what the garbage collector would: the controller must not bring
	// the Service or slices back.
	mustDelete(t, svc)
	for i := range sl {
		mustDelete(t, &sl[i])
	}
	// A suspended backend writes nothing but its status; once it is
	// handled, so are the deletions before it.
	barrier := staticBackend(ns, "barrier", "192.0.2.99")
	barrier.Spec.Suspend = true
	mustCreate(t, barrier)
	waitCondition(t, barrier, v1alpha1.ConditionReady, metav1.ConditionUnknown, v1alpha1.ReasonSuspended)

	if err := k8s.Get(ctx, client.ObjectKeyFromObject(svc), &corev1.Service{}); !apierrors.IsNotFound(err) {
		t.Errorf("Service of a deleted backend: %v, want NotFound", err)
	}
	var left discoveryv1.EndpointSliceList
	if err := k8s.List(ctx, &left, client.InNamespace(ns)); err != nil || len(left.Items) != 0 {
		t.Errorf("slices after deletion: %d (%v)", len(left.Items), err)
	}
	if n := writes(t, "Service"); n != svcWrites {
		t.Errorf("%v Service writes after deletion, was %v", n, svcWrites)
	}
	if n := writes(t, "EndpointSlice"); n != sliceWrites {
		t.Errorf("%v EndpointSlice writes after deletion, was %v", n, sliceWrites)
	}
	if n := reconciles(t, "error"); n != failures {
		t.Errorf("%v failed reconciles after deletion, was %v", n, failures)
	}
}
