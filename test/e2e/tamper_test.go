package e2e

import (
	"fmt"
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/publish"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// quietPeriod is how long a repaired backend is watched for a loop.
const quietPeriod = 3 * time.Second

// expectQuiet checks that, over quietPeriod, the controller neither writes
// the backend's objects nor reconciles more than a few times in all: a
// retry loop shows as dozens of reconciles (it used to be one every 50 ms).
func expectQuiet(t *testing.T, xb *v1alpha1.ExternalBackend) {
	t.Helper()
	before := versions(t, xb.Namespace, "db")
	n := reconciles(t, "")
	time.Sleep(quietPeriod)
	if got := reconciles(t, "") - n; got > 5 {
		t.Errorf("%v reconciles in %s of quiet: a retry loop", got, quietPeriod)
	}
	expectUnchanged(t, xb.Namespace, "db", before)
}

// TestTamperingRepaired edits our Service and slices the ways people and
// tools do: each is repaired, the objects are re-adopted rather than
// duplicated, new endpoints are still published afterwards, and nothing
// loops. These run one after another: expectQuiet counts every reconcile.
func TestTamperingRepaired(t *testing.T) {
	addrs := []string{"192.0.2.70", "192.0.2.71"}
	xb, _ := readyBackend(t, addrs)
	ns := xb.Namespace
	next := 72
	// grow adds an endpoint and waits until it is published next to the
	// others: a plan that places an endpoint is what a hidden slice of ours
	// used to block.
	grow := func(t *testing.T) {
		t.Helper()
		addr := fmt.Sprintf("192.0.2.%d", next)
		next++
		mustUpdate(t, xb, addEndpoint(addr))
		addrs = append(addrs, addr)
		waitPublished(t, ns, "db", allReady(addrs...))
		waitReady(t, xb)
	}
	slice := func(t *testing.T) *discoveryv1.EndpointSlice {
		t.Helper()
		sl := ourSlices(t, ns, "db")
		if len(sl) != 1 {
			t.Fatalf("%d slices of ours, want 1", len(sl))
		}
		return &sl[0]
	}

	t.Run("Service label stripped", func(t *testing.T) {
		framework.Edit(t, getService(t, ns, "db"), func(s *corev1.Service) { delete(s.Labels, v1alpha1.BackendLabel) })
		eventually(t, timeout, "Service relabelled", func() error {
			if v := getService(t, ns, "db").Labels[v1alpha1.BackendLabel]; v != "db" {
				return fmt.Errorf("label %q", v)
			}
			return nil
		})
		grow(t)
		expectQuiet(t, xb)
	})
	t.Run("slice backend label stripped", func(t *testing.T) {
		s := slice(t)
		framework.Edit(t, s, func(s *discoveryv1.EndpointSlice) { delete(s.Labels, v1alpha1.BackendLabel) })
		grow(t)
		if s := slice(t); s.Labels[v1alpha1.BackendLabel] != "db" {
			t.Errorf("slice %s labels %v: not relabelled", s.Name, s.Labels)
		}
		expectQuiet(t, xb)
	})
	t.Run("slice service-name label stripped", func(t *testing.T) {
		// Without the label kube-proxy no longer reads the slice, but it is
		// still ours (our Service controls it): it is relabelled, not left
		// until the Service goes.
		stripped := slice(t).Name
		framework.Edit(t, slice(t), func(s *discoveryv1.EndpointSlice) { delete(s.Labels, discoveryv1.LabelServiceName) })
		eventually(t, timeout, "slice relabelled", func() error {
			sl := ourSlices(t, ns, "db")
			if len(sl) != 1 || sl[0].Name != stripped {
				return fmt.Errorf("%d slices of ours carry the service-name label, want %s", len(sl), stripped)
			}
			return nil
		})
		grow(t)
		expectQuiet(t, xb)
	})
	t.Run("slice managed-by label stripped", func(t *testing.T) {
		framework.Edit(t, slice(t), func(s *discoveryv1.EndpointSlice) { delete(s.Labels, discoveryv1.LabelManagedBy) })
		eventually(t, timeout, "slice relabelled", func() error {
			if len(ourSlices(t, ns, "db")) != 1 {
				return fmt.Errorf("no slice of ours carries the managed-by label")
			}
			return nil
		})
		grow(t)
		expectQuiet(t, xb)
	})
	t.Run("Service owner reference removed", func(t *testing.T) {
		framework.Edit(t, getService(t, ns, "db"), func(s *corev1.Service) { s.OwnerReferences = nil })
		eventually(t, timeout, "Service adopted again", func() error {
			if !metav1.IsControlledBy(getService(t, ns, "db"), get(t, xb)) {
				return fmt.Errorf("owners %v", getService(t, ns, "db").OwnerReferences)
			}
			return nil
		})
		grow(t)
		expectQuiet(t, xb)
	})
	t.Run("slice owner reference removed", func(t *testing.T) {
		framework.Edit(t, slice(t), func(s *discoveryv1.EndpointSlice) { s.OwnerReferences = nil })
		eventually(t, timeout, "slice adopted again", func() error {
			sl := ourSlices(t, ns, "db")
			if len(sl) != 1 || !metav1.IsControlledBy(&sl[0], getService(t, ns, "db")) {
				return fmt.Errorf("%d slices, owners %v", len(sl), sl[0].OwnerReferences)
			}
			return nil
		})
		grow(t)
		expectQuiet(t, xb)
	})
	t.Run("selector added to the Service", func(t *testing.T) {
		framework.Edit(t, getService(t, ns, "db"), func(s *corev1.Service) { s.Spec.Selector = map[string]string{"app": "db"} })
		eventually(t, timeout, "selector removed", func() error {
			if sel := getService(t, ns, "db").Spec.Selector; sel != nil {
				return fmt.Errorf("selector %v", sel)
			}
			return nil
		})
		expectQuiet(t, xb)
	})
	t.Run("hand-made slice with our labels", func(t *testing.T) {
		// Every label of ours, no owner, never written by the controller:
		// not ours, whatever it says. It holds one of our addresses and the
		// name the controller would give its next slice.
		fake := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: "db-ipv4-1", Labels: slice(t).Labels},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{addrs[0]}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}}},
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("pg"), Port: ptr.To[int32](5432)}},
		}
		mustCreate(t, fake)
		rv := fake.ResourceVersion
		// A maximum of one endpoint per slice makes the controller create
		// slices, next to a name the hand-made slice holds.
		mustUpdate(t, xb, func(xb *v1alpha1.ExternalBackend) { xb.Spec.MaxEndpointsPerSlice = ptr.To[int32](1) })
		waitReady(t, xb)
		eventually(t, timeout, "our slices, one endpoint each", func() error {
			sl := ourSlices(t, ns, "db")
			seen := map[string]bool{}
			for _, s := range sl {
				if s.Name == fake.Name {
					continue
				}
				if len(s.Endpoints) != 1 || !metav1.IsControlledBy(&s, getService(t, ns, "db")) {
					return fmt.Errorf("slice %s: %d endpoints, owners %v", s.Name, len(s.Endpoints), s.OwnerReferences)
				}
				seen[s.Endpoints[0].Addresses[0]] = true
			}
			if len(seen) != len(addrs) {
				return fmt.Errorf("our slices hold %v, want %v", seen, addrs)
			}
			return nil
		})
		expectSliceIntact(t, fake, rv)
	})
}

// TestManyDrainsSurviveRestart removes 150 endpoints at once: status lists
// the first 100 drains (its patch would fail with all of them), the slices
// record every drain start, and a controller restarted mid-drain reads them
// back unchanged, so the drains end at their period instead of starting
// again. Not parallel: it restarts the controller.
func TestManyDrainsSurviveRestart(t *testing.T) {
	addrs := ipv4s(151)
	xb, _ := readyBackend(t, addrs, withDrainPeriod("8s"))
	ns := xb.Namespace
	mustUpdate(t, xb, withAddresses(addrs[0]))
	cur := waitStatus(t, xb, "150 draining", func(xb *v1alpha1.ExternalBackend) error {
		if xb.Status.Endpoints.Terminating != 150 || len(xb.Status.Draining) != 100 {
			return fmt.Errorf("terminating %d, status.draining lists %d", xb.Status.Endpoints.Terminating, len(xb.Status.Draining))
		}
		return nil
	})
	before := drainStarts(t, ns)
	if len(before) != 150 {
		t.Fatalf("the slices record %d drain starts, want 150", len(before))
	}
	framework.RestartController(t)
	// A change the new controller must publish, while the drains run.
	mustUpdate(t, xb, withAddresses(addrs[0], "192.0.2.250"))
	waitEndpoints(t, ns, "db", func(got map[string]discoveryv1.Endpoint) error {
		if _, ok := got["192.0.2.250"]; !ok || len(got) != 152 {
			return fmt.Errorf("%d published", len(got))
		}
		return nil
	})
	if after := drainStarts(t, ns); !maps.Equal(after, before) {
		t.Errorf("drain starts changed across the restart: %d recorded, first differences %v", len(after), firstDiff(before, after))
	}
	waitAddresses(t, ns, "db", addrs[0], "192.0.2.250")
	// The status patch follows the slice write that ends the drains.
	waitStatus(t, cur, "no drain left on status", func(xb *v1alpha1.ExternalBackend) error {
		if n := len(xb.Status.Draining); n != 0 || xb.Status.Endpoints.Terminating != 0 {
			return fmt.Errorf("status.draining lists %d, %d terminating", n, xb.Status.Endpoints.Terminating)
		}
		return nil
	})
}

// drainStarts reads the drain start every slice of db records, by address.
func drainStarts(t *testing.T, ns string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, d := range publish.DrainsFromSlices(ourSlices(t, ns, "db")) {
		out[d.Address] = d.Since.UTC().Format(time.RFC3339)
	}
	return out
}

// firstDiff names up to three addresses whose values differ.
func firstDiff(a, b map[string]string) []string {
	var out []string
	for k, v := range a {
		if b[k] != v && len(out) < 3 {
			out = append(out, fmt.Sprintf("%s: %s then %q", k, v, b[k]))
		}
	}
	return out
}
