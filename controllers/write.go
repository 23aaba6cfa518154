package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/controllers/endpointslices"
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
		kindEndpointSlice: newOwnWrites(endpointslices.Same),
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
	if err := r.Create(ctx, o, client.FieldOwner(FieldManager)); err != nil {
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
	if err := r.Update(ctx, o, client.FieldOwner(FieldManager)); err != nil {
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
