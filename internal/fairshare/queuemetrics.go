package fairshare

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// queueMetrics are the workqueue metrics controller-runtime's own queues
// report (workqueue_depth, workqueue_adds_total, ...), with the same names
// and labels, so that dashboards and alerts read the fair queue as they
// read theirs.
type queueMetrics struct {
	depth        prometheus.Gauge
	adds         prometheus.Counter
	retries      prometheus.Counter
	latency      prometheus.Observer
	workDuration prometheus.Observer
}

// newQueueMetrics returns the metrics of the queue named name, in
// controller-runtime's registry.
func newQueueMetrics(name string) queueMetrics {
	return queueMetrics{
		depth: existing(prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: ctrlmetrics.WorkQueueSubsystem, Name: ctrlmetrics.DepthKey,
			Help: "Current depth of workqueue by workqueue and priority",
		}, []string{"name", "controller", "priority"})).WithLabelValues(name, name, ""),
		adds: existing(prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: ctrlmetrics.WorkQueueSubsystem, Name: ctrlmetrics.AddsKey,
			Help: "Total number of adds handled by workqueue",
		}, []string{"name", "controller"})).WithLabelValues(name, name),
		retries: existing(prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: ctrlmetrics.WorkQueueSubsystem, Name: ctrlmetrics.RetriesKey,
			Help: "Total number of items added to the workqueue with a non-zero delay (rate-limited requeues, explicit RequeueAfter or AddAfter calls)",
		}, []string{"name", "controller"})).WithLabelValues(name, name),
		latency: existing(prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: ctrlmetrics.WorkQueueSubsystem, Name: ctrlmetrics.QueueLatencyKey,
			Help:    "How long in seconds an item stays in workqueue before being requested",
			Buckets: prometheus.ExponentialBuckets(10e-9, 10, 12),
		}, []string{"name", "controller"})).WithLabelValues(name, name),
		workDuration: existing(prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: ctrlmetrics.WorkQueueSubsystem, Name: ctrlmetrics.WorkDurationKey,
			Help:    "How long in seconds processing an item from workqueue takes.",
			Buckets: prometheus.ExponentialBuckets(10e-9, 10, 12),
		}, []string{"name", "controller"})).WithLabelValues(name, name),
	}
}

// existing registers c in controller-runtime's registry, or returns the
// collector of that name already there: controller-runtime registers the
// workqueue metrics itself, and they must not be registered twice.
func existing[C prometheus.Collector](c C) C {
	err := ctrlmetrics.Registry.Register(c)
	var taken prometheus.AlreadyRegisteredError
	if errors.As(err, &taken) {
		if same, ok := taken.ExistingCollector.(C); ok {
			return same
		}
	}
	return c
}
