package probe

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the prober's Prometheus metrics. Labels are the probe kind
// and the result only: no per-endpoint label, so the cardinality stays
// bounded whatever the fleet.
type Metrics struct {
	results  *prometheus.CounterVec
	failures *prometheus.CounterVec
	duration *prometheus.HistogramVec
	lateness prometheus.Histogram
	targets  prometheus.Gauge
}

// NewMetrics registers the prober's metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backendslice_probe_results_total",
			Help: "Probes run, by kind (tcp, http, https, grpc) and result (pass, fail).",
		}, []string{"kind", "result"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backendslice_probe_failures_total",
			Help: "Failed probes, by kind and reason (refused, timeout, unreachable, reset, tls, config, status, not_serving, unavailable, too_large, other): the controller's view only; tenants see pass or fail.",
		}, []string{"kind", "reason"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "backendslice_probe_duration_seconds",
			Help:    "How long a probe took, by kind.",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"kind"}),
		lateness: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "backendslice_probe_lateness_seconds",
			Help:    "How late a probe started after it was due: above a few milliseconds, the probe pool is too small.",
			Buckets: []float64{.001, .005, .01, .05, .1, .5, 1, 5},
		}),
		targets: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "backendslice_probe_targets",
			Help: "Targets (an address and what to check there) being probed.",
		}),
	}
	for _, c := range []prometheus.Collector{m.results, m.failures, m.duration, m.lateness, m.targets} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) result(kind Kind, err error, took time.Duration) {
	if m == nil {
		return
	}
	r := "pass"
	if err != nil {
		r = "fail"
		m.failures.WithLabelValues(string(kind), string(failureOf(err))).Inc()
	}
	m.results.WithLabelValues(string(kind), r).Inc()
	m.duration.WithLabelValues(string(kind)).Observe(took.Seconds())
}

func (m *Metrics) late(d time.Duration) {
	if m != nil {
		m.lateness.Observe(max(0, d.Seconds()))
	}
}

func (m *Metrics) setTargets(n int) {
	if m != nil {
		m.targets.Set(float64(n))
	}
}
