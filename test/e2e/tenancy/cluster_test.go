package tenancy_test

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/cmd/backendslice/wiring"
	"github.com/backendslice/backendslice/controllers/externalbackend"
	"github.com/backendslice/backendslice/test/controlplane"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// clusterAddress is what a drop of an address of the cluster's own says,
// whichever it is.
const clusterAddress = "is an address of this cluster's own network (nodes, pods, services or control plane)"

// createNode creates a Node with Pod ranges and InternalIP addresses,
// deleted when the test ends. Every backend of the suite is judged
// against it: its addresses are in 10.0.0.0/8, which no other test here
// publishes.
func createNode(t *testing.T, name string, podCIDRs []string, internalIPs ...string) *corev1.Node {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDRs: podCIDRs}}
	for _, a := range internalIPs {
		node.Status.Addresses = append(node.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a})
	}
	if err := k8s.Create(ctx, node); err != nil {
		t.Fatalf("creating Node %s: %v", name, err)
	}
	t.Cleanup(func() { _ = client.IgnoreNotFound(k8s.Delete(ctx, node)) })
	if len(node.Status.Addresses) != len(internalIPs) {
		t.Fatalf("Node %s was created with addresses %v, want %v", name, node.Status.Addresses, internalIPs)
	}
	return node
}

// waitDropped waits until xb's status.dropped lists exactly addrs, and
// returns the backend.
func waitDropped(t *testing.T, xb *v1alpha1.ExternalBackend, addrs ...string) *v1alpha1.ExternalBackend {
	t.Helper()
	var cur *v1alpha1.ExternalBackend
	slices.Sort(addrs)
	framework.Eventually(t, framework.Timeout, fmt.Sprintf("%s/%s drops %v", xb.Namespace, xb.Name, addrs), func() error {
		cur = framework.Get(t, xb)
		var got []string
		for _, d := range cur.Status.Dropped {
			got = append(got, d.Address)
		}
		slices.Sort(got)
		if !slices.Equal(got, addrs) || cur.Status.ObservedGeneration != cur.Generation {
			return fmt.Errorf("status.dropped %+v", cur.Status.Dropped)
		}
		return nil
	})
	return cur
}

// TestClusterAddressesNotNamed: a tenant whose provider's allowedCIDRs
// cover the node network, the API server's address and the Service and
// Pod ranges lists a Node's InternalIP, the API server's address, an
// address in the Service range and one in a Node's Pod range. Each is
// dropped and the address beside them published; status and every event
// say of each only that it is the cluster's own, never whose: no Node
// name, no "InternalIP", no "ServiceCIDR", no range, no "API server".
func TestClusterAddressesNotNamed(t *testing.T) {
	t.Parallel()
	const (
		nodeIP   = "10.0.7.17"
		podRange = "10.244.77.0/24"
		podIP    = "10.244.77.9"
		elsewise = "10.0.7.200"
	)
	serviceRange := netip.MustParsePrefix(strings.Split(controlplane.ServiceCIDRs(), ",")[0])
	serviceIP := serviceRange.Addr().Next().Next().Next().String()
	apiServer := framework.APIServerAddress(t)
	apiServerAddr := netip.MustParseAddr(apiServer)

	ns := newNamespace(t, "unnamed", nil)
	node := createNode(t, "ip-10-0-7-17."+ns+".compute.internal", []string{podRange}, nodeIP)
	bp := uniqueName(ns, "static")
	createProvider(t, bp, admits("", ns), staticSpec("10.0.0.0/8", netip.PrefixFrom(apiServerAddr, apiServerAddr.BitLen()).String()))
	xb := backend(ns, "db", nil, staticSource(bp, elsewise, nodeIP, apiServer, serviceIP, podIP))
	if err := k8s.Create(ctx, xb); err != nil {
		t.Fatal(err)
	}
	waitStates(t, ns, "db", statesOf(ready, elsewise))
	cur := waitDropped(t, xb, nodeIP, apiServer, serviceIP, podIP)
	for _, d := range cur.Status.Dropped {
		if !strings.Contains(d.Reason, d.Address+" "+clusterAddress) {
			t.Errorf("%s dropped for %q, want it said to be %q", d.Address, d.Reason, clusterAddress)
		}
	}
	waitEvent(t, xb, corev1.EventTypeWarning, v1alpha1.ReasonAddressesDropped, clusterAddress)

	secrets := []string{node.Name, "ip-10-0-7-17", "InternalIP", "Node ", "ServiceCIDR", "API server", "Pod range",
		"EndpointSlice default", serviceRange.String(), serviceRange.Addr().String(), podRange, "10.244.77.0"}
	framework.ExpectNotNamed(t, cur, secrets...)
}

// TestPodRangeDeniedByDefault: the binary's defaults, which the suite's
// controller runs with, deny an address in a Node's Pod range
// (spec.podCIDRs), even inside the provider's allowedCIDRs; with
// --deny-pod-cidrs=false, the way out, it is published. Not parallel: it
// restarts the controller with that flag, as the flags parse it.
func TestPodRangeDeniedByDefault(t *testing.T) {
	byDefault, err := wiring.OptionsFromArgs(nil)
	if err != nil {
		t.Fatal(err)
	}
	if suite := framework.TestConfig().DenyPodCIDRs; suite != byDefault.Config.DenyPodCIDRs || !suite {
		t.Fatalf("the binary denies Pod ranges by default: %v, the suite's controller: %v; want both true", byDefault.Config.DenyPodCIDRs, suite)
	}
	turnedOff, err := wiring.OptionsFromArgs([]string{"--deny-pod-cidrs=false"})
	if err != nil {
		t.Fatal(err)
	}
	const (
		podRange = "10.244.78.0/24"
		podIP    = "10.244.78.9"
		other    = "10.245.78.9"
	)
	ns := newNamespace(t, "podrange", nil)
	createNode(t, "node-"+ns, []string{podRange})
	bp := uniqueName(ns, "static")
	createProvider(t, bp, admits("", ns), staticSpec("10.244.0.0/14"))
	xb := backend(ns, "db", nil, staticSource(bp, podIP, other))
	if err := k8s.Create(ctx, xb); err != nil {
		t.Fatal(err)
	}

	waitStates(t, ns, "db", statesOf(ready, other))
	cur := waitDropped(t, xb, podIP)
	if r := cur.Status.Dropped[0].Reason; !strings.Contains(r, clusterAddress) || strings.Contains(r, podRange) {
		t.Errorf("%s dropped for %q, want it said to be %q without the range", podIP, r, clusterAddress)
	}

	framework.RestartControllerWith(t, func(c *externalbackend.Config) { c.DenyPodCIDRs = turnedOff.Config.DenyPodCIDRs })
	waitStates(t, ns, "db", statesOf(ready, podIP, other))
	waitDropped(t, xb)
}
