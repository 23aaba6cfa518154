package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// badSpecs are changes admission must refuse, each with the field the error
// must name (list indices left out).
var badSpecs = []struct {
	name   string
	change func(*v1alpha1.ExternalBackend)
	field  string
}{
	{"invalid IPv4", addEndpoint("192.0.2.300"), "spec.sources[].static.endpoints[].address"},
	{"invalid IPv4 with FQDN enabled", func(xb *v1alpha1.ExternalBackend) {
		xb.Spec.AddressTypes = []v1alpha1.AddressType{v1alpha1.AddressTypeIPv4, v1alpha1.AddressTypeFQDN}
		addEndpoint("192.0.2.300")(xb)
	}, "spec.sources[].static.endpoints[].address"},
	{"invalid IPv6", addEndpoint("2001:db8::zz"), "spec.sources[].static.endpoints[].address"},
	{"IPv4 loopback", addEndpoint("127.0.0.1"), "spec.sources[].static.endpoints[].address"},
	{"IPv6 loopback", addEndpoint("::1"), "spec.sources[].static.endpoints[].address"},
	{"IPv4 link-local", addEndpoint("169.254.169.254"), "spec.sources[].static.endpoints[].address"},
	{"IPv6 link-local", addEndpoint("fe80::1"), "spec.sources[].static.endpoints[].address"},
	{"duplicate address", addEndpoint("192.0.2.10"), "spec.sources[].static.endpoints[]"},
	{"1001 endpoints", withAddresses(ipv6s(1001)...), "spec.sources[].static.endpoints"},
	{"two source kinds", func(xb *v1alpha1.ExternalBackend) {
		xb.Spec.Sources[0].DNS = &v1alpha1.DNSSource{Name: "db.example.com"}
	}, "spec.sources[]"},
	{"DNS name without FQDN", addEndpoint("db.example.com"), "spec.sources[].static.endpoints[].address"},
	{"port name clash", func(xb *v1alpha1.ExternalBackend) {
		xb.Spec.Service.Ports = append(xb.Spec.Service.Ports, v1alpha1.ServicePort{Name: "pg", Port: 5433})
	}, "spec.service.ports[]"},
	{"same port number and protocol", func(xb *v1alpha1.ExternalBackend) {
		xb.Spec.Service.Ports = append(xb.Spec.Service.Ports, v1alpha1.ServicePort{Name: "pg2", Port: 5432, Protocol: "TCP"})
	}, "spec.service.ports"},
	{"Service name of 64 characters", func(xb *v1alpha1.ExternalBackend) {
		xb.Spec.Service.Name = "db-" + strings.Repeat("x", 61)
	}, "spec.service.name"},
	{"1001 endpoints per slice", func(xb *v1alpha1.ExternalBackend) {
		xb.Spec.MaxEndpointsPerSlice = ptr.To[int32](1001)
	}, "spec.maxEndpointsPerSlice"},
	{"dns minRefresh of a nanosecond", func(xb *v1alpha1.ExternalBackend) {
		xb.Spec.Sources = append(xb.Spec.Sources, v1alpha1.Source{Name: "lookup", DNS: &v1alpha1.DNSSource{
			Name: "db.example.com", MinRefresh: duration("1ns")}})
	}, "spec.sources[].dns.minRefresh"},
	{"dns maxRefresh under a second", func(xb *v1alpha1.ExternalBackend) {
		xb.Spec.Sources = append(xb.Spec.Sources, v1alpha1.Source{Name: "lookup", DNS: &v1alpha1.DNSSource{
			Name: "db.example.com", MaxRefresh: duration("999ms")}})
	}, "spec.sources[].dns.maxRefresh"},
}

// listIndex matches a list index in a field path, such as the [0] of spec.sources[0].
var listIndex = regexp.MustCompile(`\[\d+\]`)

// expectInvalid fails the test unless err is an Invalid error naming field,
// given without list indices (spec.sources[].static matches spec.sources[2].static).
func expectInvalid(t *testing.T, err error, field string) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("accepted, want rejected naming %s", field)
	case !apierrors.IsInvalid(err):
		t.Errorf("error %v, want Invalid", err)
	case !strings.Contains(listIndex.ReplaceAllString(err.Error(), "[]"), field):
		t.Errorf("error does not name %s: %v", field, err)
	}
}

func TestAdmissionRejectsBadSpecs(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	working := staticBackend(ns, "working", "192.0.2.10", "192.0.2.11")
	createReady(t, working, "working", "192.0.2.10", "192.0.2.11")
	before, generation := versions(t, ns, "working"), working.Generation
	good := working.Spec.DeepCopy()

	for i, bad := range badSpecs {
		t.Run(bad.name, func(t *testing.T) {
			xb := staticBackend(ns, fmt.Sprintf("bad-%d", i), "192.0.2.10", "192.0.2.11")
			bad.change(xb)
			expectInvalid(t, k8s.Create(ctx, xb), bad.field)
			err := update(t, working, bad.change)
			expectInvalid(t, err, bad.field)
			if err == nil {
				// Put the good spec back so the next cases start from it.
				mustUpdate(t, working, func(xb *v1alpha1.ExternalBackend) { xb.Spec = *good.DeepCopy() })
			}
		})
	}

	if cur := get(t, working); cur.Generation != generation {
		t.Errorf("generation %d, was %d: an update got through", cur.Generation, generation)
	}
	expectUnchanged(t, ns, "working", before)
	waitAddresses(t, ns, "working", "192.0.2.10", "192.0.2.11")
}

// expectNoService fails the test if the namespace holds any Service.
func expectNoService(t *testing.T, ns string) {
	t.Helper()
	var list corev1.ServiceList
	if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Errorf("%d Services, want none; first %s", len(list.Items), list.Items[0].Name)
	}
}

// waitInvalidSpec waits until the backend reports InvalidSpec with a message
// naming field, Stalled, and a Warning event about it.
func waitInvalidSpec(t *testing.T, xb *v1alpha1.ExternalBackend, field string) *v1alpha1.ExternalBackend {
	t.Helper()
	cur := waitCondition(t, xb, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec)
	expectCondition(t, cur, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec, field)
	expectCondition(t, cur, v1alpha1.ConditionStalled, metav1.ConditionTrue, v1alpha1.ReasonInvalidSpec, field)
	if cur.Status.ObservedGeneration != cur.Generation {
		t.Errorf("observedGeneration %d, want %d: a terminal spec error is the final word on this generation",
			cur.Status.ObservedGeneration, cur.Generation)
	}
	waitEvent(t, xb, corev1.EventTypeWarning, v1alpha1.ReasonInvalidSpec)
	return cur
}

// dottedName is a valid ExternalBackend name that is not a valid Service name.
const dottedName = "db.primary"

func TestDottedNameWithoutServiceName(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	xb := staticBackend(ns, dottedName, "192.0.2.10")
	mustCreate(t, xb)
	waitInvalidSpec(t, xb, "spec.service.name")
	expectNoService(t, ns)
}

// TestDottedNameWithServiceName follows the advice of the InvalidSpec message:
// a backend whose own name is not a valid Service name sets spec.service.name.
func TestDottedNameWithServiceName(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	xb := staticBackend(ns, dottedName, "192.0.2.10")
	xb.Spec.Service.Name = "db"
	createReady(t, xb, "db", "192.0.2.10")
}

// TestNegativeDrainPeriod: admission refuses a negative drain period, so
// the controller's own check (InvalidSpec) is only a backstop for objects
// stored before the rule; what is published stays as it was.
func TestNegativeDrainPeriod(t *testing.T) {
	t.Parallel()
	xb, _ := readyBackend(t, []string{"192.0.2.10", "192.0.2.11"})
	ns := xb.Namespace
	before := versions(t, ns, "db")

	err := update(t, xb, func(xb *v1alpha1.ExternalBackend) {
		withDrainPeriod("-5s")(xb)
		withAddresses("192.0.2.10")(xb)
	})
	expectRefused(t, err, []cause{{"spec.drainPeriod", "spec.drainPeriod: -5s is negative; use 0s or more"}})
	expectUnchanged(t, ns, "db", before)

	mustUpdate(t, xb, func(xb *v1alpha1.ExternalBackend) {
		withDrainPeriod("0s")(xb)
		withAddresses("192.0.2.10")(xb)
	})
	waitReady(t, xb)
	waitPublished(t, ns, "db", allReady("192.0.2.10"))
}

// expectDropped fails the test unless status.dropped lists exactly the
// addresses of want, each with a reason containing the text want gives.
func expectDropped(t *testing.T, xb *v1alpha1.ExternalBackend, want map[string]string) {
	t.Helper()
	if len(xb.Status.Dropped) != len(want) {
		t.Errorf("status.dropped %+v, want %d entries", xb.Status.Dropped, len(want))
	}
	for _, d := range xb.Status.Dropped {
		words, ok := want[d.Address]
		switch {
		case !ok:
			t.Errorf("%s dropped, want only %v", d.Address, want)
		case d.Source != "fixed" || !strings.Contains(d.Reason, words):
			t.Errorf("%s dropped by source %q for %q, want source fixed and a reason mentioning %q", d.Address, d.Source, d.Reason, words)
		}
	}
}

// TestDeniedAddressesDropped: the metadata addresses denied by default
// (AWS's IPv6 one, Azure's WireServer) and an address of the test's
// --denied-cidrs are dropped; the others are published.
func TestDeniedAddressesDropped(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	xb := staticBackend(ns, "db", "192.0.2.10", "fd00:ec2::254", "168.63.129.16", "203.0.113.200", "2001:db8::10")
	mustCreate(t, xb)
	cur := waitCondition(t, xb, v1alpha1.ConditionResolved, metav1.ConditionTrue, v1alpha1.ReasonAddressesDropped)
	waitAddresses(t, ns, "db", framework.Served("192.0.2.10", "2001:db8::10")...)
	expectDropped(t, cur, map[string]string{"fd00:ec2::254": "--denied-cidrs", "168.63.129.16": "--denied-cidrs", "203.0.113.200": "--denied-cidrs"})
	waitEvent(t, xb, corev1.EventTypeWarning, v1alpha1.ReasonAddressesDropped)
}

// clusterAddress is what the reason of a drop of the cluster's own address
// says, whichever it is: whose it is stays in the controller's log.
const clusterAddress = "is an address of this cluster's own network (nodes, pods, services or control plane)"

// TestServiceRangeDropped: an address in the cluster's Service range (read
// from its ServiceCIDRs, with no flag) is dropped, in either spelling,
// including one a NAT64 prefix embeds.
func TestServiceRangeDropped(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	xb := staticBackend(ns, "db", "192.0.2.10", "10.96.0.1", "64:ff9b::a60:1")
	mustCreate(t, xb)
	cur := waitCondition(t, xb, v1alpha1.ConditionResolved, metav1.ConditionTrue, v1alpha1.ReasonAddressesDropped)
	waitAddresses(t, ns, "db", framework.Served("192.0.2.10")...)
	expectDropped(t, cur, map[string]string{"10.96.0.1": clusterAddress, "64:ff9b::a60:1": clusterAddress})
}

// TestPodRangeDropped: by default (--deny-pod-cidrs), an address in a Node's Pod
// range is dropped, and a Node that gets a Pod range later drops what it
// covers at once, without a spec change.
func TestPodRangeDropped(t *testing.T) {
	ns := newNamespace(t)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-" + ns}, Spec: corev1.NodeSpec{PodCIDRs: []string{"10.244.1.0/24"}}}
	mustCreate(t, node)
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), node) })
	xb := staticBackend(ns, "db", "192.0.2.10", "10.244.1.7", "10.245.0.7")
	mustCreate(t, xb)
	cur := waitCondition(t, xb, v1alpha1.ConditionResolved, metav1.ConditionTrue, v1alpha1.ReasonAddressesDropped)
	waitAddresses(t, ns, "db", "192.0.2.10", "10.245.0.7")
	expectDropped(t, cur, map[string]string{"10.244.1.7": clusterAddress})

	other := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "other-" + ns}}
	mustCreate(t, other)
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), other) })
	other.Spec.PodCIDRs = []string{"10.245.0.0/24"}
	if err := k8s.Update(context.Background(), other); err != nil {
		t.Fatalf("giving node %s a Pod range: %v", other.Name, err)
	}
	waitAddresses(t, ns, "db", "192.0.2.10")
}

// Addresses of the Node TestClusterHostsDropped makes. Every backend is
// judged against every Node: no other test publishes them.
const (
	nodeInternalIP = "192.0.2.241"
	nodeExternalIP = "2001:db8::241"
	nodeLaterIP    = "192.0.2.242"
)

// TestClusterHostsDropped: with no flag, an endpoint at a Node's
// InternalIP or ExternalIP (where its kubelet listens) or at the API
// server's own address (in the slice of default/kubernetes, which the API
// server writes) is dropped, as an address of the cluster's own. A Node's
// heartbeats reconcile nothing; its new address drops the endpoint there at
// once, without a spec change; a deleted Node's addresses are published
// again. Not parallel: a Node concerns every backend, and the test counts
// reconciles.
func TestClusterHostsDropped(t *testing.T) {
	apiServer := framework.APIServerAddress(t)
	ns := newNamespace(t)
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-" + ns},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeHostName, Address: "node-" + ns},
			{Type: corev1.NodeInternalIP, Address: nodeInternalIP},
			{Type: corev1.NodeExternalIP, Address: nodeExternalIP},
		}},
	}
	mustCreate(t, node)
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), node) })
	if len(node.Status.Addresses) != 3 {
		t.Fatalf("node %s was created with addresses %v, want the 3 given", node.Name, node.Status.Addresses)
	}
	xb := staticBackend(ns, "db", "192.0.2.10", nodeLaterIP, nodeInternalIP, nodeExternalIP, apiServer)
	mustCreate(t, xb)
	cur := waitCondition(t, xb, v1alpha1.ConditionResolved, metav1.ConditionTrue, v1alpha1.ReasonAddressesDropped)
	waitAddresses(t, ns, "db", "192.0.2.10", nodeLaterIP)
	dropped := map[string]string{nodeInternalIP: clusterAddress, nodeExternalIP: clusterAddress, apiServer: clusterAddress}
	expectDropped(t, cur, dropped)
	waitEvent(t, xb, corev1.EventTypeWarning, v1alpha1.ReasonAddressesDropped)

	heartbeatsReconcileNothing(t, xb, node)

	node.Status.Addresses = append(node.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: nodeLaterIP})
	if err := k8s.Status().Update(context.Background(), node); err != nil {
		t.Fatalf("giving node %s another address: %v", node.Name, err)
	}
	waitAddresses(t, ns, "db", "192.0.2.10")
	dropped[nodeLaterIP] = clusterAddress
	eventually(t, timeout, nodeLaterIP+" listed as dropped", func() error {
		if n := len(get(t, xb).Status.Dropped); n != len(dropped) {
			return fmt.Errorf("%d addresses dropped, want %d", n, len(dropped))
		}
		return nil
	})
	expectDropped(t, get(t, xb), dropped)

	mustDelete(t, node)
	waitAddresses(t, ns, "db", framework.Served("192.0.2.10", nodeLaterIP, nodeInternalIP, nodeExternalIP)...)
}

// heartbeatsReconcileNothing updates the Node's conditions, as its kubelet
// does, and checks that no backend is reconciled and nothing written:
// only its addresses (and Pod ranges) concern the controller.
func heartbeatsReconcileNothing(t *testing.T, xb *v1alpha1.ExternalBackend, node *corev1.Node) {
	t.Helper()
	before, xbVersion := versions(t, xb.Namespace, "db"), get(t, xb).ResourceVersion
	svcWrites, sliceWrites, done := writes(t, "Service"), writes(t, "EndpointSlice"), reconciles(t, "")
	const heartbeats = 10
	for i := range heartbeats {
		node.Status.Conditions = []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: fmt.Sprintf("heartbeat %d", i), LastHeartbeatTime: metav1.Now(),
		}}
		if err := k8s.Status().Update(context.Background(), node); err != nil {
			t.Fatalf("heartbeat %d of node %s: %v", i, node.Name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(quietPeriod)
	if n := reconciles(t, "") - done; n != 0 {
		t.Errorf("%v reconciles after %d heartbeats of a Node, want none", n, heartbeats)
	}
	if svc, sl := writes(t, "Service")-svcWrites, writes(t, "EndpointSlice")-sliceWrites; svc != 0 || sl != 0 {
		t.Errorf("%v Service and %v EndpointSlice writes after the heartbeats, want none", svc, sl)
	}
	expectUnchanged(t, xb.Namespace, "db", before)
	if v := get(t, xb).ResourceVersion; v != xbVersion {
		t.Errorf("the backend was written after the heartbeats: resourceVersion %s, was %s", v, xbVersion)
	}
}

func TestAddressOutsideAddressTypesDropped(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	xb := staticBackend(ns, "db", "192.0.2.10", "2001:db8::10")
	xb.Spec.AddressTypes = []v1alpha1.AddressType{v1alpha1.AddressTypeIPv4}
	mustCreate(t, xb)
	cur := waitCondition(t, xb, v1alpha1.ConditionResolved, metav1.ConditionTrue, v1alpha1.ReasonAddressesDropped)
	waitAddresses(t, ns, "db", "192.0.2.10")
	expectDropped(t, cur, map[string]string{"2001:db8::10": "spec.addressTypes"})
	if fams := getService(t, ns, "db").Spec.IPFamilies; len(fams) != 1 || fams[0] != corev1.IPv4Protocol {
		t.Errorf("Service ipFamilies %v, want [IPv4]", fams)
	}
}

// waitProviderNotAvailable waits until the backend says the source named
// source has no provider, and is stalled on it.
func waitProviderNotAvailable(t *testing.T, xb *v1alpha1.ExternalBackend, source string) *v1alpha1.ExternalBackend {
	t.Helper()
	cur := waitCondition(t, xb, v1alpha1.ConditionResolved, metav1.ConditionFalse, v1alpha1.ReasonProviderNotAvailable)
	expectCondition(t, cur, v1alpha1.ConditionResolved, metav1.ConditionFalse, v1alpha1.ReasonProviderNotAvailable, source)
	expectCondition(t, cur, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonProviderNotAvailable, source)
	expectCondition(t, cur, v1alpha1.ConditionStalled, metav1.ConditionTrue, v1alpha1.ReasonProviderNotAvailable, source)
	return cur
}

func TestUnavailableProviderNextToStatic(t *testing.T) {
	t.Parallel()
	xb, _ := readyBackend(t, []string{"192.0.2.10", "192.0.2.11"})

	mustUpdate(t, xb, func(xb *v1alpha1.ExternalBackend) {
		xb.Spec.Sources = append(xb.Spec.Sources, dnsSource("lookup"))
		addEndpoint("192.0.2.12")(xb)
	})
	waitProviderNotAvailable(t, xb, "lookup")
	waitPublished(t, xb.Namespace, "db", allReady("192.0.2.10", "192.0.2.11", "192.0.2.12"))
}

func TestFailedSourceKeepsPublishedEndpoints(t *testing.T) {
	t.Parallel()
	xb, _ := readyBackend(t, []string{"192.0.2.10", "192.0.2.11"}, withDrainPeriod("0s"))
	ns := xb.Namespace
	before := versions(t, ns, "db")

	mustUpdate(t, xb, func(xb *v1alpha1.ExternalBackend) { xb.Spec.Sources = []v1alpha1.Source{dnsSource("lookup")} })
	cur := waitProviderNotAvailable(t, xb, "lookup")
	expectUnchanged(t, ns, "db", before)
	waitPublished(t, ns, "db", allReady("192.0.2.10", "192.0.2.11"))
	if len(cur.Status.Draining) != 0 || cur.Status.Endpoints.Total != 2 || cur.Status.Endpoints.Ready != 2 {
		t.Errorf("status draining %v endpoints %+v, want the 2 endpoints kept ready", cur.Status.Draining, cur.Status.Endpoints)
	}
}

// TestLongNameRejected: the backend's name labels its Service and slices, so
// it must fit a label value.
func TestLongNameRejected(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	err := k8s.Create(ctx, staticBackend(ns, "db-"+strings.Repeat("x", 61), "192.0.2.10"))
	expectInvalid(t, err, "metadata.name")
}
