package externalbackend

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/backendslice/backendslice/api/v1alpha1"
)

// Kinds we write, as backendslice_writes_total labels them.
const (
	kindService       = "Service"
	kindEndpointSlice = "EndpointSlice"
)

// echoOf tells, for each kind we write, whether an object as a watch
// shows it (seen) says what our last write of it left: the comparison that
// decides what a change is for that kind. Services are watched whole;
// slices as metadata only (slicecontent.go).
var echoOf = map[string]func(seen client.Object, last lastWrite) bool{
	kindService: func(seen client.Object, last lastWrite) bool {
		s, okSeen := seen.(*corev1.Service)
		w, okWrote := last.obj.(*corev1.Service)
		if !okSeen || !okWrote {
			return false
		}
		_, changed := mergeService(s, w)
		return !changed
	},
	kindEndpointSlice: sliceEcho,
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

// succeeded counts a write that succeeded and gives the ledger our slice
// writes, and what this process keeps of our slices their new content.
func (r *Reconciler) succeeded(o client.Object, kind, verb string) {
	r.Metrics.write(kind, verb)
	if kind != kindEndpointSlice {
		return
	}
	deleted := verb == "delete"
	r.state.sliceWritten(o, deleted)
	if deleted {
		r.state.forgetContent(o)
		return
	}
	r.state.returned(o, kind)
	if s, ok := o.(*discoveryv1.EndpointSlice); ok {
		r.state.keepContent(s)
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
// Once the write returned, returned is set with the UID and generation it
// gave the object.
type lastWrite struct {
	obj        runtime.Object
	deleted    bool
	returned   bool
	uid        types.UID
	generation int64
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

// returned records the UID and generation a create or update of o gave
// it, in the entry writing made, unless its event has already ended that
// entry.
func (s *backendStates) returned(o client.Object, kind string) {
	key, ok := backendKey(o)
	if !ok {
		return
	}
	id := writtenObject{kind, o.GetName()}
	s.lookup(key, func(b *backendState) {
		if last, ok := b.echoes[id]; ok && !last.deleted {
			last.returned, last.uid, last.generation = true, o.GetUID(), o.GetGeneration()
			b.echoes[id] = last
		}
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
	// Compared outside the lock.
	if !found || last.deleted || !echoOf[kind](o, last) {
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
