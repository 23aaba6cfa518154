package externalbackend

import (
	"context"
	"slices"
	"testing"
	"time"

	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/decide"
	"github.com/backendslice/backendslice/internal/publish"
	"github.com/backendslice/backendslice/internal/sliceplan"
)

// The steps of one pass are tested here one at a time, each given the
// values the step before it returns; the end-to-end suites run them
// together on a real API server.

// stepBackend is a dual-stack backend with one port, at generation 2,
// status observed at observed.
func stepBackend(observed int64) *v1alpha1.ExternalBackend {
	xb := testBackend()
	xb.Generation = 2
	xb.Status.ObservedGeneration = observed
	xb.Spec.AddressTypes = []v1alpha1.AddressType{v1alpha1.AddressTypeIPv4, v1alpha1.AddressTypeIPv6}
	xb.Spec.DrainPeriod = &metav1.Duration{Duration: 30 * time.Second}
	xb.Spec.Service.Ports = []v1alpha1.ServicePort{{Name: "pg", Port: 5432, TargetPort: ptr.To[int32](5432), Protocol: "TCP"}}
	return xb
}

// stepReconciler is a reconciler with what publication and syncSlices use,
// on clock and, where given, a fake client.
func stepReconciler(t *testing.T, clock *clocktesting.FakeClock, cfg Config, c client.Client) *Reconciler {
	t.Helper()
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxEndpointsPerSlice = 100
	return &Reconciler{Client: c, APIReader: c, Config: cfg, Clock: clock, Metrics: m, store: newStore(c, c)}
}

// published is what our slices of xb's Service show for addrs, as the
// planner writes them.
func published(t *testing.T, xb *v1alpha1.ExternalBackend, svc *corev1.Service, eps ...publish.Endpoint) []discoveryv1.EndpointSlice {
	t.Helper()
	plan := sliceplan.Compute(sliceplan.Input{
		Template: sliceplan.Template{Namespace: xb.Namespace, ServiceName: svc.Name, Labels: sliceLabels(xb, svc.Name),
			Owner: ownerRef(svc, corev1.SchemeGroupVersion.WithKind("Service"))},
		Desired:              publish.Groups(eps),
		MaxEndpointsPerSlice: 100,
	})
	var out []discoveryv1.EndpointSlice
	for _, s := range plan.Create {
		s.UID, s.ResourceVersion = "slice-uid", "1"
		out = append(out, *s)
	}
	return out
}

func servedEndpoint(t discoveryv1.AddressType, addr string, port int32) publish.Endpoint {
	return publish.Endpoint{AddressType: t, Address: addr, Serving: true,
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("pg"), Port: ptr.To(port), Protocol: ptr.To(corev1.ProtocolTCP)}}}
}

// equalWant compares two lists, nil and empty alike.
func equalWant(a, b []string) bool { return len(a) == len(b) && (len(a) == 0 || slices.Equal(a, b)) }

// TestSyncSlices takes syncSlices through the cases where the cache and the
// API server disagree. The fake client stands for the API server's own
// list; seen is what the cache showed. Whatever the cache missed, every
// endpoint ends in exactly one slice of ours, a slice we did not make is
// never written, and a pass with nothing to change writes nothing.
func TestSyncSlices(t *testing.T) {
	xb := stepBackend(2)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: "db", UID: "svc-uid"}}
	a := servedEndpoint(discoveryv1.AddressTypeIPv4, "192.0.2.1", 5432)
	b := servedEndpoint(discoveryv1.AddressTypeIPv4, "192.0.2.2", 5432)
	handMade := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: "db-ipv4-0",
			Labels: map[string]string{discoveryv1.LabelServiceName: "someone-else"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"198.51.100.1"}}},
	}
	for _, c := range []struct {
		name string
		// live are the slices the API server holds; cached says whether
		// the cache shows ours among them.
		live   []discoveryv1.EndpointSlice
		other  *discoveryv1.EndpointSlice
		cached bool
		want   []publish.Endpoint
		// writes are the writes expected, as "verb name".
		writes []string
	}{
		{name: "nothing changed: no write", live: published(t, xb, svc, a), cached: true, want: []publish.Endpoint{a},
			writes: nil},
		{name: "new backend: one create", want: []publish.Endpoint{a, b}, writes: []string{"create db-ipv4-0"}},
		{name: "the cache has not shown our slice yet: it is updated, not doubled",
			live: published(t, xb, svc, a), cached: false, want: []publish.Endpoint{a, b}, writes: []string{"update db-ipv4-0"}},
		{name: "the cache is current: the endpoint joins our slice",
			live: published(t, xb, svc, a), cached: true, want: []publish.Endpoint{a, b}, writes: []string{"update db-ipv4-0"}},
		{name: "someone else's slice holds our name: ours gets a generated one",
			other: handMade, want: []publish.Endpoint{a}, writes: []string{"create db-ipv4-0", "create db-ipv4-0-*"}},
		{name: "an endpoint gone: its slice is deleted",
			live: published(t, xb, svc, a), cached: true, want: nil, writes: []string{"delete db-ipv4-0"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var objs []client.Object
			for i := range c.live {
				objs = append(objs, c.live[i].DeepCopy())
			}
			if c.other != nil {
				objs = append(objs, c.other.DeepCopy())
			}
			var writes []string
			cl := fake.NewClientBuilder().WithObjects(objs...).WithInterceptorFuncs(interceptor.Funcs{
				Create: func(ctx context.Context, cl client.WithWatch, o client.Object, opts ...client.CreateOption) error {
					name := o.GetName()
					if name == "" {
						name = o.GetGenerateName() + "*"
					}
					writes = append(writes, "create "+name)
					return cl.Create(ctx, o, opts...)
				},
				Update: func(ctx context.Context, cl client.WithWatch, o client.Object, opts ...client.UpdateOption) error {
					writes = append(writes, "update "+o.GetName())
					return cl.Update(ctx, o, opts...)
				},
				Delete: func(ctx context.Context, cl client.WithWatch, o client.Object, opts ...client.DeleteOption) error {
					writes = append(writes, "delete "+o.GetName())
					return cl.Delete(ctx, o, opts...)
				},
			}).Build()
			var otherBefore discoveryv1.EndpointSlice
			if c.other != nil {
				if err := cl.Get(context.Background(), client.ObjectKeyFromObject(c.other), &otherBefore); err != nil {
					t.Fatal(err)
				}
			}
			r := stepReconciler(t, clocktesting.NewFakeClock(time.Now()), Config{}, cl)
			seen := observed{served: sets.New(corev1.IPv4Protocol), taken: sets.New[string]()}
			if c.cached {
				var list discoveryv1.EndpointSliceList
				if err := cl.List(context.Background(), &list); err != nil {
					t.Fatal(err)
				}
				seen.slices, seen.taken = ownedBy(list.Items, svc.Name, svc)
			}
			n, _, err := r.syncSlices(context.Background(), xb, svc, false, publication{Publication: decide.Publication{Endpoints: c.want}}, seen)
			if err != nil {
				t.Fatalf("syncSlices: %v", err)
			}
			if !equalWant(writes, c.writes) {
				t.Errorf("writes %q, want %q", writes, c.writes)
			}
			var after discoveryv1.EndpointSliceList
			if err := cl.List(context.Background(), &after); err != nil {
				t.Fatal(err)
			}
			ours, _ := ownedBy(after.Items, svc.Name, svc)
			if int(n) != len(ours) {
				t.Errorf("syncSlices says %d slices are ours, the API server holds %d", n, len(ours))
			}
			count := map[string]int{}
			for _, s := range ours {
				for _, e := range s.Endpoints {
					count[e.Addresses[0]]++
				}
			}
			for _, e := range c.want {
				if count[e.Address] != 1 {
					t.Errorf("%s is in %d slices of ours, want 1", e.Address, count[e.Address])
				}
			}
			if len(count) != len(c.want) {
				t.Errorf("our slices publish %v, want only %d endpoint(s)", count, len(c.want))
			}
			if c.other != nil {
				got := &discoveryv1.EndpointSlice{}
				if err := cl.Get(context.Background(), client.ObjectKeyFromObject(c.other), got); err != nil {
					t.Fatal(err)
				}
				if got.ResourceVersion != otherBefore.ResourceVersion || !slices.Equal(got.Endpoints[0].Addresses, c.other.Endpoints[0].Addresses) {
					t.Errorf("the slice we did not make was written: %+v", got)
				}
			}
		})
	}
}

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSyncSlicesBound: past --max-slices-per-backend, syncSlices raises
// the slice size (and says so), and leaves out what does not fit even at
// 1000 a slice (and says so), returning the addresses left out.
func TestSyncSlicesBound(t *testing.T) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: "db", UID: "svc-uid"}}
	ep := func(addr string, port int32) publish.Endpoint {
		return servedEndpoint(discoveryv1.AddressTypeIPv4, addr, port)
	}
	for _, c := range []struct {
		name    string
		eps     []publish.Endpoint
		slices  int32
		limits  []string
		leftOut []string
	}{{
		name:   "within the bound: no note",
		eps:    []publish.Endpoint{ep("192.0.2.1", 5432), ep("192.0.2.2", 5432)},
		slices: 2,
	}, {
		name:   "one endpoint a slice would need 3: the size is raised to 2",
		eps:    []publish.Endpoint{ep("192.0.2.1", 5432), ep("192.0.2.2", 5432), ep("192.0.2.3", 5432)},
		slices: 2,
		limits: []string{"the slice size is raised from 1 to 2 endpoints to keep the backend within the controller's limit of 2 EndpointSlices (--max-slices-per-backend)"},
	}, {
		name:   "three port sets in two slices: one left out",
		eps:    []publish.Endpoint{ep("192.0.2.1", 5432), ep("192.0.2.2", 5433), ep("192.0.2.3", 5434)},
		slices: 2,
		limits: []string{
			"1 endpoint(s) not published: the backend's 3 port set(s) (an address family and ports each) need more than the controller's limit of 2 EndpointSlices (--max-slices-per-backend) even at 1000 endpoints a slice; give every spec.service.ports entry a targetPort, so that the endpoints share their family's port set, or publish fewer endpoints",
		},
		leftOut: []string{"192.0.2.3"},
	}} {
		t.Run(c.name, func(t *testing.T) {
			cl := fake.NewClientBuilder().Build()
			r := stepReconciler(t, clocktesting.NewFakeClock(time.Now()), Config{MaxSlicesPerBackend: 2}, cl)
			xb := stepBackend(2)
			xb.Spec.MaxEndpointsPerSlice = ptr.To[int32](1)
			seen := observed{served: sets.New(corev1.IPv4Protocol), taken: sets.New[string]()}
			n, bound, err := r.syncSlices(context.Background(), xb, svc, true, publication{Publication: decide.Publication{Endpoints: c.eps}}, seen)
			if err != nil {
				t.Fatalf("syncSlices: %v", err)
			}
			var list discoveryv1.EndpointSliceList
			if err := cl.List(context.Background(), &list); err != nil {
				t.Fatal(err)
			}
			if n != c.slices || len(list.Items) != int(c.slices) {
				t.Errorf("%d slices (the API server holds %d), want %d", n, len(list.Items), c.slices)
			}
			if !equalWant(bound.limits, c.limits) {
				t.Errorf("notes %q, want %q", bound.limits, c.limits)
			}
			if got := sets.List(bound.leftOut); !equalWant(got, c.leftOut) {
				t.Errorf("left out %v, want %v", got, c.leftOut)
			}
		})
	}
}
