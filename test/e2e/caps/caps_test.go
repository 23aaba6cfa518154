package caps_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// quiet is how long a converged backend is watched for writes.
const quiet = 3 * time.Second

// addr is the i-th address (from 1) of 192.0.2.0/24, then 198.51.100.0/24.
func addr(i int) string {
	if i <= 254 {
		return fmt.Sprintf("192.0.2.%d", i)
	}
	return fmt.Sprintf("198.51.100.%d", i-254)
}

// span is addr(lo) to addr(hi), both included.
func span(lo, hi int) []string {
	var out []string
	for i := lo; i <= hi; i++ {
		out = append(out, addr(i))
	}
	return out
}

// backend is an ExternalBackend in ns of static IPv4 endpoints, healthy but
// for those in unhealthy, asking for maxEndpointsPerSlice 10.
func backend(ns, name string, addrs []string, unhealthy ...string) *v1alpha1.ExternalBackend {
	xb := &v1alpha1.ExternalBackend{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.ExternalBackendSpec{
			Service:              v1alpha1.ServiceSpec{Ports: []v1alpha1.ServicePort{{Name: "pg", Port: 5432}}},
			AddressTypes:         []v1alpha1.AddressType{v1alpha1.AddressTypeIPv4},
			MaxEndpointsPerSlice: ptr.To[int32](floor),
			Sources:              []v1alpha1.Source{{Name: "fixed", Static: &v1alpha1.StaticSource{}}},
		},
	}
	setEndpoints(xb, addrs, unhealthy...)
	return xb
}

// setEndpoints makes addrs xb's static endpoints, healthy but for unhealthy.
func setEndpoints(xb *v1alpha1.ExternalBackend, addrs []string, unhealthy ...string) {
	var eps []v1alpha1.StaticEndpoint
	for _, a := range addrs {
		h := v1alpha1.HealthHealthy
		if slices.Contains(unhealthy, a) {
			h = v1alpha1.HealthUnhealthy
		}
		eps = append(eps, v1alpha1.StaticEndpoint{Address: a, Health: h})
	}
	xb.Spec.Sources[0].Static.Endpoints = eps
}

// converged waits until xb's current generation is handled, its slices
// publish exactly want, in at most maxSlices slices, and its Synced
// condition names each of notes (and no other limit); it returns the
// slices.
func converged(t *testing.T, xb *v1alpha1.ExternalBackend, want []string, notes ...string) []discoveryv1.EndpointSlice {
	t.Helper()
	var sl []discoveryv1.EndpointSlice
	framework.Eventually(t, framework.Timeout, "slices and Synced of "+xb.Name, func() error {
		cur := framework.Get(t, xb)
		if cur.Status.ObservedGeneration != cur.Generation {
			return fmt.Errorf("generation %d not handled yet", cur.Generation)
		}
		sl = framework.Slices(t, xb.Namespace, xb.Name)
		got, err := framework.Published(sl)
		if err != nil {
			return err
		}
		if len(got) != len(want) || len(sl) > maxSlices {
			return fmt.Errorf("%d endpoints in %d slices, want %d in at most %d", len(got), len(sl), len(want), maxSlices)
		}
		for _, a := range want {
			if _, ok := got[a]; !ok {
				return fmt.Errorf("%s not published", a)
			}
		}
		synced := meta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionSynced)
		if synced == nil || synced.Status != metav1.ConditionTrue {
			return fmt.Errorf("Synced is %+v", synced)
		}
		if parts := strings.Split(synced.Message, "; "); !slices.Equal(parts[1:], notes) {
			return fmt.Errorf("Synced says %q, want it to name %q", synced.Message, notes)
		}
		return nil
	})
	return sl
}

// stillQuiet fails the test if the controller writes anything in ns over
// the quiet period.
func stillQuiet(t *testing.T, ns string) {
	t.Helper()
	before := writes.All(ns)
	time.Sleep(quiet)
	if n := writes.All(ns) - before; n != 0 {
		t.Errorf("%d write(s) in %s over %s of quiet", n, ns, quiet)
	}
}

// endpointNote is the Synced note of --max-endpoints-per-backend.
func endpointNote(left int) string {
	return fmt.Sprintf("%d endpoint(s) not published (IPv4 %d): past the controller's limit of %d endpoints of one address family per backend (--max-endpoints-per-backend), which publishes ready endpoints first, then by address",
		left, left, maxEndpoints)
}

// sizeNote is the Synced note of --max-slices-per-backend raising the size.
func sizeNote(size int) string {
	return fmt.Sprintf("the slice size is raised from %d to %d endpoints to keep the backend within the controller's limit of %d EndpointSlices (--max-slices-per-backend)",
		floor, size, maxSlices)
}

// TestEndpointsPerBackendBounded: a backend of 50 endpoints, five of them
// unhealthy, publishes 40, the healthy ones first, then by address, in 3
// slices of up to 14 instead of 4 of 10; Synced names both limits and how
// many were left out. Addresses changing among those left out write no
// slice, and a converged backend writes nothing at all.
func TestEndpointsPerBackendBounded(t *testing.T) {
	ns := framework.Namespace(t)
	xb := backend(ns, "big", span(1, 50), span(1, 5)...)
	framework.Create(t, xb)
	sl := converged(t, xb, span(6, 45), endpointNote(10), sizeNote(14))
	for _, s := range sl {
		if len(s.Endpoints) > 14 {
			t.Errorf("slice %s holds %d endpoints, more than 14", s.Name, len(s.Endpoints))
		}
	}
	stillQuiet(t, ns)

	// 46 to 50 give way to five addresses past them: all left out.
	sliceWrites := writes.Of(ns, "endpointslices")
	if err := framework.Update(t, xb, func(x *v1alpha1.ExternalBackend) {
		setEndpoints(x, append(span(1, 45), span(300, 304)...), span(1, 5)...)
	}); err != nil {
		t.Fatal(err)
	}
	converged(t, xb, span(6, 45), endpointNote(10), sizeNote(14))
	if n := writes.Of(ns, "endpointslices") - sliceWrites; n != 0 {
		t.Errorf("%d slice write(s) for a change among the endpoints left out, want none", n)
	}

	// One of those published turns unhealthy: a healthy one left out
	// takes its place, an unhealthy one takes none.
	if err := framework.Update(t, xb, func(x *v1alpha1.ExternalBackend) {
		setEndpoints(x, append(span(1, 45), span(300, 304)...), append(span(1, 5), addr(6))...)
	}); err != nil {
		t.Fatal(err)
	}
	converged(t, xb, append(span(7, 45), addr(300)), endpointNote(10), sizeNote(14))

	// One published goes from the spec: it would drain (the default drain
	// period), but a healthy endpoint left out ranks before a draining one,
	// which is then left out with the nine others.
	if err := framework.Update(t, xb, func(x *v1alpha1.ExternalBackend) {
		setEndpoints(x, slices.Concat(span(1, 6), span(8, 45), span(300, 304)), append(span(1, 5), addr(6))...)
	}); err != nil {
		t.Fatal(err)
	}
	converged(t, xb, slices.Concat(span(8, 45), span(300, 301)), endpointNote(10), sizeNote(14))
	stillQuiet(t, ns)
}

// TestSlicesPerBackendHovering: a backend of 30 endpoints fills its 3
// slices of 10. It grows to 33 (the slice size is raised to 11, Synced
// says so, and each slice takes one), shrinks back to 30 and then hovers
// between 30 and 31, a different endpoint each time. The size is kept at
// 11 on the way down, so that every change writes the one slice that takes
// or loses the endpoint: back at 10 a slice, the two slices still holding
// 11 would be repacked. The slices stay within 3 throughout.
func TestSlicesPerBackendHovering(t *testing.T) {
	ns := framework.Namespace(t)
	lo, hi := 1, 30
	xb := backend(ns, "hover", span(lo, hi))
	// An endpoint that goes leaves at once, so that the count hovers.
	xb.Spec.DrainPeriod = &metav1.Duration{}
	framework.Create(t, xb)
	converged(t, xb, span(lo, hi))
	stillQuiet(t, ns)

	var perChange []int64
	for _, op := range "+++---+-+-+-" {
		if op == '+' {
			hi++
		} else {
			lo++
		}
		before := writes.Of(ns, "endpointslices")
		if err := framework.Update(t, xb, func(x *v1alpha1.ExternalBackend) { setEndpoints(x, span(lo, hi)) }); err != nil {
			t.Fatal(err)
		}
		// The size stays 11 from the first time it is raised.
		converged(t, xb, span(lo, hi), sizeNote(11))
		perChange = append(perChange, writes.Of(ns, "endpointslices")-before)
	}
	t.Logf("slice writes of each change (30 to 33 endpoints, back to 30, then between 30 and 31): %v", perChange)
	for k, n := range perChange {
		if n != 1 {
			t.Errorf("change %d: %d slice writes, want 1", k, n)
		}
	}
	stillQuiet(t, ns)
}
