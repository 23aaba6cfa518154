package promrules

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
)

// TargetLabels are the labels Prometheus gives every series of a target
// that the chart's ServiceMonitor scrapes (prometheus-operator's
// relabelling). A label the controller itself exports under one of these
// names is kept as exported_<name> (honor_labels is false):
// backendslice_endpoints's namespace, the ExternalBackend's, is
// exported_namespace then.
var TargetLabels = []string{"job", "instance", "namespace", "service", "pod", "container", "endpoint"}

// Series is a series name the controller exports: a metric, or a
// histogram's or summary's _bucket, _sum or _count.
type Series struct {
	// Family is the metric family the series belongs to.
	Family string
	// Labels are the labels the controller exports on it, each with the
	// values seen; nil values are not checked (le, quantile).
	Labels map[string]map[string]bool
}

// Has tells whether the series carries label once Prometheus scraped it.
func (s Series) Has(label string) bool {
	if slices.Contains(TargetLabels, label) {
		return true
	}
	if own, ok := strings.CutPrefix(label, "exported_"); ok && slices.Contains(TargetLabels, own) {
		_, exported := s.Labels[own]
		return exported
	}
	_, ok := s.Labels[label]
	return ok
}

// Seen tells whether the series was seen with label=value, for a label
// the controller exports; it says true for labels whose values it cannot
// tell (the target's, le).
func (s Series) Seen(label, value string) bool {
	if slices.Contains(TargetLabels, label) {
		return true
	}
	if own, ok := strings.CutPrefix(label, "exported_"); ok && slices.Contains(TargetLabels, own) {
		label = own
	}
	values := s.Labels[label]
	return values == nil || values[value]
}

// labelNames are the labels the controller exports on s, sorted.
func (s Series) labelNames() []string { return slices.Sorted(maps.Keys(s.Labels)) }

// Exported gathers what the controller's /metrics serves (its registries)
// by series name.
func Exported(g prometheus.Gatherer) (map[string]Series, error) {
	fams, err := g.Gather()
	if err != nil {
		return nil, err
	}
	out := map[string]Series{}
	for _, f := range fams {
		name := f.GetName()
		ls := map[string]map[string]bool{}
		histogram, summary := false, false
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if ls[l.GetName()] == nil {
					ls[l.GetName()] = map[string]bool{}
				}
				ls[l.GetName()][l.GetValue()] = true
			}
			histogram = histogram || m.GetHistogram() != nil
			summary = summary || m.GetSummary() != nil
		}
		switch {
		case histogram:
			// A classic histogram has no series of its bare name.
			out[name+"_bucket"] = Series{name, withLabel(ls, "le")}
			out[name+"_sum"] = Series{name, ls}
			out[name+"_count"] = Series{name, ls}
		case summary:
			out[name] = Series{name, withLabel(ls, "quantile")}
			out[name+"_sum"] = Series{name, ls}
			out[name+"_count"] = Series{name, ls}
		default:
			out[name] = Series{name, ls}
		}
	}
	return out, nil
}

// withLabel is labels plus one whose values are not checked.
func withLabel(ls map[string]map[string]bool, label string) map[string]map[string]bool {
	out := maps.Clone(ls)
	out[label] = nil
	return out
}

// Missing are the metrics queries select that exported lacks.
func Missing(queries []Query, exported map[string]Series) []string {
	var out []string
	for _, q := range queries {
		for _, s := range q.Selectors {
			if _, ok := exported[s.Metric]; !ok && !slices.Contains(out, s.Metric) {
				out = append(out, s.Metric)
			}
		}
	}
	return out
}

// Check checks one query against what the controller exports: each
// metric exists; each label a selector matches exists on it, with the
// value where it matches one exactly (a value holding a Grafana variable
// excepted); each label it groups by or shows exists on every metric of
// the query.
func Check(q Query, exported map[string]Series) []error {
	var errs []error
	if len(q.Selectors) == 0 {
		errs = append(errs, fmt.Errorf("%s selects no metric", q.Where))
	}
	checked := map[string]bool{}
	for _, sel := range q.Selectors {
		s, ok := exported[sel.Metric]
		if !ok {
			errs = append(errs, fmt.Errorf("%s: the controller exports no %s", q.Where, sel.Metric))
			continue
		}
		for _, m := range sel.Matchers {
			switch {
			case !s.Has(m.Name):
				errs = append(errs, fmt.Errorf("%s: %s has no label %s (it has %v)", q.Where, sel.Metric, m.Name, s.labelNames()))
			case m.Type == labels.MatchEqual && !strings.Contains(m.Value, "$") && !s.Seen(m.Name, m.Value):
				errs = append(errs, fmt.Errorf("%s: %s was never seen with %s=%q (values %v)", q.Where, sel.Metric, m.Name, m.Value, s.Labels[m.Name]))
			}
		}
		if checked[sel.Metric] {
			continue
		}
		checked[sel.Metric] = true
		for _, l := range slices.Compact(slices.Sorted(slices.Values(slices.Concat(q.Grouping, q.Shown)))) {
			if !s.Has(l) {
				errs = append(errs, fmt.Errorf("%s groups by or shows %s, which %s lacks (it has %v)", q.Where, l, sel.Metric, s.labelNames()))
			}
		}
	}
	return errs
}
