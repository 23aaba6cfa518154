package externalbackend

import (
	"fmt"
	"slices"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/publish"
	"github.com/backendslice/backendslice/internal/sliceplan"
)

// limitEndpoints keeps at most --max-endpoints-per-backend endpoints of
// each family (publish.Limit: ready ones first, then by address), and the
// drain records of those kept. It also returns the Synced note naming the
// limit when it left endpoints out. A draining endpoint left out goes at
// once: the bound holds whatever the drains, or a source rotating its
// addresses could keep every one it ever had published while they drain.
func (r *Reconciler) limitEndpoints(eps []publish.Endpoint, draining []v1alpha1.DrainingEndpoint) ([]publish.Endpoint, []v1alpha1.DrainingEndpoint, string) {
	most := r.Config.MaxEndpointsPerBackend
	kept, left := publish.Limit(eps, most)
	if left.Total() == 0 {
		return eps, draining, ""
	}
	return kept, onlyOf(draining, kept), fmt.Sprintf(
		"%d endpoint(s) not published (%s): past the controller's limit of %d endpoints of one address family per backend (--max-endpoints-per-backend), which publishes ready endpoints first, then by address",
		left.Total(), familyCounts(left), most)
}

// onlyOf is the drain records of draining whose endpoint is in eps.
func onlyOf(draining []v1alpha1.DrainingEndpoint, eps []publish.Endpoint) []v1alpha1.DrainingEndpoint {
	in := sets.New[string]()
	for _, e := range eps {
		in.Insert(e.Address)
	}
	return slices.DeleteFunc(slices.Clone(draining), func(d v1alpha1.DrainingEndpoint) bool { return !in.Has(d.Address) })
}

// familyCounts reads "IPv4 120, IPv6 3", families in order.
func familyCounts(left publish.LeftOut) string {
	var parts []string
	for _, f := range []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6, discoveryv1.AddressTypeFQDN} {
		if n := left[f]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", f, n))
		}
	}
	return strings.Join(parts, ", ")
}

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
