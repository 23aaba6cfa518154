package externalbackend

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/backendslice/backendslice/internal/publish"
	"github.com/backendslice/backendslice/internal/sliceplan"
)

// sliceBound is what --max-slices-per-backend made of a plan: the Synced
// notes naming it, and the addresses it left out.
type sliceBound struct {
	limits  []string
	leftOut sets.Set[string]
}

// sliceBoundOf reads the plan for in: a slice size raised above asked
// (the spec's, the default or the floor) to keep the backend within the
// bound, or else endpoints left out because even 1000 a slice would not.
func (r *Reconciler) sliceBoundOf(in sliceplan.Input, plan sliceplan.Plan, asked int32) sliceBound {
	var b sliceBound
	most := r.Config.MaxSlicesPerBackend
	if len(plan.LeftOut) == 0 {
		if plan.Size > int(asked) {
			b.limits = []string{fmt.Sprintf(
				"the slice size is raised from %d to %d endpoints to keep the backend within the controller's limit of %d EndpointSlices (--max-slices-per-backend)",
				asked, plan.Size, most)}
		}
		return b
	}
	b.leftOut = sets.New[string]()
	for _, g := range plan.LeftOut {
		for _, ep := range g.Endpoints {
			b.leftOut.Insert(ep.Addresses[0])
		}
	}
	b.limits = append(b.limits, fmt.Sprintf(
		"%d endpoint(s) not published: the backend's %d port set(s) (an address family and ports each) need more than the controller's limit of %d EndpointSlices (--max-slices-per-backend) even at 1000 endpoints a slice; give every spec.service.ports entry a targetPort, so that the endpoints share their family's port set, or publish fewer endpoints",
		b.leftOut.Len(), len(in.Desired), most))
	return b
}

// without is eps less the addresses in out.
func without(eps []publish.Endpoint, out sets.Set[string]) []publish.Endpoint {
	if out.Len() == 0 {
		return eps
	}
	return slices.DeleteFunc(slices.Clone(eps), func(e publish.Endpoint) bool { return out.Has(e.Address) })
}
