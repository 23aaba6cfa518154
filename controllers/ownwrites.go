package controllers

import (
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// writeTracker is what the writes and the watches need of ownWrites.
type writeTracker interface {
	// writing records a create or update about to be sent, or a delete.
	writing(o client.Object, deleting bool)
	// notEchoes is the watch predicate that drops the events of our own writes.
	notEchoes() predicate.Predicate
}

// ownWrites remembers what our last write of each object of kind T said
// (or that it deleted the object) until its watch event comes, so that the
// event the write causes brings no reconcile of its own: the reconcile that
// wrote has already seen the result. The write is recorded before it is
// sent, because its event may arrive before the call returns, and events
// are compared by content: an event showing what we wrote is ours (or
// changes nothing), any other is a change someone else made and brings a
// reconcile that reverts it.
type ownWrites[T client.Object] struct {
	// same tells whether an object as the watch shows it says what we wrote.
	same func(seen, wrote T) bool
	last *byName[lastWrite[T]]
}

// lastWrite is the object as we last wrote it, or that we deleted it.
type lastWrite[T client.Object] struct {
	obj     T
	deleted bool
}

func newOwnWrites[T client.Object](same func(seen, wrote T) bool) *ownWrites[T] {
	return &ownWrites[T]{same: same, last: newByName[lastWrite[T]]()}
}

func (w *ownWrites[T]) writing(o client.Object, deleting bool) {
	key := client.ObjectKeyFromObject(o)
	last := lastWrite[T]{deleted: deleting}
	if !deleting {
		c, ok := o.DeepCopyObject().(T)
		if !ok {
			// Not of our kind: nothing to tell its events by.
			w.last.forget(key)
			return
		}
		last.obj = c
	}
	w.last.set(key, last)
}

// echo tells whether an event shows what our last write left. A delete
// event ends the object's entry either way.
func (w *ownWrites[T]) echo(o client.Object, deleted bool) bool {
	key := client.ObjectKeyFromObject(o)
	if deleted {
		last, ok := w.last.take(key)
		return ok && last.deleted
	}
	last, ok := w.last.get(key)
	seen, isT := o.(T)
	if !ok || !isT || last.deleted || !w.same(seen, last.obj) {
		return false
	}
	// The write's own event has come: a later event is someone else's
	// change, or a resync of what is there, and may bring a reconcile
	// (which then finds nothing to write). Keeping the copy would hold a
	// second copy of every object we wrote (a write made meanwhile loses
	// its entry too, which costs it the same one reconcile, no more).
	w.last.forget(key)
	return true
}

func (w *ownWrites[T]) notEchoes() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { return !w.echo(e.Object, false) },
		UpdateFunc: func(e event.UpdateEvent) bool { return !w.echo(e.ObjectNew, false) },
		DeleteFunc: func(e event.DeleteEvent) bool { return !w.echo(e.Object, true) },
	}
}
