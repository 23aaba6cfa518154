package promrules_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	helmtest "github.com/backendslice/backendslice/test/helm"
	"github.com/backendslice/backendslice/test/promrules"
)

// TestDashboardMetricsAreExported runs the controller as the binary does,
// against a real API server (exportedBy), and checks every query of the
// chart's dashboard, as Prometheus parses it once Grafana has put in its
// variables: each metric it selects is exported (a histogram by its
// _bucket, _sum and _count series), with every label the query matches,
// groups by or shows in a legend; every label value it matches exactly
// has been seen. Every backendslice_ metric must be on the dashboard.
// Renaming a metric, a label, the controller or the leader election Lease
// fails this test.
func TestDashboardMetricsAreExported(t *testing.T) {
	_, d, err := helmtest.ReadDashboard()
	if err != nil {
		t.Fatal(err)
	}
	queries, err := dashboardQueries(d)
	if err != nil {
		t.Fatal(err)
	}
	exported := exportedBy(t, queries)
	used := map[string]bool{}
	for _, q := range queries {
		for _, err := range promrules.Check(q, exported) {
			t.Error(err)
		}
		for _, s := range q.Selectors {
			used[exported[s.Metric].Family] = true
		}
	}
	for name, s := range exported {
		if strings.HasPrefix(name, "backendslice_") && !used[s.Family] {
			t.Errorf("the controller exports %s, but no dashboard panel shows it", s.Family)
		}
	}
}

// legendLabel is a label a legend format shows: {{name}}.
var legendLabel = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)

// labelValues is the Grafana variable query label_values(selector, label).
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)$`)

// dashboardQueries reads every query of the panels and of the query
// variables, the dashboard's variables put in as Grafana does.
func dashboardQueries(d helmtest.Dashboard) ([]promrules.Query, error) {
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		if s, ok := v.Current.Value.(string); ok {
			vars[v.Name] = s
		}
	}
	var out []promrules.Query
	for _, p := range helmtest.AllPanels(d.Panels) {
		for _, tg := range p.Targets {
			where := fmt.Sprintf("panel %q query %s", p.Title, tg.RefID)
			expr, err := promrules.Interpolate(tg.Expr, vars)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", where, err)
			}
			q, err := promrules.ParseQuery(where, expr)
			if err != nil {
				return nil, err
			}
			for _, m := range legendLabel.FindAllStringSubmatch(tg.LegendFormat, -1) {
				q.Shown = append(q.Shown, m[1])
			}
			out = append(out, q)
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		where := "variable " + v.Name
		text, _ := v.Query.(string)
		if obj, ok := v.Query.(map[string]any); ok {
			text, _ = obj["query"].(string)
		}
		m := labelValues.FindStringSubmatch(strings.TrimSpace(text))
		if m == nil {
			return nil, fmt.Errorf("%s: %q is not label_values(metric, label)", where, text)
		}
		q, err := promrules.ParseQuery(where, m[1])
		if err != nil {
			return nil, err
		}
		q.Grouping = append(q.Grouping, m[2])
		out = append(out, q)
	}
	return out, nil
}
