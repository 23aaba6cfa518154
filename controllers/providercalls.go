package controllers

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/backendslice/backendslice/providers"
)

// providerCalls counts the calls the providers' registry passes to a
// provider (a providers.CallObserver): backendslice_provider_calls_total.
// Its labels are bounded by the BackendProviders, not by the backends.
type providerCalls struct {
	calls *prometheus.CounterVec
}

// newProviderCalls registers the counter with reg.
func newProviderCalls(reg prometheus.Registerer) (*providerCalls, error) {
	p := &providerCalls{calls: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "backendslice_provider_calls_total",
		Help: "Calls of the controller to its providers, by BackendProvider (empty for sources without providerRef), provider kind, " +
			"call (resolve: a source's endpoints; check: a BackendProvider's connection) and outcome (success; gone: the backend no longer exists; " +
			"terminal: the spec or configuration is wrong; transient: retried). A consul source's resolve reads its watch, and fails while the watch does.",
	}, []string{"provider", "kind", "call", "outcome"})}
	if err := reg.Register(p.calls); err != nil {
		return nil, err
	}
	return p, nil
}

// Called counts one call.
func (p *providerCalls) Called(c providers.Call, err error) {
	p.calls.WithLabelValues(c.Provider, c.Kind, c.Op, providers.Outcome(err)).Inc()
}
