package helmtest_test

import (
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/lint/support"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	helmtest "github.com/backendslice/backendslice/test/helm"
)

// The queries of the dashboard are checked against what the controller
// exports in test/promrules, with Prometheus's own PromQL parser.

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
	file, _, err := helmtest.ReadDashboard()
	if err != nil {
		t.Fatal(err)
	}
	var got, wantJSON any
	if err := json.Unmarshal(file, &wantJSON); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(cm.Data["backendslice.json"]), &got); err != nil {
		t.Fatalf("backendslice.json is not valid JSON: %v", err)
	}
	if !reflect.DeepEqual(got, wantJSON) {
		t.Errorf("backendslice.json differs from %s", helmtest.DashboardFile)
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
	_, d, err := helmtest.ReadDashboard()
	if err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || d.SchemaVersion < 39 {
		t.Errorf("uid %q schemaVersion %d: want a uid and schema 39 or later", d.UID, d.SchemaVersion)
	}
	if !slices.ContainsFunc(d.Templating.List, func(v helmtest.Variable) bool {
		return v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus"
	}) {
		t.Error("no datasource variable of Prometheus data sources")
	}
	onVariable := func(ds *helmtest.DatasourceRef) bool {
		return ds != nil && ds.Type == "prometheus" && ds.UID == "${datasource}"
	}
	ids := map[int]string{}
	for _, p := range helmtest.AllPanels(d.Panels) {
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
