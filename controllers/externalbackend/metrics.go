package externalbackend

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backendslice/backendslice/api/v1alpha1"
)

// Metrics are the controller's Prometheus metrics. They are created and
// registered by NewMetrics, so tests can use a registry of their own.
type Metrics struct {
	reconciles *prometheus.CounterVec
	duration   prometheus.Histogram
	writes     *prometheus.CounterVec
	published  *prometheus.GaugeVec
	held       prometheus.Counter
	deferrals  prometheus.Counter
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backendslice_reconciles_total",
			Help: "ExternalBackend reconciles by result (success or error).",
		}, []string{"result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "backendslice_reconcile_duration_seconds",
			Help:    "Time one ExternalBackend reconcile takes, provider calls included.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backendslice_writes_total",
			Help: "API writes made by the controller, by object kind and verb.",
		}, []string{"kind", "verb"}),
		published: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "backendslice_endpoints",
			Help: "Published endpoints of each ExternalBackend by condition (ready, serving, terminating, total).",
		}, []string{"namespace", "name", "condition"}),
		held: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backendslice_changes_held_total",
			Help: "Reconciles whose provider changes the coalescing window held back (--coalesce-quiet).",
		}),
		deferrals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backendslice_reconciles_deferred_total",
			Help: "Reconciles put back in the queue because their namespace already ran its share of the workers (--namespace-share).",
		}),
	}
	for _, c := range []prometheus.Collector{m.reconciles, m.duration, m.writes, m.published, m.held, m.deferrals} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) reconciled(err error, took time.Duration) {
	result := "success"
	if err != nil {
		result = "error"
	}
	m.reconciles.WithLabelValues(result).Inc()
	m.duration.Observe(took.Seconds())
}

func (m *Metrics) write(kind, verb string) { m.writes.WithLabelValues(kind, verb).Inc() }

func (m *Metrics) heldBack() { m.held.Inc() }

func (m *Metrics) deferred() { m.deferrals.Inc() }

func (m *Metrics) endpoints(xb *v1alpha1.ExternalBackend) {
	c := xb.Status.Endpoints
	for cond, n := range map[string]int32{"total": c.Total, "ready": c.Ready, "serving": c.Serving, "terminating": c.Terminating} {
		m.published.WithLabelValues(xb.Namespace, xb.Name, cond).Set(float64(n))
	}
}

// forget drops the gauges of a deleted ExternalBackend.
func (m *Metrics) forget(namespace, name string) {
	m.published.DeletePartialMatch(prometheus.Labels{"namespace": namespace, "name": name})
}
