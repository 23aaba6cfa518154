package helmtest_test

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/lint/support"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/backendslice/backendslice/test/controlplane"
	helmtest "github.com/backendslice/backendslice/test/helm"
)

// alertNames are the chart's alerts, in the order of the rule group.
var alertNames = []string{
	"BackendsliceBackendNotReady", "BackendsliceSourceStale", "BackendsliceProviderNotReady",
	"BackendsliceProbesFailingOpen", "BackendsliceReconcileErrors", "BackendsliceNoLeader",
}

// defaultRunbook is the runbook_url an empty prometheusRule.runbookURL
// gives: docs/runbook.md at the chart's release tag, not main, so that an
// alert links the runbook of the version that raised it.
func defaultRunbook(t *testing.T) string {
	t.Helper()
	ch, err := helmtest.Load()
	if err != nil {
		t.Fatal(err)
	}
	return "https://github.com/backendslice/backendslice/blob/v" + ch.Metadata.AppVersion + "/docs/runbook.md"
}

// promRule is a rule of the PrometheusRule, as the tests read it.
type promRule struct {
	Alert       string            `json:"alert"`
	Record      string            `json:"record"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

// promGroup is the PrometheusRule's one rule group.
type promGroup struct {
	Name     string     `json:"name"`
	Interval string     `json:"interval"`
	Rules    []promRule `json:"rules"`
}

// ruleOf renders the chart with values (YAML) and returns its one
// PrometheusRule and that rule's one group.
func ruleOf(t *testing.T, values string) (*unstructured.Unstructured, promGroup) {
	t.Helper()
	rules := ofKind(renderYAML(t, values), "PrometheusRule")
	if len(rules) != 1 {
		t.Fatalf("values %s: %d PrometheusRules, want 1", values, len(rules))
	}
	var spec struct {
		Groups []promGroup `json:"groups"`
	}
	m, _, _ := unstructured.NestedMap(rules[0].Object, "spec")
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &spec); err != nil {
		t.Fatal(err)
	}
	if len(spec.Groups) != 1 {
		t.Fatalf("%d rule groups, want 1", len(spec.Groups))
	}
	return rules[0], spec.Groups[0]
}

// TestPrometheusRuleDefaults: no PrometheusRule by default; enabled, one in
// the release namespace with the chart's labels, whose one group holds the
// six alerts with their default for and severity, each with a summary, a
// description and a runbook_url to its section of docs/runbook.md.
func TestPrometheusRuleDefaults(t *testing.T) {
	if n := len(ofKind(render(t, nil), "PrometheusRule")); n != 0 {
		t.Errorf("%d PrometheusRules rendered by default", n)
	}
	pr, g := ruleOf(t, "prometheusRule: {enabled: true}")
	if pr.GetAPIVersion() != "monitoring.coreos.com/v1" || pr.GetNamespace() != helmtest.Namespace ||
		pr.GetLabels()["app.kubernetes.io/instance"] != helmtest.ReleaseName || len(pr.GetAnnotations()) != 0 {
		t.Errorf("PrometheusRule %s %s/%s labels %v annotations %v", pr.GetAPIVersion(), pr.GetNamespace(), pr.GetName(), pr.GetLabels(), pr.GetAnnotations())
	}
	if g.Name != "backendslice" || g.Interval != "" {
		t.Errorf("group %q interval %q, want backendslice and Prometheus's interval", g.Name, g.Interval)
	}
	wantFor := map[string]string{
		"BackendsliceBackendNotReady": "15m", "BackendsliceSourceStale": "15m", "BackendsliceProviderNotReady": "10m",
		"BackendsliceProbesFailingOpen": "10m", "BackendsliceReconcileErrors": "15m", "BackendsliceNoLeader": "5m",
	}
	var names []string
	for _, r := range g.Rules {
		names = append(names, r.Alert)
		severity := "warning"
		if r.Alert == "BackendsliceNoLeader" {
			severity = "critical"
		}
		if r.For != wantFor[r.Alert] || !maps.Equal(r.Labels, map[string]string{"severity": severity}) {
			t.Errorf("%s: for %q labels %v, want for %s and severity %s alone", r.Alert, r.For, r.Labels, wantFor[r.Alert], severity)
		}
		if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
			t.Errorf("%s: annotations %v, want a summary and a description", r.Alert, r.Annotations)
		}
		if want := defaultRunbook(t) + "#" + strings.ToLower(r.Alert); r.Annotations["runbook_url"] != want {
			t.Errorf("%s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
		}
	}
	if !slices.Equal(names, alertNames) {
		t.Errorf("alerts %v, want %v", names, alertNames)
	}
	lintClean(t, map[string]any{"prometheusRule": map[string]any{"enabled": true}})
}

// TestPrometheusRuleValues: each value of prometheusRule lands where
// prometheus-operator and Alertmanager read it.
func TestPrometheusRuleValues(t *testing.T) {
	values := `prometheusRule:
  enabled: true
  namespace: monitoring
  labels: {release: kube-prometheus-stack}
  annotations: {owner: platform}
  alertLabels: {team: platform}
  runbookURL: https://wiki.example.com/backendslice/runbook
  interval: 1m
  alerts:
    sourceStale: {for: 1h, severity: critical}
    noLeader: {enabled: false}
    reconcileErrors: {ratio: 0.25}
  extraRules:
    - record: backendslice:stale_sources:sum
      expr: sum(backendslice_source_stale)`
	pr, g := ruleOf(t, values)
	if pr.GetNamespace() != "monitoring" || pr.GetLabels()["release"] != "kube-prometheus-stack" || pr.GetAnnotations()["owner"] != "platform" {
		t.Errorf("PrometheusRule %s/%s labels %v annotations %v", pr.GetNamespace(), pr.GetName(), pr.GetLabels(), pr.GetAnnotations())
	}
	if g.Interval != "1m" {
		t.Errorf("interval %q, want 1m", g.Interval)
	}
	byName := map[string]promRule{}
	for _, r := range g.Rules {
		byName[r.Alert+r.Record] = r
	}
	if _, ok := byName["BackendsliceNoLeader"]; ok {
		t.Error("BackendsliceNoLeader rendered with alerts.noLeader.enabled false")
	}
	if r := byName["BackendsliceSourceStale"]; r.For != "1h" || r.Labels["severity"] != "critical" {
		t.Errorf("BackendsliceSourceStale: for %q labels %v, want 1h and critical", r.For, r.Labels)
	}
	if r := byName["BackendsliceReconcileErrors"]; !strings.HasSuffix(strings.TrimSpace(r.Expr), "> 0.25") || !strings.Contains(r.Annotations["summary"], "25%") {
		t.Errorf("BackendsliceReconcileErrors: expr %q summary %q, want the ratio 0.25", r.Expr, r.Annotations["summary"])
	}
	for name, r := range byName {
		if r.Alert == "" {
			continue
		}
		if r.Labels["team"] != "platform" || r.Annotations["runbook_url"] != "https://wiki.example.com/backendslice/runbook#"+strings.ToLower(name) {
			t.Errorf("%s: labels %v runbook_url %q", name, r.Labels, r.Annotations["runbook_url"])
		}
	}
	if last := g.Rules[len(g.Rules)-1]; last.Record != "backendslice:stale_sources:sum" || last.Expr != "sum(backendslice_source_stale)" {
		t.Errorf("last rule %+v, want the extra recording rule", last)
	}
	var vals map[string]any
	if err := yaml.Unmarshal([]byte(values), &vals); err != nil {
		t.Fatal(err)
	}
	lintClean(t, vals)
}

// TestRunbookHasEveryAlert: docs/runbook.md has a section for each alert,
// whose anchor (as GitHub makes it from the heading) is the one the
// alert's runbook_url names, and no section for an alert the chart does
// not have.
func TestRunbookHasEveryAlert(t *testing.T) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "runbook.md"))
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	var documented []string
	for _, m := range regexp.MustCompile(`(?m)^##+ (.+)$`).FindAllStringSubmatch(string(doc), -1) {
		anchors[githubAnchor(m[1])] = true
		if strings.HasPrefix(m[1], "Backendslice") {
			documented = append(documented, m[1])
		}
	}
	_, g := ruleOf(t, "prometheusRule: {enabled: true}")
	for _, r := range g.Rules {
		_, anchor, _ := strings.Cut(r.Annotations["runbook_url"], "#")
		if !anchors[anchor] {
			t.Errorf("%s: docs/runbook.md has no section #%s", r.Alert, anchor)
		}
	}
	if !slices.Equal(documented, alertNames) {
		t.Errorf("docs/runbook.md documents %v, want the alerts %v in their order", documented, alertNames)
	}
}

// githubAnchor is the anchor GitHub gives a heading: lower case, spaces
// as dashes, punctuation dropped.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9'):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// lintClean fails when `helm lint` warns about the chart with values.
func lintClean(t *testing.T, values map[string]any) {
	t.Helper()
	msgs, err := helmtest.Lint(values)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if m.Severity >= support.WarningSev {
			t.Error(m.Error())
		}
	}
}
