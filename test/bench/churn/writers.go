package churn

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/endpointslice"
	endpointsliceutil "k8s.io/endpointslice/util"
	"k8s.io/utils/ptr"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/publish"
	"github.com/backendslice/backendslice/internal/sliceplan"
)

const (
	namespace   = "bench"
	serviceName = "db"
	portName    = "db"
	portNumber  = 5432
	// upstreamManagedBy is the managed-by label value of the upstream controller.
	upstreamManagedBy = "endpointslice-controller.k8s.io"
	// maxSlices is the controller's default --max-slices-per-backend.
	maxSlices = 100
)

// writer turns a state into EndpointSlices on its own fake API server.
type writer interface {
	// sync publishes st, at now on the sequence's clock.
	sync(ctx context.Context, st state, now time.Time) error
	api() *apiServer
}

// service is the Service both writers publish for, with IPv4 or both families.
func service(dual bool) *corev1.Service {
	families := []corev1.IPFamily{corev1.IPv4Protocol}
	if dual {
		families = append(families, corev1.IPv6Protocol)
	}
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: serviceName, UID: types.UID("service-uid")},
		Spec: corev1.ServiceSpec{
			ClusterIP:  "10.96.0.10",
			IPFamilies: families,
			Ports: []corev1.ServicePort{{
				Name: portName, Port: portNumber, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(portNumber),
			}},
		},
	}
}

// ours runs our planner and applies its plan in the controller's order:
// creates, then updates, then deletes (controllers/externalbackend/slices.go).
// With churn-aware placement on, it learns which endpoints are volatile as
// the controller does (sliceplan.Changed, Churn.Observe).
type ours struct {
	server  *apiServer // nil on a real API server
	client  kubernetes.Interface
	ns      string
	dual    bool
	tmpl    sliceplan.Template
	churn   sliceplan.Churn
	history sliceplan.History
}

// newOurs returns our writer on a fresh fake API server, churn-aware unless
// c's window is zero.
func newOurs(dual bool, c sliceplan.Churn) *ours {
	server := newAPIServer()
	o := onClient(server, namespace, dual, c)
	o.server = server
	return o
}

// onClient returns our writer writing through client into namespace ns.
func onClient(client kubernetes.Interface, ns string, dual bool, c sliceplan.Churn) *ours {
	svc := service(dual)
	return &ours{client: client, ns: ns, dual: dual, churn: c, tmpl: sliceplan.Template{
		Namespace:   ns,
		ServiceName: serviceName,
		Labels: map[string]string{
			discoveryv1.LabelServiceName: serviceName,
			discoveryv1.LabelManagedBy:   v1alpha1.ManagedByValue,
			v1alpha1.BackendLabel:        serviceName,
		},
		Owner: *metav1.NewControllerRef(svc, corev1.SchemeGroupVersion.WithKind("Service")),
	}}
}

func (o *ours) api() *apiServer { return o.server }

// slices lists the slices of ours, as the controller's cache would show them,
// and the names of all slices in the namespace.
func (o *ours) slices(ctx context.Context) ([]discoveryv1.EndpointSlice, sets.Set[string], error) {
	list, err := o.client.DiscoveryV1().EndpointSlices(o.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	taken := sets.New[string]()
	var mine []discoveryv1.EndpointSlice
	for _, s := range list.Items {
		taken.Insert(s.Name)
		if s.Labels[discoveryv1.LabelManagedBy] == v1alpha1.ManagedByValue {
			mine = append(mine, s)
		}
	}
	return mine, taken, nil
}

func (o *ours) sync(ctx context.Context, st state, now time.Time) error {
	existing, taken, err := o.slices(ctx)
	if err != nil {
		return err
	}
	in := sliceplan.Input{
		Template:             o.tmpl,
		Desired:              publish.Groups(o.endpoints(st)),
		Existing:             existing,
		TakenNames:           taken,
		MaxEndpointsPerSlice: perSlice,
		MaxSlices:            maxSlices,
	}
	if o.churn.Window > 0 {
		o.history = o.churn.Observe(o.history, sliceplan.Changed(in), now)
		in.Volatile = o.churn.Volatile(o.history, now)
	}
	plan := sliceplan.Compute(in)
	c := o.client.DiscoveryV1().EndpointSlices(o.ns)
	for _, s := range plan.Create {
		if _, err := c.Create(ctx, s, metav1.CreateOptions{FieldManager: v1alpha1.FieldManager}); err != nil {
			return fmt.Errorf("creating %s: %w", s.Name, err)
		}
	}
	for _, s := range plan.Update {
		if _, err := c.Update(ctx, s, metav1.UpdateOptions{FieldManager: v1alpha1.FieldManager}); err != nil {
			return fmt.Errorf("updating %s: %w", s.Name, err)
		}
	}
	for _, s := range plan.Delete {
		pre := metav1.Preconditions{UID: &s.UID, ResourceVersion: &s.ResourceVersion}
		if err := c.Delete(ctx, s.Name, metav1.DeleteOptions{Preconditions: &pre}); err != nil {
			return fmt.Errorf("deleting %s: %w", s.Name, err)
		}
	}
	return nil
}

// endpoints are the desired endpoints of a state, one a family.
func (o *ours) endpoints(st state) []publish.Endpoint {
	ports := []discoveryv1.EndpointPort{{Name: ptr.To(portName), Port: ptr.To[int32](portNumber), Protocol: ptr.To(corev1.ProtocolTCP)}}
	var out []publish.Endpoint
	for _, b := range st {
		for _, a := range addresses(b.id, o.dual) {
			out = append(out, publish.Endpoint{AddressType: a.family, Address: a.address, Zone: b.zone, Serving: b.serving, Ports: ports})
		}
	}
	return out
}

// familyAddress is one address of a backend.
type familyAddress struct {
	family  discoveryv1.AddressType
	address string
}

// addresses are the backend's addresses: IPv4, and IPv6 when dual-stack.
func addresses(id int, dual bool) []familyAddress {
	out := []familyAddress{{discoveryv1.AddressTypeIPv4, v4(id)}}
	if dual {
		out = append(out, familyAddress{discoveryv1.AddressTypeIPv6, v6(id)})
	}
	return out
}

// upstream runs the upstream EndpointSlice reconciler with one stand-in Pod
// a backend, on a stand-in Node of the backend's zone.
type upstream struct {
	server *apiServer // nil on a real API server
	client kubernetes.Interface
	dual   bool
	svc    *corev1.Service
	rec    *endpointslice.Reconciler
}

// newUpstream returns the upstream writer on a fresh fake API server.
func newUpstream(dual bool) (*upstream, error) {
	server := newAPIServer()
	u, err := upstreamOn(server, namespace, dual)
	if err != nil {
		return nil, err
	}
	u.server = server
	return u, nil
}

// upstreamOn returns the upstream writer writing through client into
// namespace ns.
func upstreamOn(client kubernetes.Interface, ns string, dual bool) (*upstream, error) {
	nodes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, z := range zones {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName(z), Labels: map[string]string{corev1.LabelTopologyZone: z}}}
		if err := nodes.Add(n); err != nil {
			return nil, err
		}
	}
	rec := endpointslice.NewReconciler(client, corelisters.NewNodeLister(nodes), perSlice,
		endpointsliceutil.NewEndpointSliceTracker(), nil, &record.FakeRecorder{}, upstreamManagedBy)
	svc := service(dual)
	svc.Namespace = ns
	return &upstream{client: client, dual: dual, svc: svc, rec: rec}, nil
}

func (u *upstream) api() *apiServer { return u.server }

// nodeName is the stand-in Node of a zone.
func nodeName(zone string) string { return "node-" + zone }

func (u *upstream) sync(ctx context.Context, st state, _ time.Time) error {
	list, err := u.client.DiscoveryV1().EndpointSlices(u.svc.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{
			discoveryv1.LabelServiceName: serviceName, discoveryv1.LabelManagedBy: upstreamManagedBy,
		}).String(),
	})
	if err != nil {
		return err
	}
	existing := make([]*discoveryv1.EndpointSlice, len(list.Items))
	for i := range list.Items {
		existing[i] = &list.Items[i]
	}
	pods := make([]*corev1.Pod, len(st))
	for i, b := range st {
		pods[i] = u.pod(b)
	}
	return u.rec.Reconcile(logr.Discard(), u.svc, pods, existing, time.Time{})
}

// pod is the stand-in Pod of a backend: running, ready when serving.
func (u *upstream) pod(b backend) *corev1.Pod {
	ready := corev1.ConditionFalse
	if b.serving {
		ready = corev1.ConditionTrue
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: u.svc.Namespace, Name: fmt.Sprintf("backend-%d", b.id), UID: types.UID(fmt.Sprintf("pod-%d", b.id))},
		Spec:       corev1.PodSpec{NodeName: nodeName(b.zone)},
		Status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: ready}},
		},
	}
	for _, a := range addresses(b.id, u.dual) {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: a.address})
	}
	p.Status.PodIP = p.Status.PodIPs[0].IP
	return p
}
