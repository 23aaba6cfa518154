package externalbackend

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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

// echoOf tells, for each kind we write, whether an object as a watch
// shows it (seen) says what we wrote: the comparison that decides what a
// change is for that kind.
var echoOf = map[string]func(seen client.Object, wrote runtime.Object) bool{
	kindService: sameAs(func(seen, wrote *corev1.Service) bool {
		_, changed := mergeService(seen, wrote)
		return !changed
	}),
	kindEndpointSlice: sameAs(sliceplan.Same),
}

// sameAs applies same to two objects of its kind; objects of another kind
// say nothing of each other.
func sameAs[T client.Object](same func(seen, wrote T) bool) func(client.Object, runtime.Object) bool {
	return func(seen client.Object, wrote runtime.Object) bool {
		s, okSeen := seen.(T)
		w, okWrote := wrote.(T)
		return okSeen && okWrote && same(s, w)
	}
}

// create, update and remove make every write of a Service or slice: each
// records it as ours (writing) before it is sent, and counts it (and, for
// a slice, tells the ledger) once it succeeded.

func (r *Reconciler) create(ctx context.Context, o client.Object, kind string) error {
	named := o.GetName() != ""
	if named {
		r.state.writing(o, kind, false)
	}
	if err := r.Create(ctx, o, client.FieldOwner(v1alpha1.FieldManager)); err != nil {
		return err
	}
	if !named {
		// A generated name is known only now; the event may have come first.
		r.state.writing(o, kind, false)
	}
	r.succeeded(o, kind, "create")
	return nil
}

func (r *Reconciler) update(ctx context.Context, o client.Object, kind string) error {
	r.state.writing(o, kind, false)
	withoutManagedFields(o)
	if err := r.Update(ctx, o, client.FieldOwner(v1alpha1.FieldManager)); err != nil {
		return err
	}
	r.succeeded(o, kind, "update")
	return nil
}

func (r *Reconciler) remove(ctx context.Context, o client.Object, kind string, opts ...client.DeleteOption) error {
	r.state.writing(o, kind, true)
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
		r.state.sliceWritten(o, verb == "delete")
	}
}

// withoutManagedFields clears o's managed fields before it is written
// back: a nil list leaves the API server's own, where the trimmed copy of
// the cache would replace them.
func withoutManagedFields(o metav1.Object) { o.SetManagedFields(nil) }

// writtenObject names an object we write within its backend's record:
// its kind and name (the namespace is the backend's).
type writtenObject struct {
	kind, name string
}

// lastWrite is the object as we last wrote it, or that we deleted it.
type lastWrite struct {
	obj     runtime.Object
	deleted bool
}

// writing records a write of o about to be sent (a create or update, or a
// delete), so that the watch event it causes brings no reconcile of its
// own: the reconcile that wrote has already seen the result. The write is
// recorded before it is sent, because its event may arrive before the call
// returns, and events are compared by content (echoOf): an event showing
// what we wrote is ours (or changes nothing), any other is a change
// someone else made and brings a reconcile that reverts it.
//
// The write goes in the record of the backend o's label names. An object
// without that label has no events to tell: the cache holds only objects
// that carry it.
func (s *backendStates) writing(o client.Object, kind string, deleting bool) {
	key, ok := backendKey(o)
	if !ok {
		return
	}
	last := lastWrite{deleted: deleting}
	if !deleting {
		last.obj = o.DeepCopyObject()
	}
	s.update(key, func(b *backendState) {
		if b.echoes == nil {
			b.echoes = map[writtenObject]lastWrite{}
		}
		b.echoes[writtenObject{kind, o.GetName()}] = last
	})
}

// echo tells whether an event shows what our last write of o left. A
// delete event ends the object's entry either way.
func (s *backendStates) echo(o client.Object, kind string, deleted bool) bool {
	key, ok := backendKey(o)
	if !ok {
		return false
	}
	id := writtenObject{kind, o.GetName()}
	var last lastWrite
	var found bool
	s.lookup(key, func(b *backendState) {
		last, found = b.echoes[id]
		if deleted {
			delete(b.echoes, id)
		}
	})
	if deleted {
		return found && last.deleted
	}
	// Compared outside the lock: a slice can hold a thousand endpoints.
	if !found || last.deleted || !echoOf[kind](o, last.obj) {
		return false
	}
	// The write's own event has come: a later event is someone else's
	// change, or a resync of what is there, and may bring a reconcile
	// (which then finds nothing to write). Keeping the copy would hold a
	// second copy of every object we wrote (a write made meanwhile loses
	// its entry too, which costs it the same one reconcile, no more).
	s.lookup(key, func(b *backendState) { delete(b.echoes, id) })
	return true
}

// notEchoes is the watch predicate for objects of kind that drops the
// events of our own writes.
func (s *backendStates) notEchoes(kind string) predicate.Predicate {
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { return !s.echo(e.Object, kind, false) },
		UpdateFunc: func(e event.UpdateEvent) bool { return !s.echo(e.ObjectNew, kind, false) },
		DeleteFunc: func(e event.DeleteEvent) bool { return !s.echo(e.Object, kind, true) },
	}
}
