// Package metricstest reads what a Prometheus registry serves, for tests
// that check the series a controller exports: each series by its name and
// labels, as Prometheus would show it.
package metricstest

import (
	"fmt"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Series gathers g and returns the value of each counter and gauge series
// whose name starts with prefix, keyed as name{label="value",...} with
// the labels sorted by name.
func Series(g prometheus.Gatherer, prefix string) (map[string]float64, error) {
	fams, err := g.Gather()
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, f := range fams {
		if !strings.HasPrefix(f.GetName(), prefix) {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			slices.Sort(labels)
			out[f.GetName()+"{"+strings.Join(labels, ",")+"}"] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	return out, nil
}
