// Package static resolves static sources: fixed endpoints written in the spec.
package static

import (
	"context"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
)

// Provider resolves static sources. It needs no configuration.
type Provider struct{}

// New returns a static provider.
func New() Provider { return Provider{} }

// Kind is the static kind.
func (Provider) Kind() providers.Kind { return Kind }

// Resolve returns the endpoints written in the spec with their health.
func (Provider) Resolve(_ context.Context, req providers.Request) (providers.Result, error) {
	src := req.Source.Static
	if src == nil {
		return providers.Result{}, providers.Terminalf(v1alpha1.ReasonInvalidSpec,
			"spec.sources[%s]: not a static source", req.Source.Name)
	}
	eps := make([]providers.Endpoint, 0, len(src.Endpoints))
	for _, e := range src.Endpoints {
		ep := providers.Endpoint{Address: e.Address, Zone: e.Zone, Hostname: e.Hostname}
		switch e.Health {
		case "", v1alpha1.HealthHealthy:
			ep.Serving = true
		case v1alpha1.HealthUnhealthy:
		case v1alpha1.HealthDraining:
			ep.Serving, ep.Terminating = true, true
		default:
			return providers.Result{}, providers.Terminalf(v1alpha1.ReasonInvalidSpec,
				"spec.sources[%s].static.endpoints[%s].health: %q is not one of Healthy, Unhealthy, Draining",
				req.Source.Name, e.Address, e.Health)
		}
		eps = append(eps, ep)
	}
	return providers.Result{Endpoints: eps}, nil
}

var _ providers.Provider = Provider{}
