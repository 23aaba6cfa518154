package plugin

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
)

// Operations of the requests metric: info, a resolve that is not held,
// and a long-poll.
const (
	opInfo     = "info"
	opResolve  = "resolve"
	opLongPoll = "long_poll"
)

// metrics are the plugin provider's Prometheus metrics, by BackendProvider
// (the platform team's, so their number is bounded) and never by source.
type metrics struct {
	requests  *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	longPolls *prometheus.GaugeVec
	refused   *prometheus.Desc
}

func newMetrics() *metrics {
	return &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backendslice_plugin_requests_total",
			Help: "Requests to plugins, by BackendProvider, operation (info; resolve; long_poll, a resolve held until a change) and outcome " +
				"(ok; invalid_parameters, not_found, forbidden, unavailable, unauthorized: the plugin's error codes; broken: an answer that is not " +
				"the protocol's, such as a missing required field, one over its bound or too large; unsupported_protocol; unreachable: no whole " +
				"answer, such as a refused connection or a timeout).",
		}, []string{"provider", "operation", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "backendslice_plugin_request_duration_seconds",
			Help: "How long a request to a plugin took to be answered, by BackendProvider and operation (a long_poll lasts until a change " +
				"or its wait ends).",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120},
		}, []string{"provider", "operation"}),
		longPolls: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "backendslice_plugin_long_polls",
			Help: "Long-polls held by plugins now, by BackendProvider: one for each pushed source whose plugin has not answered yet.",
		}, []string{"provider"}),
		refused: prometheus.NewDesc("backendslice_plugin_refused_sources",
			"Sources a plugin's consent rules refused (forbidden), by BackendProvider: they hold no watch and are asked again after "+
				"minutes.", []string{"provider"}, nil),
	}
}

// observe counts a request of c that ended with err after took, unless
// its caller stopped waiting for it (a watch that ended).
func (m *metrics) observe(provider, op string, err error, took time.Duration, cancelled bool) {
	if m == nil || cancelled {
		return
	}
	m.requests.WithLabelValues(provider, op, outcomeOf(err)).Inc()
	m.duration.WithLabelValues(provider, op).Observe(took.Seconds())
}

// holding counts a long-poll of provider as held (+1) or answered (-1).
func (m *metrics) holding(provider string, delta float64) {
	if m != nil {
		m.longPolls.WithLabelValues(provider).Add(delta)
	}
}

// outcomeOf is the outcome label of a request that ended with err.
func outcomeOf(err error) string {
	var bad *badAnswer
	var refused forbidden
	var busy unavailable
	pe := providers.AsError(err)
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &bad):
		return "broken"
	case errors.As(err, &refused):
		return "forbidden"
	case errors.As(err, &busy):
		return "unavailable"
	case pe.Reason == v1alpha1.ReasonAccessDenied:
		return "unauthorized"
	case pe.Reason == v1alpha1.ReasonInvalidSpec:
		return "invalid_parameters"
	case pe.Reason == v1alpha1.ReasonUnsupportedProtocol:
		return "unsupported_protocol"
	case pe.Gone:
		return "not_found"
	}
	return "unreachable"
}

// Describe describes the provider's metrics (a prometheus.Collector,
// registered by the controller's manager).
func (p *Provider) Describe(ch chan<- *prometheus.Desc) {
	p.metrics.requests.Describe(ch)
	p.metrics.duration.Describe(ch)
	p.metrics.longPolls.Describe(ch)
	ch <- p.metrics.refused
}

// Collect collects the provider's metrics; the refused sources are
// counted now.
func (p *Provider) Collect(ch chan<- prometheus.Metric) {
	p.metrics.requests.Collect(ch)
	p.metrics.duration.Collect(ch)
	p.metrics.longPolls.Collect(ch)
	p.mu.Lock()
	refused := map[string]int{}
	for _, r := range p.refused {
		refused[r.provider]++
	}
	p.mu.Unlock()
	for provider, n := range refused {
		ch <- prometheus.MustNewConstMetric(p.metrics.refused, prometheus.GaugeValue, float64(n), provider)
	}
}

var _ prometheus.Collector = (*Provider)(nil)
