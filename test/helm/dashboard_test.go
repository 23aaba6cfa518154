package helmtest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zapcore"
	"helm.sh/helm/v3/pkg/lint/support"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/yaml"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/controllers"
	"github.com/backendslice/backendslice/controllers/externalbackend"
	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/providers/static"
	"github.com/backendslice/backendslice/test/controlplane"
	helmtest "github.com/backendslice/backendslice/test/helm"
)

// dashboardFile is the Grafana dashboard the chart ships, from the
// repository root.
const dashboardFile = "charts/backendslice/dashboards/backendslice.json"

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	UID           string  `json:"uid"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

// panel is a dashboard panel; a row keeps the panels it collapses in Panels.
type panel struct {
	ID         int            `json:"id"`
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Datasource *datasourceRef `json:"datasource"`
	Targets    []struct {
		RefID        string         `json:"refId"`
		Expr         string         `json:"expr"`
		LegendFormat string         `json:"legendFormat"`
		Datasource   *datasourceRef `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

// variable is a template variable. Grafana stores a query variable's query
// as a string or as an object with a query field.
type variable struct {
	Name       string         `json:"name"`
	Type       string         `json:"type"`
	Query      any            `json:"query"`
	Datasource *datasourceRef `json:"datasource"`
}

// datasourceRef names the data source of a panel, a query or a variable.
type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// readDashboard reads the dashboard the chart ships, as bytes and parsed.
func readDashboard(t *testing.T) ([]byte, dashboard) {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, dashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return data, d
}

// allPanels are the dashboard's panels, those collapsed in rows included.
func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// TestDashboardConfigMap checks that the dashboard ConfigMap is rendered
// only when dashboards.enabled, with the Grafana sidecar's label, the
// dashboard file unchanged as valid JSON, and the labels, annotations and
// namespace the values give, without a lint warning.
func TestDashboardConfigMap(t *testing.T) {
	if n := len(ofKind(render(t, nil), "ConfigMap")); n != 0 {
		t.Errorf("the defaults render %d ConfigMaps, want none", n)
	}
	cases := []struct {
		name   string
		values map[string]any
		want   metav1.ObjectMeta
	}{
		{"enabled", map[string]any{"dashboards": map[string]any{"enabled": true}}, metav1.ObjectMeta{
			Namespace: helmtest.Namespace,
			Labels:    map[string]string{"grafana_dashboard": "1"},
		}},
		{"custom", map[string]any{"dashboards": map[string]any{
			"enabled":     true,
			"namespace":   "monitoring",
			"labels":      map[string]any{"grafana_dashboard": nil, "team": "platform"},
			"annotations": map[string]any{"grafana_folder": "Platform"},
		}}, metav1.ObjectMeta{
			Namespace:   "monitoring",
			Labels:      map[string]string{"team": "platform"},
			Annotations: map[string]string{"grafana_folder": "Platform"},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var cm corev1.ConfigMap
			typed(t, render(t, c.values), "ConfigMap", &cm)
			checkDashboardConfigMap(t, &cm, c.want)
			msgs, err := helmtest.Lint(c.values)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range msgs {
				if m.Severity >= support.WarningSev {
					t.Error(m.Error())
				}
			}
		})
	}
}

// checkDashboardConfigMap checks that cm is in want's namespace, carries
// want's labels (the chart's own besides) and annotations (alone), and
// holds the dashboard file as backendslice.json.
func checkDashboardConfigMap(t *testing.T, cm *corev1.ConfigMap, want metav1.ObjectMeta) {
	t.Helper()
	if cm.Namespace != want.Namespace {
		t.Errorf("namespace %q, want %q", cm.Namespace, want.Namespace)
	}
	ours := maps.Clone(cm.Labels)
	maps.DeleteFunc(ours, func(k, _ string) bool { return strings.HasPrefix(k, "app.kubernetes.io/") || k == "helm.sh/chart" })
	if !maps.Equal(ours, want.Labels) {
		t.Errorf("labels %v, want %v besides the chart's", cm.Labels, want.Labels)
	}
	if !maps.Equal(cm.Annotations, want.Annotations) {
		t.Errorf("annotations %v, want %v", cm.Annotations, want.Annotations)
	}
	if keys := slices.Sorted(maps.Keys(cm.Data)); !slices.Equal(keys, []string{"backendslice.json"}) {
		t.Fatalf("data keys %v, want backendslice.json alone", keys)
	}
	file, _ := readDashboard(t)
	var got, wantJSON any
	if err := json.Unmarshal(file, &wantJSON); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(cm.Data["backendslice.json"]), &got); err != nil {
		t.Fatalf("backendslice.json is not valid JSON: %v", err)
	}
	if !reflect.DeepEqual(got, wantJSON) {
		t.Errorf("backendslice.json differs from %s", dashboardFile)
	}
}

// TestDashboardSchemaRejects checks that values.schema.json refuses wrong
// dashboards values, naming the field.
func TestDashboardSchemaRejects(t *testing.T) {
	ch := load(t)
	for _, bad := range []struct{ values, want string }{
		{"dashboards: {enable: true}", "enable"},
		{"dashboards: {enabled: true, namespace: Monitoring}", "/dashboards/namespace"},
		{"dashboards: {enabled: true, labels: {grafana_dashboard: 1}}", "/dashboards/labels/grafana_dashboard"},
	} {
		var vals map[string]any
		if err := yaml.Unmarshal([]byte(bad.values), &vals); err != nil {
			t.Fatal(err)
		}
		_, _, err := helmtest.Render(ch, vals)
		if err == nil || !strings.Contains(err.Error(), "values don't meet the specifications of the schema") || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("values %s: got %v, want a schema error naming %s", bad.values, err, bad.want)
		}
	}
}

// TestDashboardShape checks what Grafana needs to load the dashboard from
// the sidecar: a uid, the schema version, unique panel ids, and every panel
// and query on the ${datasource} variable, a Prometheus data source.
func TestDashboardShape(t *testing.T) {
	_, d := readDashboard(t)
	if d.UID == "" || d.SchemaVersion < 39 {
		t.Errorf("uid %q schemaVersion %d: want a uid and schema 39 or later", d.UID, d.SchemaVersion)
	}
	if !slices.ContainsFunc(d.Templating.List, func(v variable) bool {
		return v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus"
	}) {
		t.Error("no datasource variable of Prometheus data sources")
	}
	onVariable := func(ds *datasourceRef) bool { return ds != nil && ds.Type == "prometheus" && ds.UID == "${datasource}" }
	ids := map[int]string{}
	for _, p := range allPanels(d.Panels) {
		if other, ok := ids[p.ID]; ok {
			t.Errorf("panels %q and %q share id %d", other, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		if p.Type == "row" {
			continue
		}
		if !onVariable(p.Datasource) {
			t.Errorf("panel %q: data source %+v, want ${datasource}", p.Title, p.Datasource)
		}
		for _, tg := range p.Targets {
			if !onVariable(tg.Datasource) {
				t.Errorf("panel %q query %s: data source %+v, want ${datasource}", p.Title, tg.RefID, tg.Datasource)
			}
		}
	}
	for _, v := range d.Templating.List {
		if v.Type == "query" && !onVariable(v.Datasource) {
			t.Errorf("variable %s: data source %+v, want ${datasource}", v.Name, v.Datasource)
		}
	}
}

// TestDashboardMetricsAreExported runs the controller as the binary does,
// against a real API server, with leader election and one ExternalBackend
// published, and gathers the registries its /metrics endpoint serves. Every
// metric a dashboard query or variable selects must be among them (a
// histogram by its _bucket, _sum and _count series), with every label the
// query matches, groups by or shows in a legend; every label value it
// matches exactly must have been seen. Every backendslice_ metric must be on
// the dashboard. Renaming a metric, a label, the controller or the leader
// election Lease fails this test.
func TestDashboardMetricsAreExported(t *testing.T) {
	_, d := readDashboard(t)
	queries, err := dashboardQueries(d)
	if err != nil {
		t.Fatal(err)
	}
	exported := controllerMetrics(t, queries)
	used := map[string]bool{}
	for _, q := range queries {
		for _, err := range checkQuery(q, exported) {
			t.Error(err)
		}
		for _, s := range q.selectors {
			used[exported[s.metric].family] = true
		}
	}
	for name, s := range exported {
		if strings.HasPrefix(name, "backendslice_") && !used[s.family] {
			t.Errorf("the controller exports %s, but no dashboard panel shows it", s.family)
		}
	}
}

// TestPromQLScanner checks the reading of dashboard queries on the shapes
// the dashboard uses, and that it refuses what it cannot read.
func TestPromQLScanner(t *testing.T) {
	q, err := parsePromQL(`topk($topk, max by (exported_namespace, name) (m_a{namespace="$namespace", condition="ready", x=~"a\"b"}))` +
		` - ignoring(condition) group_left (pod) histogram_quantile(0.99, sum(rate(m_b_bucket[$__rate_interval] offset 5m)) without (le))` +
		` / on() vector(0) or ${v} * m_c > bool 1e-3`)
	if err != nil {
		t.Fatal(err)
	}
	want := promQuery{
		selectors: []selector{
			{"m_a", []matcher{{"namespace", "=", ""}, {"condition", "=", "ready"}, {"x", "=~", `a"b`}}},
			{"m_b_bucket", nil},
			{"m_c", nil},
		},
		grouping: []string{"exported_namespace", "name", "condition", "pod", "le"},
	}
	if !reflect.DeepEqual(q, want) {
		t.Errorf("got %+v\nwant %+v", q, want)
	}
	for _, bad := range []string{`{__name__="m"}`, `rat(m[5m])`, `m{a="b"`, `m{a=b}`, `sum by (a m)`, `m{a="b`} {
		if _, err := parsePromQL(bad); err == nil {
			t.Errorf("%s: read without error", bad)
		}
	}
}

// dashboardQuery is one PromQL query of the dashboard: what it selects and
// groups by, and the labels its legend shows.
type dashboardQuery struct {
	promQuery
	// where names the panel and query, or the variable.
	where  string
	legend []string
}

// legendLabel is a label a legend format shows: {{name}}.
var legendLabel = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)

// labelValues is the Grafana variable query label_values(selector, label).
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)$`)

// dashboardQueries reads every query of the panels and the query variables.
func dashboardQueries(d dashboard) ([]dashboardQuery, error) {
	var out []dashboardQuery
	for _, p := range allPanels(d.Panels) {
		for _, tg := range p.Targets {
			where := fmt.Sprintf("panel %q query %s", p.Title, tg.RefID)
			pq, err := parsePromQL(tg.Expr)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", where, err)
			}
			q := dashboardQuery{promQuery: pq, where: where}
			for _, m := range legendLabel.FindAllStringSubmatch(tg.LegendFormat, -1) {
				q.legend = append(q.legend, m[1])
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
		pq, err := parsePromQL(m[1])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		pq.grouping = append(pq.grouping, m[2])
		out = append(out, dashboardQuery{promQuery: pq, where: where})
	}
	return out, nil
}

// targetLabels are the labels Prometheus gives every series of a target
// that metrics.serviceMonitor scrapes (prometheus-operator's relabelling).
// A label the controller itself exports under one of these names is kept
// as exported_<name> (honor_labels is false): backendslice_endpoints's
// namespace, the ExternalBackend's, is exported_namespace on the dashboard.
var targetLabels = []string{"job", "instance", "namespace", "service", "pod", "container", "endpoint"}

// series is a series name the controller exports: a metric, or a
// histogram's or summary's _bucket, _sum or _count.
type series struct {
	// family is the metric family the series belongs to.
	family string
	// labels are the labels the controller exports on it, each with the
	// values seen; nil values are not checked (le).
	labels map[string]map[string]bool
}

// has tells whether the series carries label once Prometheus scraped it.
func (s series) has(label string) bool {
	if slices.Contains(targetLabels, label) {
		return true
	}
	if own, ok := strings.CutPrefix(label, "exported_"); ok && slices.Contains(targetLabels, own) {
		_, exported := s.labels[own]
		return exported
	}
	_, ok := s.labels[label]
	return ok
}

// seen tells whether the series was seen with label=value, for a label the
// controller exports; it says true for labels whose values it cannot tell.
func (s series) seen(label, value string) bool {
	if slices.Contains(targetLabels, label) {
		return true
	}
	if own, ok := strings.CutPrefix(label, "exported_"); ok && slices.Contains(targetLabels, own) {
		label = own
	}
	values := s.labels[label]
	return values == nil || values[value]
}

// checkQuery checks one query against what the controller exports: each
// metric exists; each label a selector matches exists on it, with the
// value where it matches one exactly; each label it groups by or shows
// exists on every metric of the query.
func checkQuery(q dashboardQuery, exported map[string]series) []error {
	var errs []error
	if len(q.selectors) == 0 {
		errs = append(errs, fmt.Errorf("%s selects no metric", q.where))
	}
	checked := map[string]bool{}
	for _, sel := range q.selectors {
		s, ok := exported[sel.metric]
		if !ok {
			errs = append(errs, fmt.Errorf("%s: the controller exports no %s", q.where, sel.metric))
			continue
		}
		for _, m := range sel.matchers {
			switch {
			case !s.has(m.label):
				errs = append(errs, fmt.Errorf("%s: %s has no label %s (it has %v)", q.where, sel.metric, m.label, labelNames(s)))
			case m.op == "=" && m.value != "" && !s.seen(m.label, m.value):
				errs = append(errs, fmt.Errorf("%s: %s was never seen with %s=%q (values %v)", q.where, sel.metric, m.label, m.value, s.labels[m.label]))
			}
		}
		if checked[sel.metric] {
			continue
		}
		checked[sel.metric] = true
		for _, l := range slices.Compact(slices.Sorted(slices.Values(slices.Concat(q.grouping, q.legend)))) {
			if !s.has(l) {
				errs = append(errs, fmt.Errorf("%s groups by or shows %s, which %s lacks (it has %v)", q.where, l, sel.metric, labelNames(s)))
			}
		}
	}
	return errs
}

// labelNames are the labels the controller exports on s, sorted.
func labelNames(s series) []string { return slices.Sorted(maps.Keys(s.labels)) }

// Where the controller of TestDashboardMetricsAreExported keeps its lease
// and its ExternalBackend.
const (
	leaseNamespace   = "backendslice-system"
	backendNamespace = "shop"
)

// controllerMetrics runs the controller until it has published an
// ExternalBackend and exports every series queries select (or a timeout
// passes), and returns what it exports by series name.
func controllerMetrics(t *testing.T, queries []dashboardQuery) map[string]series {
	t.Helper()
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	cp, err := controlplane.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Error(err)
		}
	})
	c, ours := startController(t, cp)
	xb := &v1alpha1.ExternalBackend{
		ObjectMeta: metav1.ObjectMeta{Namespace: backendNamespace, Name: "db"},
		Spec: v1alpha1.ExternalBackendSpec{
			Service: v1alpha1.ServiceSpec{Ports: []v1alpha1.ServicePort{{Name: "pg", Port: 5432}}},
			Sources: []v1alpha1.Source{{Name: "fixed", Static: &v1alpha1.StaticSource{Endpoints: []v1alpha1.StaticEndpoint{
				{Address: "192.0.2.10"}, {Address: "192.0.2.11", Health: v1alpha1.HealthUnhealthy},
			}}}},
			// Probed every second, through a dialer that refuses (see
			// startController), so that the probe metrics have series.
			Probe: &v1alpha1.Probe{TCP: &v1alpha1.TCPProbe{}, Period: &metav1.Duration{Duration: time.Second},
				Timeout: &metav1.Duration{Duration: 100 * time.Millisecond}},
		},
	}
	if err := c.Create(t.Context(), xb); err != nil {
		t.Fatal(err)
	}
	poll(t, "the ExternalBackend to be Ready", func() bool {
		got := &v1alpha1.ExternalBackend{}
		if err := c.Get(t.Context(), types.NamespacedName{Namespace: xb.Namespace, Name: xb.Name}, got); err != nil {
			t.Fatal(err)
		}
		cond := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
		return cond != nil && cond.Status == metav1.ConditionTrue && cond.ObservedGeneration == got.Generation
	})
	// The reconcile's own metrics are recorded as it returns, just after
	// the status write that made it Ready: wait for them too.
	var exported map[string]series
	var missing []string
	deadline := time.Now().Add(10 * time.Second)
	for {
		exported, err = gather(ours)
		if err != nil {
			t.Fatal(err)
		}
		missing = missingSeries(queries, exported)
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(missing) > 0 {
		t.Logf("the controller does not export %v after 10s", missing)
	}
	return exported
}

// startController starts the manager of the binary, with leader election
// and the static provider, on the control plane. It returns an
// administrator's client, and the registry of the controller's own metrics:
// the binary puts them in controller-runtime's registry, the test in a new
// one each run (a registry takes a metric once).
func startController(t *testing.T, cp *controlplane.ControlPlane) (client.Client, *prometheus.Registry) {
	t.Helper()
	scheme, err := controllers.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cp.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{leaseNamespace, backendNamespace} {
		if err := c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	reg, err := providers.NewRegistry(static.New())
	if err != nil {
		t.Fatal(err)
	}
	ours := prometheus.NewRegistry()
	mgr, err := controllers.NewManager(cp.Config, controllers.ManagerOptions{
		MetricsBindAddress:      "0",
		HealthProbeBindAddress:  "0",
		LeaderElection:          true,
		LeaderElectionNamespace: leaseNamespace,
		// No probe leaves the process: every connection is refused here.
		ProbeDial: func(context.Context, string, string) (net.Conn, error) {
			return nil, errors.New("the dashboard test opens no connection")
		},
		Config: externalbackend.Config{
			MaxEndpointsPerSlice: 100,
			DefaultDrainPeriod:   30 * time.Second,
			ResolveTimeout:       5 * time.Second,
			// Its backend's source names no BackendProvider.
			AllowSourcesWithoutProvider: true,
		},
		Providers:       reg,
		MetricsRegistry: ours,
		// -count=2 runs a second controller in this process.
		SkipNameValidation: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("controller: %v", err)
		}
	})
	return c, ours
}

// poll waits until ok, failing the test after 20 seconds.
func poll(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !ok(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// gather reads what the controller's /metrics serves: its own metrics
// (ours) and controller-runtime's registry (workqueue, REST client, leader
// election, process and Go runtime), by series name.
func gather(ours prometheus.Gatherer) (map[string]series, error) {
	fams, err := prometheus.Gatherers{ours, ctrlmetrics.Registry}.Gather()
	if err != nil {
		return nil, err
	}
	out := map[string]series{}
	for _, f := range fams {
		name := f.GetName()
		labels := map[string]map[string]bool{}
		histogram, summary := false, false
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] == nil {
					labels[l.GetName()] = map[string]bool{}
				}
				labels[l.GetName()][l.GetValue()] = true
			}
			histogram = histogram || m.GetHistogram() != nil
			summary = summary || m.GetSummary() != nil
		}
		switch {
		case histogram:
			// A classic histogram has no series of its bare name.
			out[name+"_bucket"] = series{name, withLabel(labels, "le")}
			out[name+"_sum"] = series{name, labels}
			out[name+"_count"] = series{name, labels}
		case summary:
			out[name] = series{name, withLabel(labels, "quantile")}
			out[name+"_sum"] = series{name, labels}
			out[name+"_count"] = series{name, labels}
		default:
			out[name] = series{name, labels}
		}
	}
	return out, nil
}

// withLabel is labels plus one whose values are not checked.
func withLabel(labels map[string]map[string]bool, label string) map[string]map[string]bool {
	out := maps.Clone(labels)
	out[label] = nil
	return out
}

// missingSeries are the series queries select that exported lacks.
func missingSeries(queries []dashboardQuery, exported map[string]series) []string {
	var out []string
	for _, q := range queries {
		for _, s := range q.selectors {
			if _, ok := exported[s.metric]; !ok && !slices.Contains(out, s.metric) {
				out = append(out, s.metric)
			}
		}
	}
	return out
}

// promQuery is what a PromQL expression asks of the metrics: the series it
// selects, and the labels it groups or matches by (by, without, on,
// ignoring, group_left, group_right).
type promQuery struct {
	selectors []selector
	grouping  []string
}

// selector is one series selector: a metric name and its label matchers.
type selector struct {
	metric   string
	matchers []matcher
}

// matcher is one label matcher; value is empty where it holds a Grafana
// variable.
type matcher struct{ label, op, value string }

// PromQL words that are not metric names.
var (
	// groupingWords take a list of labels in parentheses.
	groupingWords = wordSet("by without on ignoring group_left group_right")
	// otherWords are operators and modifiers.
	otherWords = wordSet("and or unless bool offset atan2 inf nan")
	// functions are PromQL's functions and aggregation operators. An
	// unknown word before a parenthesis is an error, so that a metric is
	// never taken for a function.
	functions = wordSet(`sum avg min max count group stddev stdvar topk bottomk quantile count_values limitk limit_ratio
		abs absent absent_over_time acos acosh asin asinh atan atanh avg_over_time ceil changes clamp clamp_max clamp_min
		cos cosh count_over_time day_of_month day_of_week day_of_year days_in_month deg delta deriv
		double_exponential_smoothing exp floor histogram_avg histogram_count histogram_fraction histogram_quantile
		histogram_stddev histogram_stdvar histogram_sum holt_winters hour idelta increase irate label_join label_replace
		last_over_time ln log10 log2 mad_over_time max_over_time min_over_time minute month pi predict_linear
		present_over_time quantile_over_time rad rate resets round scalar sgn sin sinh sort sort_by_label
		sort_by_label_desc sort_desc sqrt stddev_over_time stdvar_over_time sum_over_time tan tanh time timestamp
		vector year start end`)
)

// wordSet is the set of the space-separated words of s.
func wordSet(s string) map[string]bool {
	out := map[string]bool{}
	for _, w := range strings.Fields(s) {
		out[w] = true
	}
	return out
}

// promScanner reads a PromQL expression, with Grafana's $variables, far
// enough to find its selectors and grouping labels: strings, numbers,
// durations, ranges and variables are skipped; a word is a function, a
// keyword or a metric name.
type promScanner struct {
	s   string
	i   int
	out promQuery
}

// parsePromQL reads expr.
func parsePromQL(expr string) (promQuery, error) {
	p := &promScanner{s: expr}
	for p.skipSpace(); p.i < len(p.s); p.skipSpace() {
		if err := p.token(); err != nil {
			return promQuery{}, fmt.Errorf("%w at offset %d of %s", err, p.i, expr)
		}
	}
	return p.out, nil
}

// token reads one token.
func (p *promScanner) token() error {
	switch c := p.s[p.i]; {
	case c == '"' || c == '\'' || c == '`':
		_, err := p.str()
		return err
	case c == '$':
		return p.variable()
	case c == '[': // a range, a subquery's range or a [[variable]]
		return p.skipPast(']')
	case c == '{':
		return errors.New("a selector without a metric name")
	case isDigit(c) || c == '.':
		p.read(func(c byte) bool { return isWordChar(c) || c == '.' })
		return nil
	case isWordStart(c):
		return p.word()
	}
	p.i++ // an operator, a parenthesis or a comma
	return nil
}

// word reads a function, a keyword or a selector.
func (p *promScanner) word() error {
	w := p.read(isWordChar)
	p.skipSpace()
	switch {
	case groupingWords[w]:
		if p.peek() != '(' {
			return nil // group_left without labels
		}
		labels, err := p.labelList()
		p.out.grouping = append(p.out.grouping, labels...)
		return err
	case otherWords[w], functions[w]:
		return nil
	case p.peek() == '(':
		return fmt.Errorf("unknown function %s", w)
	}
	sel := selector{metric: w}
	if p.peek() == '{' {
		ms, err := p.matchers()
		if err != nil {
			return err
		}
		sel.matchers = ms
	}
	p.out.selectors = append(p.out.selectors, sel)
	return nil
}

// labelList reads (label, ...).
func (p *promScanner) labelList() ([]string, error) {
	var labels []string
	p.i++ // (
	for p.skipSpace(); p.peek() != ')'; p.skipSpace() {
		l := p.read(isWordChar)
		if l == "" {
			return nil, errors.New("a label list with something else than labels")
		}
		labels = append(labels, l)
		switch p.skipSpace(); p.peek() {
		case ',':
			p.i++
		case ')':
		default:
			return nil, errors.New("labels not separated by commas or closed")
		}
	}
	p.i++ // )
	return labels, nil
}

// matchers reads {label op "value", ...}.
func (p *promScanner) matchers() ([]matcher, error) {
	var ms []matcher
	p.i++ // {
	for p.skipSpace(); p.peek() != '}'; p.skipSpace() {
		m := matcher{label: p.read(isWordChar)}
		p.skipSpace()
		m.op = p.read(func(c byte) bool { return c == '=' || c == '!' || c == '~' })
		if m.label == "" || !slices.Contains([]string{"=", "!=", "=~", "!~"}, m.op) {
			return nil, errors.New("a label matcher that is not label op value")
		}
		p.skipSpace()
		v, err := p.str()
		if err != nil {
			return nil, err
		}
		if !strings.Contains(v, "$") {
			m.value = v
		}
		ms = append(ms, m)
		switch p.skipSpace(); p.peek() {
		case ',':
			p.i++
		case '}':
		default:
			return nil, errors.New("matchers not separated by commas or closed")
		}
	}
	p.i++ // }
	return ms, nil
}

// str reads a quoted string and returns its text, escapes resolved.
func (p *promScanner) str() (string, error) {
	if p.i >= len(p.s) || !strings.ContainsRune("\"'`", rune(p.s[p.i])) {
		return "", errors.New("a quoted string expected")
	}
	quote := p.s[p.i]
	var b strings.Builder
	for p.i++; p.i < len(p.s); p.i++ {
		switch c := p.s[p.i]; {
		case c == quote:
			p.i++
			return b.String(), nil
		case c == '\\' && quote != '`' && p.i+1 < len(p.s):
			p.i++
			b.WriteByte(p.s[p.i])
		default:
			b.WriteByte(c)
		}
	}
	return "", errors.New("an unterminated string")
}

// variable skips a Grafana variable: $name or ${name...}.
func (p *promScanner) variable() error {
	p.i++ // $
	if p.peek() == '{' {
		return p.skipPast('}')
	}
	p.read(isWordChar)
	return nil
}

// skipPast skips past the next c.
func (p *promScanner) skipPast(c byte) error {
	n := strings.IndexByte(p.s[p.i:], c)
	if n < 0 {
		return fmt.Errorf("no closing %c", c)
	}
	p.i += n + 1
	return nil
}

// read reads the bytes that ok accepts.
func (p *promScanner) read(ok func(byte) bool) string {
	start := p.i
	for p.i < len(p.s) && ok(p.s[p.i]) {
		p.i++
	}
	return p.s[start:p.i]
}

// skipSpace skips white space.
func (p *promScanner) skipSpace() {
	p.read(func(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' })
}

// peek is the next byte, or 0 at the end.
func (p *promScanner) peek() byte {
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

func isDigit(c byte) bool     { return c >= '0' && c <= '9' }
func isWordStart(c byte) bool { return c == '_' || c == ':' || (c|0x20 >= 'a' && c|0x20 <= 'z') }
func isWordChar(c byte) bool  { return isWordStart(c) || isDigit(c) }
