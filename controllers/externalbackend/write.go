package externalbackend

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/sliceplan"
)

// Kinds we write, as backendslice_writes_total labels them.
const (
	kindService       = "Service"
	kindEndpointSlice = "EndpointSlice"
)

// newOwnWritesByKind builds the memory of our writes for each kind we
// write, with the comparison that decides what a change is for that kind.
func newOwnWritesByKind() map[string]writeTracker {
	return map[string]writeTracker{
		kindService: newOwnWrites(func(seen, wrote *corev1.Service) bool {
			_, changed := mergeService(seen, wrote)
			return !changed
		}),
		kindEndpointSlice: newOwnWrites(sliceplan.Same),
	}
}

// create, update and remove make every write of a Service or slice: each
// tells ownWrites before it is sent, and counts it (and, for a slice, tells
// the ledger) once it succeeded.

func (r *Reconciler) create(ctx context.Context, o client.Object, kind string) error {
	own := r.own[kind]
	named := o.GetName() != ""
	if named {
		own.writing(o, false)
	}
	if err := r.Create(ctx, o, client.FieldOwner(v1alpha1.FieldManager)); err != nil {
		return err
	}
	if !named {
		// A generated name is known only now; the event may have come first.
		own.writing(o, false)
	}
	r.succeeded(o, kind, "create")
	return nil
}

func (r *Reconciler) update(ctx context.Context, o client.Object, kind string) error {
	r.own[kind].writing(o, false)
	withoutManagedFields(o)
	if err := r.Update(ctx, o, client.FieldOwner(v1alpha1.FieldManager)); err != nil {
		return err
	}
	r.succeeded(o, kind, "update")
	return nil
}

func (r *Reconciler) remove(ctx context.Context, o client.Object, kind string, opts ...client.DeleteOption) error {
	r.own[kind].writing(o, true)
	if err := r.Delete(ctx, o, opts...); err != nil {
		return err
	}
	r.succeeded(o, kind, "delete")
	return nil
}

// succeeded counts a write that succeeded and gives the ledger our slice writes.
func (r *Reconciler) succeeded(o client.Object, kind, verb string) {
	r.Metrics.write(kind, verb)
	if kind == kindEndpointSlice {
		r.ledger.wrote(o, verb == "delete")
	}
}

// withoutManagedFields clears o's managed fields before it is written
// back: a nil list leaves the API server's own, where the trimmed copy of
// the cache would replace them.
func withoutManagedFields(o metav1.Object) { o.SetManagedFields(nil) }

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
