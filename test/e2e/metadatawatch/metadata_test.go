package metadatawatch_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// endpoints is how many addresses each backend publishes, and perSlice how
// many a slice holds: three slices each.
const (
	endpoints = 250
	perSlice  = 100
)

// newBackend creates a backend of n static addresses 198.51.100.x and
// 203.0.113.x, in a namespace of its own, and waits until it publishes them.
func newBackend(t *testing.T, n int) (*v1alpha1.ExternalBackend, []string) {
	t.Helper()
	var addrs []string
	var eps []v1alpha1.StaticEndpoint
	for i := range n {
		a := fmt.Sprintf("198.51.100.%d", i%250+1)
		if i >= 250 {
			a = fmt.Sprintf("203.0.113.%d", i%250+1)
		}
		addrs = append(addrs, a)
		eps = append(eps, v1alpha1.StaticEndpoint{Address: a})
	}
	xb := framework.Backend(framework.Namespace(t), "db", v1alpha1.Source{Name: "fixed", Static: &v1alpha1.StaticSource{Endpoints: eps}})
	xb.Spec.MaxEndpointsPerSlice = ptr.To[int32](perSlice)
	framework.Create(t, xb)
	framework.WaitReady(t, xb)
	framework.WaitAddresses(t, xb.Namespace, "db", addrs...)
	return xb, addrs
}

// TestSlicesWatchedAsMetadata: the controller watches its slices as
// metadata only, never whole; the bytes its slice watch receives while it
// writes a backend's slices are a small part of the bytes it writes.
func TestSlicesWatchedAsMetadata(t *testing.T) {
	before := seen.now()
	xb, addrs := newBackend(t, endpoints)
	// A change of every endpoint's health: every slice is written again.
	framework.Edit(t, xb, func(cur *v1alpha1.ExternalBackend) {
		for i := range cur.Spec.Sources[0].Static.Endpoints {
			cur.Spec.Sources[0].Static.Endpoints[i].Health = v1alpha1.HealthUnhealthy
		}
	})
	framework.Eventually(t, framework.Timeout, "every endpoint published not ready", func() error {
		for _, s := range framework.Slices(t, xb.Namespace, "db") {
			for _, e := range s.Endpoints {
				if ptr.Deref(e.Conditions.Ready, true) {
					return fmt.Errorf("%s still ready", e.Addresses[0])
				}
			}
		}
		return nil
	})
	framework.WaitAddresses(t, xb.Namespace, "db", addrs...)
	time.Sleep(time.Second) // the last events
	now := seen.now()
	if now.fullWatches != 0 {
		t.Errorf("the controller watched whole EndpointSlices %d time(s); it must watch them as metadata only", now.fullWatches)
	}
	if now.metaWatches == 0 {
		t.Error("the controller made no metadata-only watch of EndpointSlices")
	}
	// A whole-slice watch would have received each slice twice (created,
	// then updated), as the API server serves it.
	var whole int
	for _, s := range framework.Slices(t, xb.Namespace, "db") {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		whole += 2 * len(b)
	}
	received := now.watchBytes - before.watchBytes
	t.Logf("received on the slice watch %d bytes, %.3f of the %d bytes of the slices written", received, float64(received)/float64(whole), whole)
	if received*4 > int64(whole) {
		t.Errorf("the slice watch received %d bytes for slices of %d bytes: more than a quarter of them, as if it watched whole slices", received, whole)
	}
}

// TestHandEditsRepaired edits one of our slices by hand: its endpoints
// (which the metadata-only watch does not show, but whose change raises the
// slice's generation), and then an annotation only (which leaves the
// generation as it was). Each is repaired; the first is read past the cache,
// as one list of the backend's slices.
func TestHandEditsRepaired(t *testing.T) {
	xb, addrs := newBackend(t, endpoints)
	ns := xb.Namespace
	first := func() discoveryv1.EndpointSlice { return framework.Slices(t, ns, "db")[0] }

	before := seen.now()
	sl := first()
	sl.Endpoints = sl.Endpoints[:1]
	if err := framework.E().Client.Update(t.Context(), &sl); err != nil {
		t.Fatal(err)
	}
	framework.WaitAddresses(t, ns, "db", addrs...)
	// One list: the backend's slices, or every slice of ours when this is
	// the controller's first look past its cache since it started.
	now := seen.now()
	if got := now.fullLists + now.allFullLists - before.fullLists - before.allFullLists; got != 1 {
		t.Errorf("repairing the endpoints of a slice listed slices past the cache %d time(s), want 1", got)
	}

	sl = first()
	want := sl.Annotations
	sl.Annotations = map[string]string{"edited": "by hand"}
	if err := framework.E().Client.Update(t.Context(), &sl); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, framework.Timeout, "the slice's annotations repaired", func() error {
		got := first()
		if _, edited := got.Annotations["edited"]; edited || len(got.Annotations) != len(want) {
			return fmt.Errorf("annotations %v, want %v", got.Annotations, want)
		}
		return nil
	})
	framework.WaitAddresses(t, ns, "db", addrs...)
}

// TestRestartReadsContentOnce restarts the controller over published
// backends: what the metadata-only cache does not show is read in one
// cluster-wide list, not one list per backend, and nothing is written.
func TestRestartReadsContentOnce(t *testing.T) {
	const backends = 4
	var all []*v1alpha1.ExternalBackend
	for range backends {
		xb, _ := newBackend(t, 120)
		all = append(all, xb)
	}
	versions := map[string]string{}
	for _, xb := range all {
		for _, s := range framework.Slices(t, xb.Namespace, "db") {
			versions[s.Namespace+"/"+s.Name] = s.ResourceVersion
		}
	}
	before := seen.now()
	framework.RestartController(t)
	// The new controller's metrics start from zero: it has looked at every
	// backend once it has made as many reconciles; then the last ones end.
	framework.Eventually(t, framework.Timeout, "the restarted controller looking at every backend", func() error {
		if n, _ := framework.MetricValue(t, "backendslice_reconciles_total", nil); n < backends {
			return fmt.Errorf("%v reconciles", n)
		}
		return nil
	})
	time.Sleep(2 * time.Second)
	now := seen.now()
	if got := now.allFullLists - before.allFullLists; got != 1 {
		t.Errorf("after a restart the controller listed every slice of ours %d time(s), want 1", got)
	}
	if got := now.fullLists - before.fullLists; got != 0 {
		t.Errorf("after a restart the controller listed one namespace's slices %d time(s), want none: %v", got, seen.listed[before.fullLists:])
	}
	for _, xb := range all {
		for _, s := range framework.Slices(t, xb.Namespace, "db") {
			if v := versions[s.Namespace+"/"+s.Name]; v != s.ResourceVersion {
				t.Errorf("slice %s/%s written after the restart (resourceVersion %s, was %s)", s.Namespace, s.Name, s.ResourceVersion, v)
			}
		}
	}
}
