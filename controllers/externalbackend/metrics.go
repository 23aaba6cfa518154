package externalbackend

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/publish"
	"github.com/backendslice/backendslice/internal/seriesbook"
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
	// conditions, stale and lastSuccess are what the alerts read; their
	// books delete the series a backend no longer has.
	conditions     *prometheus.GaugeVec
	stale          *prometheus.GaugeVec
	lastSuccess    *prometheus.GaugeVec
	conditionsBook *seriesbook.Book
	sourcesBook    *seriesbook.Book
}

// ExportedConditions are the condition types of an ExternalBackend that
// backendslice_externalbackend_condition exports: those the chart's
// alerts read (not Ready for long, probes failing open).
var ExportedConditions = []string{v1alpha1.ConditionReady, v1alpha1.ConditionProbed}

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
			Help: "Turns of the work queue that a namespace running its share of the workers (--namespace-share) let go to another namespace waiting.",
		}),
		conditions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "backendslice_externalbackend_condition",
			Help: "The Ready and Probed conditions of each ExternalBackend: 1 when True, 0 when False or Unknown, labelled with the condition's reason; one series per backend and condition type.",
		}, []string{"namespace", "name", "type", "reason"}),
		stale: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "backendslice_source_stale",
			Help: "1 while a source of an ExternalBackend fails and what it last published is kept (status.sources[].stale), else 0.",
		}, []string{"namespace", "name", "source", "kind"}),
		lastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "backendslice_source_last_success_timestamp_seconds",
			Help: "When a source of an ExternalBackend last answered (Unix seconds): set at each answer; after a restart, until the source answers, the status's lastSuccessTime. A source is asked when a reconcile runs (a poll provider's refresh, a watch's change), so a quiet source's time stands still: read it with backendslice_source_stale.",
		}, []string{"namespace", "name", "source", "kind"}),
	}
	m.conditionsBook = seriesbook.New(m.conditions.MetricVec)
	m.sourcesBook = seriesbook.New(m.stale.MetricVec, m.lastSuccess.MetricVec)
	for _, c := range []prometheus.Collector{m.reconciles, m.duration, m.writes, m.published, m.held, m.deferrals,
		m.conditions, m.stale, m.lastSuccess} {
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

// backend exports what xb's status says after a pass: its endpoints, its
// conditions and its sources. resolved is false when the pass resolved
// nothing (suspended, or an invalid spec): the sources then have no
// series. results are the pass's answers, now the time of the pass.
func (m *Metrics) backend(xb *v1alpha1.ExternalBackend, resolved bool, results []publish.SourceResult, now time.Time) {
	c := xb.Status.Endpoints
	for cond, n := range map[string]int32{"total": c.Total, "ready": c.Ready, "serving": c.Serving, "terminating": c.Terminating} {
		m.published.WithLabelValues(xb.Namespace, xb.Name, cond).Set(float64(n))
	}
	key := xb.Namespace + "/" + xb.Name
	var conds [][]string
	for _, t := range ExportedConditions {
		if c := meta.FindStatusCondition(xb.Status.Conditions, t); c != nil {
			l := []string{xb.Namespace, xb.Name, t, c.Reason}
			m.conditions.WithLabelValues(l...).Set(bit(c.Status == metav1.ConditionTrue))
			conds = append(conds, l)
		}
	}
	m.conditionsBook.Keep(key, conds...)
	if !resolved {
		m.sourcesBook.Forget(key)
		return
	}
	answered := map[string]bool{}
	for _, r := range results {
		answered[r.Name] = r.Err == nil
	}
	var sources [][]string
	for _, s := range xb.Status.Sources {
		l := []string{xb.Namespace, xb.Name, s.Name, s.Kind}
		m.stale.WithLabelValues(l...).Set(bit(s.Stale))
		switch {
		case answered[s.Name]:
			m.lastSuccess.WithLabelValues(l...).Set(float64(now.UnixMilli()) / 1000)
		case s.LastSuccessTime != nil && !m.sourcesBook.Has(key, l):
			// Failing since this process started: the last success it
			// knows is the one status recorded.
			m.lastSuccess.WithLabelValues(l...).Set(float64(s.LastSuccessTime.Unix()))
		}
		sources = append(sources, l)
	}
	m.sourcesBook.Keep(key, sources...)
}

// forget drops the gauges of a deleted ExternalBackend.
func (m *Metrics) forget(namespace, name string) {
	m.published.DeletePartialMatch(prometheus.Labels{"namespace": namespace, "name": name})
	m.conditionsBook.Forget(namespace + "/" + name)
	m.sourcesBook.Forget(namespace + "/" + name)
}

// bit is b as a gauge's value.
func bit(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// passedOver counts the work queue's turns that a namespace at its share
// let go to another; nil without metrics.
func (m *Metrics) passedOver() prometheus.Counter {
	if m == nil {
		return nil
	}
	return m.deferrals
}
