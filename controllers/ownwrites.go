package controllers

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// ownWrites remembers what our last write of each object of one kind said
// (or that it deleted the object), so that the watch event the write causes
// brings no reconcile of its own: the reconcile that wrote has already seen
// the result. The write is recorded before it is sent, because its event
// may arrive before the call returns, and events are compared by content:
// an event showing what we wrote is ours (or changes nothing), any other is
// a change someone else made and brings a reconcile that reverts it.
type ownWrites struct {
	// same tells whether an object as the watch shows it says what we wrote.
	same func(seen, wrote client.Object) bool
	mu   sync.Mutex
	// last is what we last wrote, by object; nil when we deleted it.
	last map[types.NamespacedName]client.Object
}

func newOwnWrites(same func(seen, wrote client.Object) bool) *ownWrites {
	return &ownWrites{same: same, last: map[types.NamespacedName]client.Object{}}
}

// writing records a create or update about to be sent, or a delete.
func (w *ownWrites) writing(o client.Object, deleting bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var last client.Object
	if !deleting {
		last = o.DeepCopyObject().(client.Object)
	}
	w.last[client.ObjectKeyFromObject(o)] = last
}

// echo tells whether an event shows what our last write left. A delete
// event ends the object's entry either way.
func (w *ownWrites) echo(o client.Object, deleted bool) bool {
	key := client.ObjectKeyFromObject(o)
	w.mu.Lock()
	defer w.mu.Unlock()
	last, ok := w.last[key]
	if deleted {
		delete(w.last, key)
		return ok && last == nil
	}
	return ok && last != nil && w.same(o, last)
}

// notEchoes is the watch predicate that drops the events of our own writes.
func (w *ownWrites) notEchoes() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { return !w.echo(e.Object, false) },
		UpdateFunc: func(e event.UpdateEvent) bool { return !w.echo(e.ObjectNew, false) },
		DeleteFunc: func(e event.DeleteEvent) bool { return !w.echo(e.Object, true) },
	}
}
