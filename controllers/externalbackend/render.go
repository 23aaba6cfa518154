package externalbackend

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/clock"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/coalesce"
	"github.com/backendslice/backendslice/internal/publish"
	"github.com/backendslice/backendslice/internal/sliceplan"
	"github.com/backendslice/backendslice/providers"
)

// Render returns what the controller writes for xb into a namespace where
// none of its objects exist yet, given what its sources resolved to: the
// Service, the EndpointSlices and the addresses dropped on the way. It runs
// the reconciler's own steps without a client (spec checks, normalisation,
// the Service, the slice planner), so that `backendslice render` shows what
// the controller makes of a spec. Nothing is published yet, so nothing
// drains and the planner starts from no slices. Results with an error are
// left out, as the controller leaves out a failing source. cluster are the
// cluster's own networks, as far as the caller knows them (offline, none
// unless given). Owner UIDs are empty: the API server assigns them.
func Render(xb *v1alpha1.ExternalBackend, results []publish.SourceResult, cfg Config, cluster publish.ClusterNetworks) (*corev1.Service, []*discoveryv1.EndpointSlice, []v1alpha1.DroppedAddress, error) {
	if err := validateSpec(NewSpecChecker(), providers.BuiltinKinds(), cfg.ClusterDomain, xb); err != nil {
		return nil, nil, nil, err
	}
	// Offline, every family the spec asks for is taken as served, and
	// nothing is held back: there is no earlier answer to hold.
	cfg.Coalesce = coalesce.Window{}
	r := &Reconciler{Config: cfg, Clock: clock.RealClock{}}
	seen := observed{served: sets.New(corev1.IPv4Protocol, corev1.IPv6Protocol), cluster: cluster}
	pub := r.publication(context.Background(), xb, resolved{results: results, admissions: make([]sourceAdmission, len(results))}, seen)
	svc := desiredService(xb, ipFamilies(pub.families, pub.endpoints))
	plan := sliceplan.Compute(r.planInput(xb, svc, pub))
	return svc, plan.Create, pub.dropped, nil
}
