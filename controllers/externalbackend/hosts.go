package externalbackend

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/backendslice/backendslice/internal/publish"
)

// An endpoint at a Node's address reaches its kubelet (10250) and its
// NodePorts with the network identity of whichever Pod connects; one at
// the API server's address reaches it past the NetworkPolicies written for
// its Service. That is the "or at the API server" half of CVE-2021-25740,
// and both are denied whatever the flags say.

// +kubebuilder:rbac:groups="",resources=nodes,verbs=list;watch
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=list;watch

// apiServerService is the Service of namespace default whose EndpointSlices
// the API server writes itself, with its own addresses.
const apiServerService = "kubernetes"

// clusterHosts adds to what inner reads the cluster's own hosts: each
// Node's InternalIP and ExternalIP, the API server's addresses (the slices
// of Service default/kubernetes) and, with --deny-pod-cidrs (the
// default), the Nodes' Pod ranges. It builds them from its caches again only after a watch counted
// a change (see counted), not on every reconcile: a cluster has thousands
// of Nodes, and a fleet thousands of backends.
type clusterHosts struct {
	inner clusterNetworks
	// nodes hold Nodes as hostFieldsOnly trims them.
	nodes client.Reader
	// apiServer holds the API server's slices as addressesOnly trims them.
	apiServer client.Reader
	podRanges bool
	// changes counts the changes the watches saw; built is what the caches
	// held at some count.
	changes atomic.Uint64
	mu      sync.Mutex
	built   *hostsAt
}

// hostsAt are the hosts the caches held when changes was at.
type hostsAt struct {
	at     uint64
	ranges []publish.ClusterRange
	hosts  map[netip.Addr]string
}

func (h *clusterHosts) read(ctx context.Context) (network, error) {
	n, err := h.inner.read(ctx)
	if err != nil {
		return n, err
	}
	b, err := h.current(ctx)
	if err != nil {
		return n, err
	}
	n.cluster.Ranges = append(n.cluster.Ranges, b.ranges...)
	n.cluster.Hosts = b.hosts
	return n, nil
}

// current are the hosts as of the last change counted. A watch counts a
// change after its cache holds it, so a build that starts after the count
// sees it.
func (h *clusterHosts) current(ctx context.Context) (*hostsAt, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	at := h.changes.Load()
	if h.built != nil && h.built.at == at {
		return h.built, nil
	}
	b, err := h.build(ctx)
	if err != nil {
		return nil, err
	}
	b.at = at
	h.built = b
	return b, nil
}

// build reads the hosts from the caches. Their objects are only read
// here, so they are not copied. The API server's come first: on a
// control-plane Node that serves it, the address is named as the API
// server's.
func (h *clusterHosts) build(ctx context.Context) (*hostsAt, error) {
	b := &hostsAt{hosts: map[netip.Addr]string{}}
	var apiSlices discoveryv1.EndpointSliceList
	if err := h.apiServer.List(ctx, &apiSlices, client.InNamespace(metav1.NamespaceDefault),
		client.MatchingLabels{discoveryv1.LabelServiceName: apiServerService}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing the EndpointSlices of Service default/kubernetes to learn the API server's addresses: %w", err)
	}
	for _, s := range apiSlices.Items {
		for _, a := range sliceAddresses(&s) {
			b.addHost(a, fmt.Sprintf("an address of the API server (EndpointSlice %s/%s)", s.Namespace, s.Name))
		}
	}
	var nodes corev1.NodeList
	if err := h.nodes.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing Nodes to learn the cluster's own addresses: %w", err)
	}
	for i := range nodes.Items {
		b.addNode(&nodes.Items[i], h.podRanges)
	}
	return b, nil
}

// addNode adds a Node's denied addresses and, where asked, its Pod ranges.
func (b *hostsAt) addNode(node *corev1.Node, podRanges bool) {
	for _, a := range hostAddresses(node) {
		b.addHost(a.Address, fmt.Sprintf("Node %s's %s address (its kubelet listens there)", node.Name, a.Type))
	}
	if !podRanges {
		return
	}
	for _, c := range node.Spec.PodCIDRs {
		if p, err := netip.ParsePrefix(c); err == nil {
			b.ranges = append(b.ranges, publish.ClusterRange{Prefix: p.Masked(), Of: "Node " + node.Name + "'s Pod range"})
		}
	}
}

// addHost adds an address, unless it is not an IP or already named.
func (b *hostsAt) addHost(addr, of string) {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return
	}
	a = a.Unmap().WithZone("")
	if _, ok := b.hosts[a]; !ok {
		b.hosts[a] = of
	}
}

// hostAddresses are the addresses of a Node that no endpoint may have:
// InternalIP and ExternalIP. Its other addresses are names.
func hostAddresses(node *corev1.Node) []corev1.NodeAddress {
	var out []corev1.NodeAddress
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP || a.Type == corev1.NodeExternalIP {
			out = append(out, a)
		}
	}
	return out
}

// sliceAddresses are every address of a slice's endpoints, ready or not.
func sliceAddresses(s *discoveryv1.EndpointSlice) []string {
	var out []string
	for _, e := range s.Endpoints {
		out = append(out, e.Addresses...)
	}
	return out
}

// hostFieldsOnly keeps of a Node what clusterHosts reads, so that the
// cache holds a few bytes a Node, not its conditions, images and other
// status: its InternalIP and ExternalIP addresses and its Pod ranges.
func hostFieldsOnly(o any) (any, error) {
	node, ok := o.(*corev1.Node)
	if !ok {
		return o, nil
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: node.Name, UID: node.UID, ResourceVersion: node.ResourceVersion},
		Spec:       corev1.NodeSpec{PodCIDRs: node.Spec.PodCIDRs},
		Status:     corev1.NodeStatus{Addresses: hostAddresses(node)},
	}, nil
}

// addressesOnly keeps of the API server's slices what clusterHosts reads:
// the addresses, and the label it selects them by.
func addressesOnly(o any) (any, error) {
	s, ok := o.(*discoveryv1.EndpointSlice)
	if !ok {
		return o, nil
	}
	out := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace, UID: s.UID, ResourceVersion: s.ResourceVersion,
			Labels: map[string]string{discoveryv1.LabelServiceName: s.Labels[discoveryv1.LabelServiceName]}},
		AddressType: s.AddressType,
	}
	for _, e := range s.Endpoints {
		out.Endpoints = append(out.Endpoints, discoveryv1.Endpoint{Addresses: e.Addresses})
	}
	return out, nil
}

// apiServerCacheOptions make a cache of the API server's own slices alone:
// the manager's cache holds only slices with our label, and one namespace
// there cannot select both those and these (a label selector cannot say
// "or").
func apiServerCacheOptions(mgr ctrl.Manager) cache.Options {
	return cache.Options{
		HTTPClient:                  mgr.GetHTTPClient(),
		Scheme:                      mgr.GetScheme(),
		Mapper:                      mgr.GetRESTMapper(),
		DefaultNamespaces:           map[string]cache.Config{metav1.NamespaceDefault: {}},
		DefaultLabelSelector:        labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: apiServerService}),
		DefaultTransform:            addressesOnly,
		ReaderFailOnMissingInformer: true,
	}
}

// watchHosts wraps inner in clusterHosts and returns the watches that keep
// it current and have every backend judged again when a host changes.
func (r *Reconciler) watchHosts(mgr ctrl.Manager, inner clusterNetworks) (*clusterHosts, []source.Source, error) {
	h := &clusterHosts{inner: inner, nodes: r.Client, apiServer: r.HostsReader, podRanges: r.Config.DenyPodCIDRs}
	nodes := handler.TypedEnqueueRequestsFromMapFunc(func(ctx context.Context, _ *corev1.Node) []ctrl.Request { return r.backends(ctx) })
	watches := []source.Source{source.Kind(mgr.GetCache(), &corev1.Node{}, nodes, counted(h, h.nodeKey))}
	if h.apiServer != nil {
		return h, watches, nil
	}
	apiServer, err := cache.New(mgr.GetConfig(), apiServerCacheOptions(mgr))
	if err != nil {
		return nil, nil, fmt.Errorf("making the cache of the API server's EndpointSlices: %w", err)
	}
	if err := mgr.Add(apiServer); err != nil {
		return nil, nil, err
	}
	h.apiServer = apiServer
	apiSlices := handler.TypedEnqueueRequestsFromMapFunc(func(ctx context.Context, _ *discoveryv1.EndpointSlice) []ctrl.Request {
		return r.backends(ctx)
	})
	return h, append(watches,
		source.Kind[*discoveryv1.EndpointSlice](apiServer, &discoveryv1.EndpointSlice{}, apiSlices, counted(h, sliceAddresses))), nil
}

// nodeKey is what clusterHosts reads of a Node.
func (h *clusterHosts) nodeKey(node *corev1.Node) []string {
	var key []string
	for _, a := range hostAddresses(node) {
		key = append(key, string(a.Type)+"="+a.Address)
	}
	if h.podRanges {
		key = append(key, node.Spec.PodCIDRs...)
	}
	return key
}

// counted passes on the events of a watch that change what key reads,
// after counting them in h.changes. The initial list is counted but not
// passed on: every backend is reconciled at start anyway. Any other
// update, such as a Node's heartbeats and conditions, is neither.
func counted[T client.Object](h *clusterHosts, key func(T) []string) predicate.TypedFuncs[T] {
	count := func(changed bool) bool {
		if changed {
			h.changes.Add(1)
		}
		return changed
	}
	return predicate.TypedFuncs[T]{
		CreateFunc: func(e event.TypedCreateEvent[T]) bool {
			return count(len(key(e.Object)) > 0) && !e.IsInInitialList
		},
		UpdateFunc: func(e event.TypedUpdateEvent[T]) bool {
			return count(!slices.Equal(key(e.ObjectOld), key(e.ObjectNew)))
		},
		DeleteFunc:  func(e event.TypedDeleteEvent[T]) bool { return count(len(key(e.Object)) > 0) },
		GenericFunc: func(event.TypedGenericEvent[T]) bool { return false },
	}
}
