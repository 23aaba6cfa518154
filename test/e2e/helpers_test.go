package e2e

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// staticBackend is an ExternalBackend with one static source of addrs and a
// TCP port 5432 named "pg".
func staticBackend(ns, name string, addrs ...string) *v1alpha1.ExternalBackend {
	eps := make([]v1alpha1.StaticEndpoint, 0, len(addrs))
	for _, a := range addrs {
		eps = append(eps, v1alpha1.StaticEndpoint{Address: a})
	}
	return &v1alpha1.ExternalBackend{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.ExternalBackendSpec{
			Service: v1alpha1.ServiceSpec{Ports: []v1alpha1.ServicePort{{Name: "pg", Port: 5432}}},
			Sources: []v1alpha1.Source{{Name: "fixed", Static: &v1alpha1.StaticSource{Endpoints: eps}}},
		},
	}
}

// ctx is the context of API calls in tests.
var ctx = context.Background()

// mustUpdate is update that fails the test on error.
func mustUpdate(t *testing.T, xb *v1alpha1.ExternalBackend, change func(*v1alpha1.ExternalBackend)) {
	t.Helper()
	if err := update(t, xb, change); err != nil {
		t.Fatalf("updating %s: %v", xb.Name, err)
	}
}

// condition returns the condition of type t, or an error naming what is there.
func condition(xb *v1alpha1.ExternalBackend, t string) (*metav1.Condition, error) {
	c := meta.FindStatusCondition(xb.Status.Conditions, t)
	if c == nil {
		return nil, fmt.Errorf("no %s condition yet (conditions: %v)", t, xb.Status.Conditions)
	}
	return c, nil
}

// waitEndpoints waits until our slices of svc publish every address once
// and check accepts the endpoints, by address.
func waitEndpoints(t *testing.T, ns, svc string, check func(map[string]discoveryv1.Endpoint) error) []discoveryv1.EndpointSlice {
	t.Helper()
	var sl []discoveryv1.EndpointSlice
	eventually(t, timeout, "slices of "+svc, func() error {
		sl = ourSlices(t, ns, svc)
		got, err := published(sl)
		if err != nil {
			return err
		}
		return check(got)
	})
	return sl
}

// getService reads a Service.
func getService(t *testing.T, ns, name string) *corev1.Service {
	t.Helper()
	svc := &corev1.Service{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, svc); err != nil {
		t.Fatalf("reading Service %s: %v", name, err)
	}
	return svc
}

// conditionsOf renders an endpoint's conditions as "ready/serving/terminating".
func conditionsOf(e discoveryv1.Endpoint) string {
	return fmt.Sprintf("%t/%t/%t", ptr.Deref(e.Conditions.Ready, false), ptr.Deref(e.Conditions.Serving, false), ptr.Deref(e.Conditions.Terminating, false))
}

// ipv4s returns n distinct documentation IPv4 addresses (n <= 254), 192.0.2.1 onwards.
func ipv4s(n int) []string {
	if n > 254 {
		panic("ipv4s: at most 254 addresses in 192.0.2.0/24")
	}
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("192.0.2.%d", i+1)
	}
	return out
}

// ipv6s returns n distinct documentation IPv6 addresses, 2001:db8::1 onwards.
func ipv6s(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("2001:db8::%x", i+1)
	}
	return out
}

// staticEndpoints are healthy static endpoints of addrs.
func staticEndpoints(addrs ...string) []v1alpha1.StaticEndpoint {
	eps := make([]v1alpha1.StaticEndpoint, 0, len(addrs))
	for _, a := range addrs {
		eps = append(eps, v1alpha1.StaticEndpoint{Address: a})
	}
	return eps
}

// withAddresses is a change that makes the first (static) source list exactly addrs.
func withAddresses(addrs ...string) func(*v1alpha1.ExternalBackend) {
	return func(xb *v1alpha1.ExternalBackend) {
		xb.Spec.Sources[0].Static.Endpoints = staticEndpoints(addrs...)
	}
}

// addEndpoint is a change that appends one endpoint to the first static source.
func addEndpoint(addr string) func(*v1alpha1.ExternalBackend) {
	return func(xb *v1alpha1.ExternalBackend) {
		s := xb.Spec.Sources[0].Static
		s.Endpoints = append(s.Endpoints, v1alpha1.StaticEndpoint{Address: addr})
	}
}

// withHealth is a change that sets the health of the static endpoint addr.
func withHealth(addr string, h v1alpha1.Health) func(*v1alpha1.ExternalBackend) {
	return func(xb *v1alpha1.ExternalBackend) {
		for i := range xb.Spec.Sources[0].Static.Endpoints {
			if e := &xb.Spec.Sources[0].Static.Endpoints[i]; e.Address == addr {
				e.Health = h
			}
		}
	}
}

// dnsSource is a source of kind dns, which this controller has no provider for.
func dnsSource(name string) v1alpha1.Source {
	return v1alpha1.Source{Name: name, DNS: &v1alpha1.DNSSource{Name: "db.example.com"}}
}

// duration is a *metav1.Duration for a spec field; s is a constant of the test.
func duration(s string) *metav1.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		panic(err)
	}
	return &metav1.Duration{Duration: d}
}

// withDrainPeriod is an option that sets spec.drainPeriod.
func withDrainPeriod(s string) func(*v1alpha1.ExternalBackend) {
	return func(xb *v1alpha1.ExternalBackend) { xb.Spec.DrainPeriod = duration(s) }
}

// createReady creates xb and waits until it is Ready and its slices publish
// exactly the addresses of addrs the API server serves, under the Service
// named svc.
func createReady(t *testing.T, xb *v1alpha1.ExternalBackend, svc string, addrs ...string) (*v1alpha1.ExternalBackend, []discoveryv1.EndpointSlice) {
	t.Helper()
	mustCreate(t, xb)
	cur := waitReady(t, xb)
	return cur, waitAddresses(t, xb.Namespace, svc, framework.Served(addrs...)...)
}

// readyBackend creates, in a namespace of its own, a backend "db" with a
// static source of addrs, changed first by options, and waits until it is
// Ready and its slices publish addrs.
func readyBackend(t *testing.T, addrs []string, options ...func(*v1alpha1.ExternalBackend)) (*v1alpha1.ExternalBackend, []discoveryv1.EndpointSlice) {
	t.Helper()
	xb := staticBackend(newNamespace(t), "db", addrs...)
	for _, o := range options {
		o(xb)
	}
	return createReady(t, xb, "db", addrs...)
}

// waitStatus waits until check accepts the backend as read from the API server.
func waitStatus(t *testing.T, xb *v1alpha1.ExternalBackend, what string, check func(*v1alpha1.ExternalBackend) error) *v1alpha1.ExternalBackend {
	t.Helper()
	var cur *v1alpha1.ExternalBackend
	eventually(t, timeout, xb.Name+": "+what, func() error {
		cur = get(t, xb)
		return check(cur)
	})
	return cur
}

// expectCondition fails the test unless condition typ has status and reason
// and its message contains every one of words.
func expectCondition(t *testing.T, xb *v1alpha1.ExternalBackend, typ string, status metav1.ConditionStatus, reason string, words ...string) {
	t.Helper()
	c, err := condition(xb, typ)
	if err != nil {
		t.Error(err)
		return
	}
	if c.Status != status || c.Reason != reason {
		t.Errorf("%s is %s/%s, want %s/%s: %s", typ, c.Status, c.Reason, status, reason, c.Message)
	}
	for _, w := range words {
		if !strings.Contains(c.Message, w) {
			t.Errorf("%s message %q does not mention %q", typ, c.Message, w)
		}
	}
}

// waitPublished waits until our slices of svc publish exactly the addresses
// of want, each with the conditions want gives ("ready/serving/terminating").
func waitPublished(t *testing.T, ns, svc string, want map[string]string) []discoveryv1.EndpointSlice {
	t.Helper()
	return waitEndpoints(t, ns, svc, func(got map[string]discoveryv1.Endpoint) error {
		have := map[string]string{}
		for a, e := range got {
			have[a] = conditionsOf(e)
		}
		if !maps.Equal(have, want) {
			return fmt.Errorf("published %v, want %v", have, want)
		}
		return nil
	})
}

// allReady maps each address to the conditions of a healthy endpoint.
func allReady(addrs ...string) map[string]string {
	out := map[string]string{}
	for _, a := range addrs {
		out[a] = "true/true/false"
	}
	return out
}

// versions records the resourceVersion of the Service svc and of each of
// our slices for it, keyed "Service/<name>" and "EndpointSlice/<name>".
func versions(t *testing.T, ns, svc string) map[string]string {
	t.Helper()
	out := map[string]string{"Service/" + svc: getService(t, ns, svc).ResourceVersion}
	for _, s := range ourSlices(t, ns, svc) {
		out["EndpointSlice/"+s.Name] = s.ResourceVersion
	}
	return out
}

// expectUnchanged fails the test if the Service or any slice of ours was
// written, created or deleted since before was recorded by versions.
func expectUnchanged(t *testing.T, ns, svc string, before map[string]string) {
	t.Helper()
	if now := versions(t, ns, svc); !maps.Equal(now, before) {
		t.Errorf("objects were written: resourceVersions were %v, now %v", before, now)
	}
}

// sliceUIDs maps each slice's name to its UID.
func sliceUIDs(sl []discoveryv1.EndpointSlice) map[string]types.UID {
	out := map[string]types.UID{}
	for _, s := range sl {
		out[s.Name] = s.UID
	}
	return out
}

// findEvent returns an events.k8s.io/v1 Event about the ExternalBackend
// named regarding, of type typ with reason, or an error listing what there is.
func findEvent(ns, regarding, typ, reason string) (*eventsv1.Event, error) {
	var list eventsv1.EventList
	if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	var seen []string
	for i, e := range list.Items {
		if e.Regarding.Kind != "ExternalBackend" || e.Regarding.Name != regarding {
			continue
		}
		if e.Type == typ && e.Reason == reason {
			return &list.Items[i], nil
		}
		seen = append(seen, e.Type+"/"+e.Reason)
	}
	return nil, fmt.Errorf("no %s event %s about %s; events about it: %v", typ, reason, regarding, seen)
}

// waitEvent waits for an event about xb of type typ with reason.
func waitEvent(t *testing.T, xb *v1alpha1.ExternalBackend, typ, reason string) *eventsv1.Event {
	t.Helper()
	var ev *eventsv1.Event
	eventually(t, timeout, fmt.Sprintf("%s event %s about %s", typ, reason, xb.Name), func() error {
		var err error
		ev, err = findEvent(xb.Namespace, xb.Name, typ, reason)
		return err
	})
	return ev
}

// mustDelete deletes obj or fails the test.
func mustDelete(t *testing.T, obj client.Object) {
	t.Helper()
	if err := k8s.Delete(ctx, obj); err != nil {
		t.Fatalf("deleting %s: %v", obj.GetName(), err)
	}
}

// waitGone waits until obj no longer exists.
func waitGone(t *testing.T, obj client.Object) {
	t.Helper()
	eventually(t, timeout, obj.GetName()+" gone", func() error {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("%s still exists", obj.GetName())
	})
}

// expectControlledBy fails the test unless owner is obj's controller.
func expectControlledBy(t *testing.T, obj, owner metav1.Object) {
	t.Helper()
	if !metav1.IsControlledBy(obj, owner) {
		t.Errorf("%s is not controlled by %s (uid %s): %v", obj.GetName(), owner.GetName(), owner.GetUID(), obj.GetOwnerReferences())
	}
}
