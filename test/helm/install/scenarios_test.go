package install

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// ctx is the context of API calls in tests.
var ctx = context.Background()

// The scenarios' backend: a dual-stack static backend named db, published
// as Service db.
const (
	backendName = "db"
	ipv4a       = "192.0.2.10"
	ipv4b       = "192.0.2.11"
	ipv6        = "2001:db8::10"
)

// scenario is something the controller does for users. Each one needs some
// of the rights the chart grants; run with every right it reaches done.
type scenario struct {
	name string
	// start creates what the scenario begins with in ns (and, for Secrets,
	// in controllerNS, the controller's own namespace), then the backend.
	start func(t *testing.T, ns, controllerNS string) *v1alpha1.ExternalBackend
	// change, if set, is made once the backend is Ready.
	change func(t *testing.T, xb *v1alpha1.ExternalBackend)
	// done waits for what the controller achieves with every right.
	done func(t *testing.T, xb *v1alpha1.ExternalBackend)
}

// begin creates the backend in ns for a controller running in
// controllerNS and, when the scenario has a change, makes it once the
// backend is Ready.
func (s *scenario) begin(t *testing.T, ns, controllerNS string) *v1alpha1.ExternalBackend {
	t.Helper()
	xb := s.start(t, ns, controllerNS)
	if s.change != nil {
		framework.WaitReady(t, xb)
		s.change(t, xb)
	}
	return xb
}

// scenarios are every scenario, in the order they are run.
var scenarios = []*scenario{
	&core, &portChange, &toHeadless, &rename, &unhealthy, &shrink, &foreignService, &foreignSlice, &driftTwice,
	&throughProvider, &admittedByLabel, &providerSecret, &podRange, &adoptLegacy,
}

// startStatic starts the scenarios' backend, whose source names no BackendProvider.
func startStatic(t *testing.T, ns, _ string) *v1alpha1.ExternalBackend { return startBackend(t, ns) }

// core is the end-to-end scenario: a dual-stack static backend becomes
// Ready with a selectorless dual-stack Service owned by it, one slice per
// family owned by the Service, and events about it.
var core = scenario{
	name:  "core",
	start: startStatic,
	done:  checkCore,
}

// portChange changes the Service's port: the Service is updated.
var portChange = scenario{
	name:  "port-change",
	start: startStatic,
	change: func(t *testing.T, xb *v1alpha1.ExternalBackend) {
		mustUpdate(t, xb, func(xb *v1alpha1.ExternalBackend) { xb.Spec.Service.Ports[0].Port = 5433 })
	},
	done: func(t *testing.T, xb *v1alpha1.ExternalBackend) {
		framework.WaitReady(t, xb)
		if p := service(t, xb.Namespace, backendName).Spec.Ports[0].Port; p != 5433 {
			t.Errorf("Service port %d, want 5433", p)
		}
	},
}

// toHeadless turns the Service headless: a Service cannot drop its cluster
// IP, so the controller deletes and recreates it.
var toHeadless = scenario{
	name:  "to-headless",
	start: startStatic,
	change: func(t *testing.T, xb *v1alpha1.ExternalBackend) {
		mustUpdate(t, xb, func(xb *v1alpha1.ExternalBackend) { xb.Spec.Service.Type = v1alpha1.ServiceTypeHeadless })
	},
	done: func(t *testing.T, xb *v1alpha1.ExternalBackend) {
		framework.WaitReady(t, xb)
		if ip := service(t, xb.Namespace, backendName).Spec.ClusterIP; ip != corev1.ClusterIPNone {
			t.Errorf("Service clusterIP %q, want None", ip)
		}
	},
}

// rename renames the Service: the old one and its slices are removed, the
// slices with one delete-collection call.
var rename = scenario{
	name:  "rename",
	start: startStatic,
	change: func(t *testing.T, xb *v1alpha1.ExternalBackend) {
		mustUpdate(t, xb, func(xb *v1alpha1.ExternalBackend) { xb.Spec.Service.Name = "db-renamed" })
	},
	done: func(t *testing.T, xb *v1alpha1.ExternalBackend) {
		framework.WaitReady(t, xb)
		framework.WaitAddresses(t, xb.Namespace, "db-renamed", ipv4a, ipv4b, ipv6)
		framework.Eventually(t, framework.Timeout, "the old Service and slices gone", func() error {
			err := framework.E().Client.Get(ctx, client.ObjectKey{Namespace: xb.Namespace, Name: backendName}, &corev1.Service{})
			if !apierrors.IsNotFound(err) {
				return fmt.Errorf("Service %s: %w", backendName, err)
			}
			if n := len(framework.Slices(t, xb.Namespace, backendName)); n > 0 {
				return fmt.Errorf("%d slices of Service %s left", n, backendName)
			}
			return nil
		})
	},
}

// unhealthy marks an endpoint unhealthy: its slice is updated.
var unhealthy = scenario{
	name:  "unhealthy",
	start: startStatic,
	change: func(t *testing.T, xb *v1alpha1.ExternalBackend) {
		mustUpdate(t, xb, func(xb *v1alpha1.ExternalBackend) {
			xb.Spec.Sources[0].Static.Endpoints[0].Health = v1alpha1.HealthUnhealthy
		})
	},
	done: func(t *testing.T, xb *v1alpha1.ExternalBackend) {
		framework.WaitReady(t, xb)
		framework.Eventually(t, framework.Timeout, ipv4a+" not ready", func() error {
			eps, err := framework.Published(framework.Slices(t, xb.Namespace, backendName))
			if err != nil {
				return err
			}
			if ptr.Deref(eps[ipv4a].Conditions.Ready, true) {
				return errors.New("still ready")
			}
			return nil
		})
	},
}

// shrink removes the only IPv6 endpoint: with no drain period, the IPv6
// slice is deleted.
var shrink = scenario{
	name:  "shrink",
	start: startStatic,
	change: func(t *testing.T, xb *v1alpha1.ExternalBackend) {
		mustUpdate(t, xb, func(xb *v1alpha1.ExternalBackend) {
			xb.Spec.Sources[0].Static.Endpoints = xb.Spec.Sources[0].Static.Endpoints[:2]
		})
	},
	done: func(t *testing.T, xb *v1alpha1.ExternalBackend) {
		framework.WaitReady(t, xb)
		sl := framework.WaitAddresses(t, xb.Namespace, backendName, ipv4a, ipv4b)
		if len(sl) != 1 {
			t.Errorf("%d slices, want the IPv4 one alone", len(sl))
		}
	},
}

// foreignService finds a Service of its name that is not the controller's:
// the controller reads it (past its cache) to say whose it is.
var foreignService = scenario{
	name: "foreign-service",
	start: func(t *testing.T, ns, _ string) *v1alpha1.ExternalBackend {
		framework.Create(t, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: backendName},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
		})
		return startBackend(t, ns)
	},
	done: func(t *testing.T, xb *v1alpha1.ExternalBackend) {
		framework.WaitCondition(t, xb, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonServiceConflict)
	},
}

// foreignSlice finds a slice of someone else holding the name of its IPv4
// slice: the controller reads it (past its cache) and creates its own
// under a generated name.
var foreignSlice = scenario{
	name: "foreign-slice",
	start: func(t *testing.T, ns, _ string) *v1alpha1.ExternalBackend {
		framework.Create(t, &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: backendName + "-ipv4-0"},
			AddressType: discoveryv1.AddressTypeIPv4,
		})
		return startBackend(t, ns)
	},
	done: func(t *testing.T, xb *v1alpha1.ExternalBackend) {
		framework.WaitReady(t, xb)
		for _, s := range framework.WaitAddresses(t, xb.Namespace, backendName, ipv4a, ipv4b, ipv6) {
			if s.AddressType == discoveryv1.AddressTypeIPv4 && !strings.HasPrefix(s.Name, backendName+"-ipv4-0-") {
				t.Errorf("our IPv4 slice is %s, want a generated name next to the foreign %s-ipv4-0", s.Name, backendName)
			}
		}
	},
}

// adoptLegacy adopts a hand-written Service whose endpoints a legacy
// Endpoints object holds: the controller reads that object (past its
// cache) and deletes it once its slices carry the address.
var adoptLegacy = scenario{
	name: "adopt-legacy",
	start: func(t *testing.T, ns, _ string) *v1alpha1.ExternalBackend {
		framework.Create(t, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: backendName},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "pg", Port: 5432}}},
		})
		framework.Create(t, &corev1.Endpoints{ //nolint:staticcheck // the legacy object adoption retires
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: backendName},
			Subsets: []corev1.EndpointSubset{{ //nolint:staticcheck // as above
				Addresses: []corev1.EndpointAddress{{IP: ipv4a}},
				Ports:     []corev1.EndpointPort{{Name: "pg", Port: 5432, Protocol: corev1.ProtocolTCP}},
			}},
		})
		return startBackend(t, ns, func(xb *v1alpha1.ExternalBackend) { xb.Spec.Service.Adopt = &v1alpha1.ServiceAdoption{} })
	},
	done: func(t *testing.T, xb *v1alpha1.ExternalBackend) {
		framework.WaitCondition(t, xb, v1alpha1.ConditionAdopted, metav1.ConditionTrue, v1alpha1.ReasonAdopted)
	},
}

// driftTwice deletes the Service twice: the controller creates it again
// each time and records the same event (ServiceRestored) each time, which
// the event recorder turns into a series by patching the first event.
var driftTwice = scenario{
	name:  "drift-twice",
	start: startStatic,
	change: func(t *testing.T, xb *v1alpha1.ExternalBackend) {
		for range 2 {
			deleteService(t, xb)
		}
	},
	done: func(t *testing.T, xb *v1alpha1.ExternalBackend) {
		framework.Eventually(t, framework.Timeout, "a repeated event counted as a series", func() error {
			for _, e := range events(t, xb) {
				if e.Series != nil && e.Series.Count >= 2 {
					return nil
				}
			}
			return errors.New("no event has a series")
		})
	},
}

// startBackend creates the scenarios' backend in ns, changed by edits, and
// deletes it when the test ends so that later controllers do not see it.
func startBackend(t *testing.T, ns string, edits ...func(*v1alpha1.ExternalBackend)) *v1alpha1.ExternalBackend {
	t.Helper()
	xb := &v1alpha1.ExternalBackend{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: backendName},
		Spec: v1alpha1.ExternalBackendSpec{
			Service:      v1alpha1.ServiceSpec{Ports: []v1alpha1.ServicePort{{Name: "pg", Port: 5432}}},
			AddressTypes: []v1alpha1.AddressType{v1alpha1.AddressTypeIPv4, v1alpha1.AddressTypeIPv6},
			DrainPeriod:  &metav1.Duration{},
			Sources: []v1alpha1.Source{{Name: "vms", Static: &v1alpha1.StaticSource{Endpoints: []v1alpha1.StaticEndpoint{
				{Address: ipv4a, Zone: "zone-a", Hostname: "db-0"},
				{Address: ipv4b, Zone: "zone-b", Hostname: "db-1"},
				{Address: ipv6, Zone: "zone-a", Hostname: "db-0"},
			}}}},
		},
	}
	for _, edit := range edits {
		edit(xb)
	}
	framework.Create(t, xb)
	t.Cleanup(func() {
		if err := framework.E().Client.Delete(ctx, xb); client.IgnoreNotFound(err) != nil {
			t.Errorf("deleting %s: %v", xb.Name, err)
		}
	})
	return xb
}

// checkCore checks the outcome of the core scenario.
func checkCore(t *testing.T, xb *v1alpha1.ExternalBackend) {
	t.Helper()
	cur := framework.WaitReady(t, xb)
	sl := framework.WaitAddresses(t, xb.Namespace, backendName, ipv4a, ipv4b, ipv6)
	svc := service(t, xb.Namespace, backendName)
	if svc.Spec.Selector != nil || !metav1.IsControlledBy(svc, cur) {
		t.Errorf("Service selector %v owners %v: want selectorless and owned by the backend", svc.Spec.Selector, svc.OwnerReferences)
	}
	if !slices.Equal(svc.Spec.IPFamilies, []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}) {
		t.Errorf("Service ipFamilies %v, want IPv4 and IPv6", svc.Spec.IPFamilies)
	}
	var families []discoveryv1.AddressType
	for _, s := range sl {
		families = append(families, s.AddressType)
		if !metav1.IsControlledBy(&s, svc) {
			t.Errorf("slice %s is not owned by the Service: %v", s.Name, s.OwnerReferences)
		}
	}
	if !slices.Equal(families, []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6}) {
		t.Errorf("slices of families %v, want one IPv4 and one IPv6", families)
	}
	if cur.Status.Endpoints.Total != 3 || cur.Status.Slices != 2 {
		t.Errorf("status counts %d endpoints in %d slices, want 3 in 2", cur.Status.Endpoints.Total, cur.Status.Slices)
	}
	// Nothing went wrong: the first publication is told, once, and nothing
	// else. The recorder writes in the background: give it a moment to
	// show more.
	framework.WaitEvent(t, xb, corev1.EventTypeNormal, v1alpha1.ReasonPublished)
	time.Sleep(time.Second)
	for _, e := range events(t, xb) {
		if e.Type != corev1.EventTypeNormal || e.Reason != v1alpha1.ReasonPublished || e.Series != nil {
			t.Errorf("event %s/%s (series %+v) about a backend that was Ready at once: %s; want Published, once", e.Type, e.Reason, e.Series, e.Note)
		}
	}
}

// mustUpdate changes the backend or fails the test.
func mustUpdate(t *testing.T, xb *v1alpha1.ExternalBackend, change func(*v1alpha1.ExternalBackend)) {
	t.Helper()
	if err := framework.Update(t, xb, change); err != nil {
		t.Fatalf("updating %s: %v", xb.Name, err)
	}
}

// service reads a Service.
func service(t *testing.T, ns, name string) *corev1.Service {
	t.Helper()
	svc := &corev1.Service{}
	if err := framework.E().Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, svc); err != nil {
		t.Fatalf("reading Service %s: %v", name, err)
	}
	return svc
}

// events are the events.k8s.io Events about the backend.
func events(t *testing.T, xb *v1alpha1.ExternalBackend) []eventsv1.Event {
	t.Helper()
	var list eventsv1.EventList
	if err := framework.E().Client.List(ctx, &list, client.InNamespace(xb.Namespace)); err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(list.Items, func(e eventsv1.Event) bool {
		return e.Regarding.Kind != "ExternalBackend" || e.Regarding.Name != xb.Name
	})
}

// leaderElectionEvents are the core/v1 Events leader election recorded in ns.
func leaderElectionEvents(t *testing.T, ns string) []corev1.Event {
	t.Helper()
	var list corev1.EventList
	if err := framework.E().Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(list.Items, func(e corev1.Event) bool { return e.Reason != "LeaderElection" })
}

// deleteService deletes the backend's Service and waits until the
// controller has created it again.
func deleteService(t *testing.T, xb *v1alpha1.ExternalBackend) {
	t.Helper()
	gone := &corev1.Service{}
	if err := framework.E().Client.Get(ctx, types.NamespacedName{Namespace: xb.Namespace, Name: backendName}, gone); err != nil {
		t.Fatal(err)
	}
	if err := framework.E().Client.Delete(ctx, gone); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, framework.Timeout, "the Service created again", func() error {
		svc := &corev1.Service{}
		if err := framework.E().Client.Get(ctx, types.NamespacedName{Namespace: xb.Namespace, Name: backendName}, svc); err != nil {
			return err
		}
		if svc.UID == gone.UID {
			return errors.New("not yet")
		}
		return nil
	})
}

// runScenarios runs every scenario, side by side in namespaces of their
// own, each to its outcome with every right, against the controller that
// already runs in controllerNS.
func runScenarios(t *testing.T, controllerNS string) {
	t.Helper()
	t.Run("scenarios", func(t *testing.T) {
		for _, s := range scenarios {
			t.Run(s.name, func(t *testing.T) {
				t.Parallel()
				xb := s.begin(t, framework.Namespace(t), controllerNS)
				s.done(t, xb)
			})
		}
	})
}
