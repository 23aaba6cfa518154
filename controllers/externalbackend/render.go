package externalbackend

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/coalesce"
	"github.com/backendslice/backendslice/internal/decide"
	"github.com/backendslice/backendslice/internal/publish"
	"github.com/backendslice/backendslice/internal/sliceplan"
	"github.com/backendslice/backendslice/internal/speccheck"
	"github.com/backendslice/backendslice/providers"
)

// Render returns what the controller writes for xb into a namespace where
// none of its objects exist yet, given what its sources resolved to: the
// Service, the EndpointSlices and the addresses dropped on the way. It runs
// the reconciler's own pure parts without a client (spec checks, the
// decision, the Service, the slice planner), so that `backendslice render` shows what
// the controller makes of a spec. Nothing is published yet, so nothing
// drains and the planner starts from no slices. Results with an error are
// left out, as the controller leaves out a failing source. kinds is the
// table of source kinds the controller has. cluster are the
// cluster's own networks, as far as the caller knows them (offline, none
// unless given). Owner UIDs are empty: the API server assigns them.
func Render(kinds providers.Kinds, xb *v1alpha1.ExternalBackend, results []publish.SourceResult, cfg Config, cluster publish.ClusterNetworks) (*corev1.Service, []*discoveryv1.EndpointSlice, []v1alpha1.DroppedAddress, error) {
	if err := speccheck.New().Err(kinds, cfg.ClusterDomain, xb); err != nil {
		return nil, nil, nil, err
	}
	// Offline, every family the spec asks for is taken as served, and
	// nothing is held back: there is no earlier answer to hold.
	in := decide.Inputs{
		Backend: xb,
		Sources: decide.Sources{Results: results, Grants: make([]decide.Grant, len(results))},
		Served:  sets.New(corev1.IPv4Protocol, corev1.IPv6Protocol),
		Cluster: cluster,
		Now:     time.Now(),
		Config:  cfg.Decision(),
	}
	in.Config.Coalesce = coalesce.Window{}
	in.Candidates = decide.Normalize(in)
	pub, _ := decide.Decide(in, decide.Memory{})
	svc := desiredService(xb, ipFamilies(pub.Families, pub.Endpoints))
	plan := sliceplan.Compute(cfg.planInput(xb, svc, pub))
	return svc, plan.Create, pub.Dropped, nil
}
