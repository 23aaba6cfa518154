package promrules_test

import (
	"io"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	helmtest "github.com/backendslice/backendslice/test/helm"
	"github.com/backendslice/backendslice/test/promrules"
)

// ruleValues are the values the rules are rendered with: the defaults,
// and every value changed (an extra recording rule among them).
var ruleValues = map[string]string{
	"defaults": "prometheusRule: {enabled: true}",
	"custom": `prometheusRule:
  enabled: true
  namespace: monitoring
  alertLabels: {team: platform}
  interval: 30s
  alerts:
    backendNotReady: {for: 1h, severity: critical}
    reconcileErrors: {ratio: 0.05}
  extraRules:
    - record: backendslice:stale_sources:sum
      expr: sum by (exported_namespace) (backendslice_source_stale)
    - alert: BackendsliceManyStaleSources
      expr: backendslice:stale_sources:sum > 10
      for: 30m
      labels: {severity: critical}
      annotations: {summary: "{{ $value }} stale sources in {{ $labels.exported_namespace }}"}`,
}

// renderedRules renders the chart with values (YAML) and returns its
// PrometheusRule's spec as a Prometheus rule file.
func renderedRules(t *testing.T, values string) []byte {
	t.Helper()
	var vals map[string]any
	if err := yaml.Unmarshal([]byte(values), &vals); err != nil {
		t.Fatal(err)
	}
	objs, err := helmtest.RenderObjects(vals)
	if err != nil {
		t.Fatal(err)
	}
	var spec map[string]any
	for _, o := range objs {
		if o.GetKind() == "PrometheusRule" {
			if spec != nil {
				t.Fatal("two PrometheusRules")
			}
			spec, _, _ = unstructured.NestedMap(o.Object, "spec")
		}
	}
	if spec == nil {
		t.Fatalf("values %s render no PrometheusRule", values)
	}
	file, err := yaml.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	return file
}

// parseRules parses a rule file as Prometheus loads one: unknown fields
// refused, each expr parsed, each label and annotation template parsed,
// names held to the classic character set.
func parseRules(file []byte) (*rulefmt.RuleGroups, []error) {
	return rulefmt.Parse(file, false, model.LegacyValidation, parser.NewParser(parser.Options{}), slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// TestRulesParse: the chart's rules, with its defaults and with every
// value changed, are a rule file Prometheus loads without an error, with
// the alerts, durations, labels and evaluation interval the values say;
// and the same parse refuses a rule that is not PromQL, a template that
// does not parse and a field Prometheus does not know.
func TestRulesParse(t *testing.T) {
	for name, values := range ruleValues {
		t.Run(name, func(t *testing.T) {
			groups, errs := parseRules(renderedRules(t, values))
			for _, err := range errs {
				t.Error(err)
			}
			if groups == nil || len(groups.Groups) != 1 {
				t.Fatalf("groups %+v, want one", groups)
			}
			g := groups.Groups[0]
			var alerts []string
			for _, r := range g.Rules {
				if r.Alert != "" {
					alerts = append(alerts, r.Alert)
				}
				if r.Alert != "" && (r.For <= 0 || r.Labels["severity"] == "" || r.Annotations["runbook_url"] == "" && strings.HasPrefix(r.Alert, "Backendslice") && r.Alert != "BackendsliceManyStaleSources") {
					t.Errorf("%s: for %s labels %v annotations %v", r.Alert, r.For, r.Labels, r.Annotations)
				}
			}
			if n := len(alerts); n < 6 || !slices.Contains(alerts, "BackendsliceNoLeader") {
				t.Errorf("alerts %v, want the chart's six", alerts)
			}
			if name == "custom" {
				if g.Interval.String() != "30s" || g.Rules[0].For.String() != "1h" || g.Rules[0].Labels["team"] != "platform" || len(g.Rules) != 8 {
					t.Errorf("group interval %s, first rule for %s labels %v, %d rules: not what the values say", g.Interval, g.Rules[0].For, g.Rules[0].Labels, len(g.Rules))
				}
			}
		})
	}
	for _, bad := range []struct{ rule, want string }{
		{"{alert: Broken, expr: 'sum(backendslice_source_stale'}", "unclosed left parenthesis"},
		{"{alert: Broken, expr: vector(1), annotations: {summary: '{{ $labels.name '}}", "annotation \"summary\""},
		{"{alert: Broken, expr: vector(1), keep_firing: 5m}", "keep_firing"},
	} {
		file := renderedRules(t, "prometheusRule: {enabled: true, extraRules: ["+bad.rule+"]}")
		_, errs := parseRules(file)
		if len(errs) == 0 || !strings.Contains(errorsText(errs), bad.want) {
			t.Errorf("extra rule %s: errors %v, want one saying %q", bad.rule, errs, bad.want)
		}
	}
}

// errorsText joins errs' messages.
func errorsText(errs []error) string {
	var b strings.Builder
	for _, err := range errs {
		b.WriteString(err.Error() + "\n")
	}
	return b.String()
}

// shownLabel is a label an alert's template reads: $labels.name.
var shownLabel = regexp.MustCompile(`\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)`)

// TestRulesMetricsAreExported checks each of the chart's alerts against
// what a running controller exports (exportedBy): every metric its
// expression reads, with the labels it matches (the values it matches
// exactly seen), aggregates by or its annotations show. A metric renamed,
// or a label dropped, in the controller fails it.
func TestRulesMetricsAreExported(t *testing.T) {
	groups, errs := parseRules(renderedRules(t, ruleValues["defaults"]))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	var queries []promrules.Query
	for _, r := range groups.Groups[0].Rules {
		q, err := promrules.ParseQuery("alert "+r.Alert, r.Expr)
		if err != nil {
			t.Fatal(err)
		}
		for _, text := range r.Annotations {
			for _, m := range shownLabel.FindAllStringSubmatch(text, -1) {
				q.Shown = append(q.Shown, m[1])
			}
		}
		queries = append(queries, q)
	}
	exported := exportedBy(t, queries)
	for _, q := range queries {
		for _, err := range promrules.Check(q, exported) {
			t.Error(err)
		}
	}
}
