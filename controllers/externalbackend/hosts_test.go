package externalbackend

import (
	"context"
	"net/netip"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/backendslice/backendslice/internal/publish"
)

// fullNode is a Node as a kubelet reports it, with everything the cache
// must not keep.
func fullNode(name string, addrs ...corev1.NodeAddress) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, UID: types.UID("uid-" + name), ResourceVersion: "7",
			Labels:      map[string]string{"kubernetes.io/hostname": name},
			Annotations: map[string]string{"node.alpha.kubernetes.io/ttl": "0"},
		},
		Spec: corev1.NodeSpec{PodCIDR: "10.244.1.0/24", PodCIDRs: []string{"10.244.1.0/24"}, ProviderID: "aws:///i-1"},
		Status: corev1.NodeStatus{
			Addresses:  addrs,
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Images:     []corev1.ContainerImage{{Names: []string{"registry.example/app:1"}, SizeBytes: 1 << 30}},
			NodeInfo:   corev1.NodeSystemInfo{KubeletVersion: "v1.37.2"},
		},
	}
}

var (
	internalIP = corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "192.0.2.21"}
	externalIP = corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "2001:db8::21"}
	hostname   = corev1.NodeAddress{Type: corev1.NodeHostName, Address: "n1"}
	dnsName    = corev1.NodeAddress{Type: corev1.NodeInternalDNS, Address: "n1.example.internal"}
)

func TestHostFieldsOnly(t *testing.T) {
	gone := toolscache.DeletedFinalStateUnknown{Key: "n1"}
	cases := []struct {
		name string
		in   any
		want any
	}{
		{"only the Node's IPs, Pod ranges and identity", fullNode("n1", hostname, internalIP, dnsName, externalIP), &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-n1", ResourceVersion: "7"},
			Spec:       corev1.NodeSpec{PodCIDRs: []string{"10.244.1.0/24"}},
			Status:     corev1.NodeStatus{Addresses: []corev1.NodeAddress{internalIP, externalIP}},
		}},
		{"a Node without addresses", fullNode("n2"), &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "n2", UID: "uid-n2", ResourceVersion: "7"},
			Spec:       corev1.NodeSpec{PodCIDRs: []string{"10.244.1.0/24"}},
		}},
		{"anything else passes", gone, gone},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := hostFieldsOnly(c.in)
			if err != nil || !reflect.DeepEqual(got, c.want) {
				t.Errorf("got %+v (%v), want %+v", got, err, c.want)
			}
		})
	}
}

func TestAddressesOnly(t *testing.T) {
	in := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: "default", UID: "u", ResourceVersion: "3",
			Labels:        map[string]string{discoveryv1.LabelServiceName: "kubernetes", "other": "x"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kube-apiserver"}}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"198.51.100.44"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}, NodeName: ptr.To("cp-1")},
			{Addresses: []string{"198.51.100.45"}},
		},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To[int32](6443)}},
	}
	want := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: "default", UID: "u", ResourceVersion: "3",
			Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"198.51.100.44"}}, {Addresses: []string{"198.51.100.45"}}},
	}
	if got, err := addressesOnly(in); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v (%v), want %+v", got, err, want)
	}
}

// TestCounted: only events that change a Node's denied addresses (or Pod
// ranges, where denied) reconcile and count; heartbeats do neither.
func TestCounted(t *testing.T) {
	n := func(addrs ...corev1.NodeAddress) *corev1.Node { return fullNode("n1", addrs...) }
	beat := n(internalIP)
	beat.Status.Conditions[0].LastHeartbeatTime = metav1.Now()
	beat.ResourceVersion = "8"
	moved := n(internalIP)
	moved.Spec.PodCIDRs = []string{"10.244.9.0/24"}
	cases := []struct {
		name           string
		podRanges      bool
		event          func(p predicateOf) bool
		passes, counts bool
	}{
		{"created with an address", false, func(p predicateOf) bool { return p.Create(event.TypedCreateEvent[*corev1.Node]{Object: n(internalIP)}) }, true, true},
		{"in the initial list", false, func(p predicateOf) bool {
			return p.Create(event.TypedCreateEvent[*corev1.Node]{Object: n(internalIP), IsInInitialList: true})
		}, false, true},
		{"created with only a hostname", false, func(p predicateOf) bool { return p.Create(event.TypedCreateEvent[*corev1.Node]{Object: n(hostname)}) }, false, false},
		{"heartbeat", false, func(p predicateOf) bool {
			return p.Update(event.TypedUpdateEvent[*corev1.Node]{ObjectOld: n(internalIP), ObjectNew: beat})
		}, false, false},
		{"a name added", false, func(p predicateOf) bool {
			return p.Update(event.TypedUpdateEvent[*corev1.Node]{ObjectOld: n(internalIP), ObjectNew: n(internalIP, dnsName)})
		}, false, false},
		{"an address added", false, func(p predicateOf) bool {
			return p.Update(event.TypedUpdateEvent[*corev1.Node]{ObjectOld: n(internalIP), ObjectNew: n(internalIP, externalIP)})
		}, true, true},
		{"an address changed", false, func(p predicateOf) bool {
			return p.Update(event.TypedUpdateEvent[*corev1.Node]{ObjectOld: n(internalIP), ObjectNew: n(corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "192.0.2.22"})})
		}, true, true},
		{"Pod range changed, not denied", false, func(p predicateOf) bool {
			return p.Update(event.TypedUpdateEvent[*corev1.Node]{ObjectOld: n(internalIP), ObjectNew: moved})
		}, false, false},
		{"Pod range changed, denied", true, func(p predicateOf) bool {
			return p.Update(event.TypedUpdateEvent[*corev1.Node]{ObjectOld: n(internalIP), ObjectNew: moved})
		}, true, true},
		{"deleted", false, func(p predicateOf) bool { return p.Delete(event.TypedDeleteEvent[*corev1.Node]{Object: n(internalIP)}) }, true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := &clusterHosts{podRanges: c.podRanges}
			passes := c.event(counted(h, h.nodeKey))
			if counts := h.changes.Load() > 0; passes != c.passes || counts != c.counts {
				t.Errorf("passes %v, counts %v; want %v and %v", passes, counts, c.passes, c.counts)
			}
		})
	}
}

// predicateOf is the part of a Node predicate TestCounted calls.
type predicateOf = interface {
	Create(event.TypedCreateEvent[*corev1.Node]) bool
	Update(event.TypedUpdateEvent[*corev1.Node]) bool
	Delete(event.TypedDeleteEvent[*corev1.Node]) bool
}

// TestClusterHosts: the hosts name whose address each is, the API
// server's first; they are read from the caches again only after a
// counted change.
func TestClusterHosts(t *testing.T) {
	cp := fullNode("cp-1", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "198.51.100.44"})
	apiSlice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "kubernetes", Namespace: metav1.NamespaceDefault, Labels: map[string]string{discoveryv1.LabelServiceName: apiServerService}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"198.51.100.44"}}},
	}
	lists := 0
	reader := fake.NewClientBuilder().WithScheme(testScheme(t)).
		WithObjects(fullNode("n1", hostname, internalIP, externalIP, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "::ffff:192.0.2.23"}), cp, apiSlice).
		WithInterceptorFuncs(interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, l client.ObjectList, opts ...client.ListOption) error {
			lists++
			return c.List(ctx, l, opts...)
		}}).Build()
	h := &clusterHosts{inner: fixedFamilies{corev1.IPv4Protocol}, nodes: reader, apiServer: reader, podRanges: true}
	n, err := h.read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := publish.ClusterNetworks{
		Ranges: []publish.ClusterRange{
			{Prefix: netip.MustParsePrefix("10.244.1.0/24"), Of: "Node cp-1's Pod range"},
			{Prefix: netip.MustParsePrefix("10.244.1.0/24"), Of: "Node n1's Pod range"},
		},
		Hosts: map[netip.Addr]string{
			netip.MustParseAddr("198.51.100.44"): "an address of the API server (EndpointSlice default/kubernetes)",
			netip.MustParseAddr("192.0.2.21"):    "Node n1's InternalIP address (its kubelet listens there)",
			netip.MustParseAddr("2001:db8::21"):  "Node n1's ExternalIP address (its kubelet listens there)",
			netip.MustParseAddr("192.0.2.23"):    "Node n1's InternalIP address (its kubelet listens there)",
		},
	}
	if !reflect.DeepEqual(n.cluster, want) || !n.served.Equal(sets.New(corev1.IPv4Protocol)) {
		t.Errorf("read %+v, want %+v", n.cluster, want)
	}
	if _, err := h.read(context.Background()); err != nil || lists != 2 {
		t.Errorf("a second read without a change listed again: %d lists in all (%v), want the first 2", lists, err)
	}
	h.changes.Add(1)
	if _, err := h.read(context.Background()); err != nil || lists != 4 {
		t.Errorf("a read after a change: %d lists in all (%v), want 4", lists, err)
	}
}
