package externalbackend

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/backendslice/backendslice/api/v1alpha1"
)

func TestOwnWritesDropsOnlyEchoes(t *testing.T) {
	// slice is slice name of backend db publishing the addresses, with
	// ready given for the first one.
	slice := func(name string, firstReady bool, addrs ...string) *discoveryv1.EndpointSlice {
		s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name,
			Labels: map[string]string{v1alpha1.BackendLabel: "db"}}, AddressType: discoveryv1.AddressTypeIPv4}
		for i, a := range addrs {
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(i > 0 || firstReady)}})
		}
		return s
	}
	type step struct {
		// write is recorded as about to be written (or deleted) before the event.
		write    *discoveryv1.EndpointSlice
		deleting bool
		// event is the watch event and obj its object; pass tells whether
		// it must bring a reconcile.
		event string
		obj   *discoveryv1.EndpointSlice
		pass  bool
	}
	a1 := slice("a", true, "192.0.2.1")
	a1down := slice("a", false, "192.0.2.1")
	a12 := slice("a", true, "192.0.2.1", "192.0.2.2")
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"someone else's object", []step{{event: "create", obj: a1, pass: true}, {event: "update", obj: a12, pass: true}}},
		{"our create", []step{{write: a1, event: "create", obj: a1}}},
		{"our update", []step{{write: a12, event: "update", obj: a12}}},
		{"our update, seen with the server's resourceVersion", []step{{write: a12, event: "update", obj: with(a12, "7")}}},
		{"drift after our write", []step{{write: a12, event: "update", obj: a12}, {event: "update", obj: a1, pass: true}}},
		{"a health change someone else made", []step{{write: a1, event: "update", obj: a1down, pass: true}}},
		{"the event of an older write of ours", []step{{write: a12, event: "update", obj: a1, pass: true}}},
		{"another object", []step{{write: a1, event: "update", obj: slice("b", true, "192.0.2.1"), pass: true}}},
		{"our delete", []step{{write: a1, deleting: true, event: "delete", obj: a1}}},
		{"someone else deletes what we wrote", []step{{write: a1, event: "delete", obj: a1, pass: true}}},
		{"the echo ends the entry: a resync of it passes", []step{{write: a12, event: "update", obj: a12}, {event: "update", obj: a12, pass: true}}},
		{"a delete ends the entry", []step{{write: a1, deleting: true, event: "delete", obj: a1}, {event: "delete", obj: a1, pass: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if echoOf[kindEndpointSlice] == nil {
				t.Fatal("slices have no echo comparison")
			}
			var w backendStates
			p := w.notEchoes(kindEndpointSlice)
			for i, s := range tc.steps {
				if s.write != nil {
					w.writing(s.write, kindEndpointSlice, s.deleting)
				}
				var got bool
				switch s.event {
				case "create":
					got = p.Create(event.CreateEvent{Object: s.obj})
				case "update":
					got = p.Update(event.UpdateEvent{ObjectOld: s.obj, ObjectNew: s.obj})
				case "delete":
					got = p.Delete(event.DeleteEvent{Object: s.obj})
				}
				if got != s.pass {
					t.Errorf("step %d: %s of %s %v passes = %v, want %v", i, s.event, s.obj.Name, s.obj.Endpoints, got, s.pass)
				}
			}
		})
	}
}

// with is s as the API server returns it, at resourceVersion rv.
func with(s *discoveryv1.EndpointSlice, rv string) *discoveryv1.EndpointSlice {
	out := s.DeepCopy()
	out.ResourceVersion, out.UID = rv, types.UID("uid-"+rv)
	return out
}

// TestWatchesMakeNoRecord: the watches' events of a backend this process
// keeps nothing of (one released, or someone else's objects) make no
// record, or a deleted backend's last events would bring it back.
func TestWatchesMakeNoRecord(t *testing.T) {
	var s backendStates
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db-0",
		Labels: map[string]string{v1alpha1.BackendLabel: "db"}}}
	svc := &corev1.Service{ObjectMeta: slice.ObjectMeta}
	for _, p := range []predicate.Predicate{s.notEchoes(kindService), s.notEchoes(kindEndpointSlice), s.watchSliceDeletes()} {
		for _, o := range []client.Object{svc, slice} {
			p.Create(event.CreateEvent{Object: o})
			p.Update(event.UpdateEvent{ObjectOld: o, ObjectNew: o})
			p.Delete(event.DeleteEvent{Object: o})
		}
	}
	if len(s.m) != 0 {
		t.Errorf("the watches made %d record(s)", len(s.m))
	}
}
