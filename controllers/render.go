package controllers

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/controllers/desired"
	"github.com/backendslice/backendslice/controllers/endpointslices"
)

// Render returns what the controller writes for xb into a namespace where
// none of its objects exist yet, given what its sources resolved to: the
// Service, the EndpointSlices and the addresses dropped on the way. It runs
// the reconciler's own steps without a client (spec checks, normalisation,
// the Service, the slice planner), so that `backendslice render` shows what
// the controller makes of a spec. Nothing is published yet, so nothing
// drains and the planner starts from no slices. Results with an error are
// left out, as the controller leaves out a failing source. Owner UIDs are
// empty: the API server assigns them.
func Render(xb *v1alpha1.ExternalBackend, results []desired.SourceResult, cfg Config) (*corev1.Service, []*discoveryv1.EndpointSlice, []v1alpha1.DroppedAddress, error) {
	if err := validateSpec(newValidator(), xb); err != nil {
		return nil, nil, nil, err
	}
	eps, dropped := desired.Normalize(results, desired.Policy{
		AddressTypes:   xb.Spec.AddressTypes,
		DeniedPrefixes: cfg.DeniedPrefixes,
		DeniedNames:    cfg.DeniedNames,
		Ports:          xb.Spec.Service.Ports,
	})
	svc := desiredService(xb, ipFamilies(xb.Spec.AddressTypes, eps))
	// A Reconciler with only its configuration is enough for the limit.
	r := &Reconciler{Config: cfg}
	plan := endpointslices.Compute(endpointslices.Input{
		Template: endpointslices.Template{
			Namespace:   xb.Namespace,
			ServiceName: svc.Name,
			Labels:      sliceLabels(xb, svc.Name),
			Owner:       ownerRef(svc, corev1.SchemeGroupVersion.WithKind("Service")),
		},
		Desired:              desired.Groups(eps),
		MaxEndpointsPerSlice: int(r.maxPerSlice(&reconcileState{xb: xb})),
	})
	return svc, plan.Create, dropped, nil
}
