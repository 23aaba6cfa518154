package backendprovider

import (
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backendslice/backendslice/internal/seriesbook"
)

// Metrics are the BackendProvider status controller's Prometheus metrics,
// created and registered by NewMetrics.
type Metrics struct {
	conditions *prometheus.GaugeVec
	book       *seriesbook.Book
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{conditions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "backendslice_backendprovider_condition",
		Help: "The Ready condition of each BackendProvider: 1 when True, 0 otherwise, labelled with its reason; one series per provider.",
	}, []string{"name", "type", "reason"})}
	m.book = seriesbook.New(m.conditions.MetricVec)
	if err := reg.Register(m.conditions); err != nil {
		return nil, err
	}
	return m, nil
}

// condition exports provider name's condition c, replacing the series of
// its earlier reason. A nil Metrics exports nothing.
func (m *Metrics) condition(name string, c metav1.Condition) {
	if m == nil {
		return
	}
	l := []string{name, c.Type, c.Reason}
	v := 0.0
	if c.Status == metav1.ConditionTrue {
		v = 1
	}
	m.conditions.WithLabelValues(l...).Set(v)
	m.book.Keep(name, l)
}

// forget deletes the series of a provider that is gone.
func (m *Metrics) forget(name string) {
	if m != nil {
		m.book.Forget(name)
	}
}
