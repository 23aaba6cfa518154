package slicestore

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// written names an object we write within its backend's record: its kind
// and name (the namespace is the backend's).
type written struct {
	kind Kind
	name string
}

// lastWrite is the object as we last wrote it, or that we deleted it.
// Once the write returned, returned is set with the UID and generation it
// gave the object.
type lastWrite struct {
	obj        runtime.Object
	deleted    bool
	returned   bool
	uid        types.UID
	generation int64
}

// Writing records a write of o about to be sent (a create or update, or a
// delete), so that the watch event it causes brings no reconcile of its
// own: the reconcile that wrote has already seen the result. The write is
// recorded before it is sent, because its event may arrive before the call
// returns, and events are compared by content (see echoes): an event
// showing what we wrote is ours (or changes nothing), any other is a
// change someone else made and brings a reconcile that reverts it. A
// create with a generated name is recorded once it returned, since only
// then is the name known (its event may have come first).
//
// The write goes in the record of the backend o's label names. An object
// without that label has no events to tell: the cache holds only objects
// that carry it.
func (s *Store) Writing(o client.Object, kind Kind, deleting bool) {
	key, ok := BackendKey(o)
	if !ok {
		return
	}
	last := lastWrite{deleted: deleting}
	if !deleting {
		last.obj = o.DeepCopyObject()
	}
	s.update(key, func(b *record) {
		if b.echoes == nil {
			b.echoes = map[written]lastWrite{}
		}
		b.echoes[written{kind, o.GetName()}] = last
	})
}

// Wrote records a write of o that succeeded. A slice's goes in the ledger,
// with the content it gave the slice (forgotten if it deleted it), and in
// the entry Writing made, the UID and generation it returned with.
func (s *Store) Wrote(o client.Object, kind Kind, deleted bool) {
	if kind != EndpointSlice {
		return
	}
	key, ok := BackendKey(o)
	if !ok {
		return
	}
	sl, whole := o.(*discoveryv1.EndpointSlice)
	var c content
	if whole && !deleted {
		// Copied outside the lock.
		c = contentOf(sl)
	}
	s.update(key, func(b *record) {
		b.ledger.wrote(o, deleted)
		if deleted {
			b.forgetContent(o)
			return
		}
		b.returned(o, kind)
		if whole {
			b.keepContent(o.GetName(), c)
		}
	})
}

// returned records the UID and generation a create or update of o gave
// it, in the entry Writing made, unless its event has already ended that
// entry.
func (b *record) returned(o client.Object, kind Kind) {
	id := written{kind, o.GetName()}
	if last, ok := b.echoes[id]; ok && !last.deleted {
		last.returned, last.uid, last.generation = true, o.GetUID(), o.GetGeneration()
		b.echoes[id] = last
	}
}

// echo tells whether an event shows what our last write of o left. A
// delete event ends the object's entry either way.
func (s *Store) echo(o client.Object, kind Kind, deleted bool) bool {
	key, ok := BackendKey(o)
	if !ok {
		return false
	}
	id := written{kind, o.GetName()}
	var last lastWrite
	var found bool
	s.lookup(key, func(b *record) {
		last, found = b.echoes[id]
		if deleted {
			delete(b.echoes, id)
		}
	})
	if deleted {
		return found && last.deleted
	}
	// Compared outside the lock.
	if !found || last.deleted || !s.shows(o, kind, last) {
		return false
	}
	// The write's own event has come: a later event is someone else's
	// change, or a resync of what is there, and may bring a reconcile
	// (which then finds nothing to write). Keeping the copy would hold a
	// second copy of every object we wrote (a write made meanwhile loses
	// its entry too, which costs it the same one reconcile, no more).
	s.lookup(key, func(b *record) { delete(b.echoes, id) })
	return true
}

// shows tells, for each kind we write, whether an object as a watch
// shows it (seen) says what our last write of it left: the comparison
// that decides what a change is for that kind. Services are watched
// whole; slices as metadata only (content.go).
func (s *Store) shows(seen client.Object, kind Kind, last lastWrite) bool {
	if kind == EndpointSlice {
		return sliceEcho(seen, last)
	}
	svc, okSeen := seen.(*corev1.Service)
	w, okWrote := last.obj.(*corev1.Service)
	return okSeen && okWrote && s.sameService != nil && s.sameService(svc, w)
}

// sliceEcho tells whether seen, a slice's metadata as a watch shows it, is
// what our last write of it (last) left. The labels, annotations and owners
// must be ours; the generation, which the API server bumps on any other
// change, must be the one our write gave it. Before the write returns, that
// generation is not known yet: an update made with the resourceVersion it
// read leaves the slice at that generation or the next (the next when it
// changed anything but annotations or owners), a create at 1.
func sliceEcho(seen client.Object, last lastWrite) bool {
	wrote, ok := last.obj.(*discoveryv1.EndpointSlice)
	if !ok || !equality.Semantic.DeepEqual(seen.GetLabels(), wrote.Labels) ||
		!equality.Semantic.DeepEqual(seen.GetAnnotations(), wrote.Annotations) ||
		!equality.Semantic.DeepEqual(seen.GetOwnerReferences(), wrote.OwnerReferences) {
		return false
	}
	switch g := seen.GetGeneration(); {
	case last.returned:
		return seen.GetUID() == last.uid && g == last.generation
	case wrote.UID == "":
		return g == 1
	default:
		return seen.GetUID() == wrote.UID && (g == wrote.Generation || g == wrote.Generation+1)
	}
}

// NotEchoes is the watch predicate for objects of kind that drops the
// events of our own writes.
func (s *Store) NotEchoes(kind Kind) predicate.Predicate {
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { return !s.echo(e.Object, kind, false) },
		UpdateFunc: func(e event.UpdateEvent) bool { return !s.echo(e.ObjectNew, kind, false) },
		DeleteFunc: func(e event.DeleteEvent) bool { return !s.echo(e.Object, kind, true) },
	}
}
