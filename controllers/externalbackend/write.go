package externalbackend

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/slicestore"
)

// Kinds we write, as backendslice_writes_total labels them.
const (
	kindService       = slicestore.Service
	kindEndpointSlice = slicestore.EndpointSlice
)

// create, update and remove make every write of a Service or slice: each
// tells the slice store of it (Writing) before it is sent, and once it
// succeeded, counts it and tells the store again (Wrote).

func (r *Reconciler) create(ctx context.Context, o client.Object, kind slicestore.Kind) error {
	named := o.GetName() != ""
	if named {
		r.store.Writing(o, kind, false)
	}
	if err := r.Create(ctx, o, client.FieldOwner(v1alpha1.FieldManager)); err != nil {
		return err
	}
	if !named {
		// A generated name is known only now; the event may have come first.
		r.store.Writing(o, kind, false)
	}
	r.succeeded(o, kind, "create")
	return nil
}

func (r *Reconciler) update(ctx context.Context, o client.Object, kind slicestore.Kind) error {
	r.store.Writing(o, kind, false)
	withoutManagedFields(o)
	if err := r.Update(ctx, o, client.FieldOwner(v1alpha1.FieldManager)); err != nil {
		return err
	}
	r.succeeded(o, kind, "update")
	return nil
}

func (r *Reconciler) remove(ctx context.Context, o client.Object, kind slicestore.Kind, opts ...client.DeleteOption) error {
	r.store.Writing(o, kind, true)
	if err := r.Delete(ctx, o, opts...); err != nil {
		return err
	}
	r.succeeded(o, kind, "delete")
	return nil
}

// succeeded counts a write that succeeded and tells the slice store.
func (r *Reconciler) succeeded(o client.Object, kind slicestore.Kind, verb string) {
	r.Metrics.write(string(kind), verb)
	r.store.Wrote(o, kind, verb == "delete")
}

// withoutManagedFields clears o's managed fields before it is written
// back: a nil list leaves the API server's own, where the trimmed copy of
// the cache would replace them.
func withoutManagedFields(o metav1.Object) { o.SetManagedFields(nil) }

// newStore is the slice store of a reconciler that reads through cache,
// and past it through live.
func newStore(cache, live client.Reader) *slicestore.Store {
	return slicestore.New(cache, live, sameService)
}

// sameService tells whether seen, a Service as the watch shows it, is
// what we wrote (wrote): merging what we wrote into it changes nothing.
func sameService(seen, wrote *corev1.Service) bool {
	_, changed := mergeService(seen, wrote)
	return !changed
}
