package slicestore

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/backendslice/backendslice/api/v1alpha1"
)

// TestOwnWritesDropsOnlyEchoes: the slice watch shows metadata only, so an
// event is our write's echo when it shows our labels, annotations and
// owners at the generation the write gave the slice; before the write
// returns, at the generation a write of its kind can give it.
func TestOwnWritesDropsOnlyEchoes(t *testing.T) {
	ours := map[string]string{v1alpha1.BackendLabel: "db"}
	// sent is slice a as we send it: at generation gen (0 for a create)
	// with the annotation note.
	sent := func(gen int64, note string) *discoveryv1.EndpointSlice {
		s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", Labels: ours,
			Annotations: map[string]string{"note": note}, Generation: gen}, AddressType: discoveryv1.AddressTypeIPv4}
		if gen > 0 {
			s.UID = "uid-a"
		}
		return s
	}
	// seen is a slice as the metadata-only watch shows it.
	seen := func(name string, uid types.UID, gen int64, note string) *metav1.PartialObjectMetadata {
		m := SliceMeta()
		m.Namespace, m.Name, m.UID, m.Generation, m.Labels = "ns", name, uid, gen, ours
		m.Annotations = map[string]string{"note": note}
		return m
	}
	type step struct {
		// write is recorded as about to be written (or deleted) before the
		// event; returned, when not zero, is the generation it returned
		// with, before the event.
		write    *discoveryv1.EndpointSlice
		deleting bool
		returned int64
		// event is the watch event and obj its object; pass tells whether
		// it must bring a reconcile.
		event string
		obj   *metav1.PartialObjectMetadata
		pass  bool
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"someone else's object", []step{{event: "create", obj: seen("a", "uid-a", 1, "x"), pass: true}, {event: "update", obj: seen("a", "uid-a", 2, "x"), pass: true}}},
		{"our create, seen before it returns", []step{{write: sent(0, "x"), event: "create", obj: seen("a", "uid-a", 1, "x")}}},
		{"our create, seen after it returns", []step{{write: sent(0, "x"), returned: 1, event: "create", obj: seen("a", "uid-a", 1, "x")}}},
		{"our update of the endpoints, seen before it returns", []step{{write: sent(3, "x"), event: "update", obj: seen("a", "uid-a", 4, "x")}}},
		{"our update of an annotation only, seen before it returns", []step{{write: sent(3, "y"), event: "update", obj: seen("a", "uid-a", 3, "y")}}},
		{"our update, seen after it returns", []step{{write: sent(3, "x"), returned: 4, event: "update", obj: seen("a", "uid-a", 4, "x")}}},
		{"someone else's change to the endpoints after our write", []step{
			{write: sent(3, "x"), returned: 4, event: "update", obj: seen("a", "uid-a", 5, "x"), pass: true}}},
		{"someone else's change, seen before our write returns", []step{{write: sent(3, "x"), event: "update", obj: seen("a", "uid-a", 5, "x"), pass: true}}},
		{"an annotation someone else changed", []step{{write: sent(3, "x"), returned: 4, event: "update", obj: seen("a", "uid-a", 4, "z"), pass: true}}},
		{"the event of an older write of ours", []step{{write: sent(3, "x"), returned: 4, event: "update", obj: seen("a", "uid-a", 3, "x"), pass: true}}},
		{"a slice of the name made again by someone else", []step{{write: sent(3, "x"), event: "update", obj: seen("a", "uid-b", 4, "x"), pass: true}}},
		{"drift after our write", []step{{write: sent(3, "x"), returned: 4, event: "update", obj: seen("a", "uid-a", 4, "x")},
			{event: "update", obj: seen("a", "uid-a", 5, "x"), pass: true}}},
		{"another object", []step{{write: sent(3, "x"), event: "update", obj: seen("b", "uid-a", 4, "x"), pass: true}}},
		{"our delete", []step{{write: sent(3, "x"), deleting: true, event: "delete", obj: seen("a", "uid-a", 3, "x")}}},
		{"someone else deletes what we wrote", []step{{write: sent(3, "x"), event: "delete", obj: seen("a", "uid-a", 3, "x"), pass: true}}},
		{"the echo ends the entry: a resync of it passes", []step{{write: sent(3, "x"), event: "update", obj: seen("a", "uid-a", 4, "x")},
			{event: "update", obj: seen("a", "uid-a", 4, "x"), pass: true}}},
		{"a delete ends the entry", []step{{write: sent(3, "x"), deleting: true, event: "delete", obj: seen("a", "uid-a", 3, "x")},
			{event: "delete", obj: seen("a", "uid-a", 3, "x"), pass: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var w Store
			p := w.NotEchoes(EndpointSlice)
			for i, s := range tc.steps {
				if s.write != nil {
					w.Writing(s.write, EndpointSlice, s.deleting)
					if s.returned != 0 {
						back := s.write.DeepCopy()
						back.UID, back.Generation = "uid-a", s.returned
						w.Wrote(back, EndpointSlice, false)
					}
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
					t.Errorf("step %d: %s of %s (uid %s, generation %d, %v) passes = %v, want %v",
						i, s.event, s.obj.Name, s.obj.UID, s.obj.Generation, s.obj.Annotations, got, s.pass)
				}
			}
		})
	}
}

// TestWatchesMakeNoRecord: the watches' events of a backend this process
// keeps nothing of (one released, or someone else's objects) make no
// record, or a deleted backend's last events would bring it back.
func TestWatchesMakeNoRecord(t *testing.T) {
	var s Store
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db-0",
		Labels: map[string]string{v1alpha1.BackendLabel: "db"}}}
	svc := &corev1.Service{ObjectMeta: slice.ObjectMeta}
	for _, p := range []predicate.Predicate{s.NotEchoes(Service), s.NotEchoes(EndpointSlice), s.SliceDeletes()} {
		for _, o := range []client.Object{svc, slice} {
			p.Create(event.CreateEvent{Object: o})
			p.Update(event.UpdateEvent{ObjectOld: o, ObjectNew: o})
			p.Delete(event.DeleteEvent{Object: o})
		}
	}
	if n := s.records.Len(); n != 0 {
		t.Errorf("the watches made %d record(s)", n)
	}
}
