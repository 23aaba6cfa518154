package promrules_test

import (
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"sigs.k8s.io/yaml"

	"github.com/backendslice/backendslice/api/v1alpha1"
	helmtest "github.com/backendslice/backendslice/test/helm"
	"github.com/backendslice/backendslice/test/promrules"
)

// The labels the scrape gives the controller's series (a ServiceMonitor's:
// the ExternalBackend's own namespace becomes exported_namespace), on the
// replica in Pod a and the one in Pod b that takes over from it.
const (
	podA = `namespace="backendslice-system", job="backendslice-metrics", pod="backendslice-6d4f-a", instance="10.0.0.1:8080"`
	podB = `namespace="backendslice-system", job="backendslice-metrics", pod="backendslice-6d4f-b", instance="10.0.0.2:8080"`
	// leaderOf is the leader election series of the chart's lease, on a
	// Pod's labels.
	leaderOf = `leader_election_master_status{name="backendslice-controller.backendslice.io", %s}`
)

// alertScenario is a history of the controller's series, sampled every
// minute for 100 minutes, and what one alert must make of it.
type alertScenario struct {
	name, alert string
	// series in promqltest's load syntax: `_` no sample, `stale` the
	// marker Prometheus writes when a series or its target goes away.
	series []string
	// leaderOwn: the scenario writes the leader election series itself;
	// otherwise Pod a leads throughout, so that BackendsliceNoLeader stays
	// quiet.
	leaderOwn bool
	// holdsFrom is when the alert's condition starts to hold (never: the
	// alert is never pending nor firing), and holdsUntil when it stops
	// (0: it holds to the end).
	holdsFrom, holdsUntil time.Duration
	// labels the alert must carry, beyond alertname and severity.
	labels map[string]string
}

// never is a holdsFrom of a condition that never holds.
const never = time.Duration(-1)

// alertScenarios are the scenarios of each of the chart's six alerts: its
// condition holding (with a handover between replicas, or a change of
// reason, that must not restart its `for`), and histories just below its
// threshold or shorter than its `for`. ratio is the reconcile error ratio
// the rules were rendered with.
func alertScenarios(ratio float64) []alertScenario {
	ready := func(reason string, pod string) string {
		return fmt.Sprintf(`backendslice_externalbackend_condition{exported_namespace="shop", name="db", type="Ready", reason=%q, %s}`, reason, pod)
	}
	probed := func(reason string) string {
		return fmt.Sprintf(`backendslice_externalbackend_condition{exported_namespace="shop", name="db", type="Probed", reason=%q, %s}`, reason, podA)
	}
	stale := fmt.Sprintf(`backendslice_source_stale{exported_namespace="shop", name="db", source="consul", kind="consul", %s}`, podA)
	provider := func(reason string) string {
		return fmt.Sprintf(`backendslice_backendprovider_condition{name="consul-eu", type="Ready", reason=%q, %s}`, reason, podA)
	}
	reconciles := func(result, pod string) string {
		return fmt.Sprintf(`backendslice_reconciles_total{result=%q, %s}`, result, pod)
	}
	// Reconciles a minute: a hundred, failing one percentage point above
	// and below the ratio.
	above, below := int(ratio*100+0.5)+1, int(ratio*100+0.5)-1
	backend := map[string]string{"exported_namespace": "shop", "name": "db", "type": "Ready"}
	probes := map[string]string{"exported_namespace": "shop", "name": "db", "type": "Probed"}
	lease := map[string]string{"name": "backendslice-controller.backendslice.io", "namespace": "backendslice-system"}
	return []alertScenario{
		{name: "a backend not Ready", alert: "BackendsliceBackendNotReady", series: []string{
			ready(v1alpha1.ReasonReady, podA) + " 1x5 stale",
			ready(v1alpha1.ReasonSourceFailed, podA) + " _x6 0x94",
		}, holdsFrom: 6 * time.Minute, labels: backend},
		{name: "its reason changes while not Ready", alert: "BackendsliceBackendNotReady", series: []string{
			ready(v1alpha1.ReasonReady, podA) + " 1x5 stale",
			ready(v1alpha1.ReasonSourceFailed, podA) + " _x6 0x5 stale",
			ready(v1alpha1.ReasonWriteFailed, podA) + " _x12 0x88",
		}, holdsFrom: 6 * time.Minute, labels: backend},
		{name: "a handover while not Ready", alert: "BackendsliceBackendNotReady", leaderOwn: true, series: []string{
			fmt.Sprintf(leaderOf, podA) + " 1x11 stale",
			fmt.Sprintf(leaderOf, podB) + " 0x11 1x88",
			ready(v1alpha1.ReasonReady, podA) + " 1x5 stale",
			ready(v1alpha1.ReasonSourceFailed, podA) + " _x6 0x5 stale",
			ready(v1alpha1.ReasonSourceFailed, podB) + " _x12 0x88",
		}, holdsFrom: 6 * time.Minute, labels: backend},
		{name: "a backend Ready", alert: "BackendsliceBackendNotReady", series: []string{
			ready(v1alpha1.ReasonReady, podA) + " 1x100",
		}, holdsFrom: never},
		{name: "a backend suspended", alert: "BackendsliceBackendNotReady", series: []string{
			ready(v1alpha1.ReasonSuspended, podA) + " 0x100",
		}, holdsFrom: never},
		{name: "a backend not Ready for 10 minutes", alert: "BackendsliceBackendNotReady", series: []string{
			ready(v1alpha1.ReasonSourceFailed, podA) + " 0x9 stale",
			ready(v1alpha1.ReasonReady, podA) + " _x10 1x90",
		}, holdsFrom: 0, holdsUntil: 10 * time.Minute, labels: backend},

		{name: "a source stale", alert: "BackendsliceSourceStale", series: []string{
			stale + " 0x5 1x94",
		}, holdsFrom: 6 * time.Minute, labels: map[string]string{"exported_namespace": "shop", "name": "db", "source": "consul", "kind": "consul"}},
		{name: "a source fresh", alert: "BackendsliceSourceStale", series: []string{
			stale + " 0x100",
		}, holdsFrom: never},
		{name: "a source stale for 10 minutes", alert: "BackendsliceSourceStale", series: []string{
			stale + " 0x5 1x9 0x85",
		}, holdsFrom: 6 * time.Minute, holdsUntil: 16 * time.Minute, labels: map[string]string{"exported_namespace": "shop", "name": "db", "source": "consul", "kind": "consul"}},

		{name: "a provider not Ready", alert: "BackendsliceProviderNotReady", series: []string{
			provider(v1alpha1.ReasonProviderReady) + " 1x5 stale",
			provider(v1alpha1.ReasonConnectionFailed) + " _x6 0x94",
		}, holdsFrom: 6 * time.Minute, labels: map[string]string{"name": "consul-eu", "type": "Ready"}},
		{name: "a provider Ready", alert: "BackendsliceProviderNotReady", series: []string{
			provider(v1alpha1.ReasonProviderReady) + " 1x100",
		}, holdsFrom: never},

		{name: "probes failing open", alert: "BackendsliceProbesFailingOpen", series: []string{
			probed(v1alpha1.ReasonProbesPassing) + " 1x5 stale",
			probed(v1alpha1.ReasonFailOpen) + " _x6 0x94",
		}, holdsFrom: 6 * time.Minute, labels: probes},
		{name: "a probe unavailable", alert: "BackendsliceProbesFailingOpen", series: []string{
			probed(v1alpha1.ReasonProbeUnavailable) + " 0x100",
		}, holdsFrom: 0, labels: probes},
		{name: "a probe port not allowed", alert: "BackendsliceProbesFailingOpen", series: []string{
			probed(v1alpha1.ReasonProbePortNotAllowed) + " 0x100",
		}, holdsFrom: 0, labels: probes},
		{name: "probes passing", alert: "BackendsliceProbesFailingOpen", series: []string{
			probed(v1alpha1.ReasonProbesPassing) + " 1x100",
		}, holdsFrom: never},
		// failOpen false: the probes take the failing endpoints out, as asked.
		{name: "probes failing closed", alert: "BackendsliceProbesFailingOpen", series: []string{
			probed(v1alpha1.ReasonProbesFailing) + " 0x100",
		}, holdsFrom: never},

		// rate needs two samples: the ratio is known from the first minute.
		{name: "reconciles failing above the ratio", alert: "BackendsliceReconcileErrors", series: []string{
			reconciles("error", podA) + fmt.Sprintf(" 0+%dx100", above),
			reconciles("success", podA) + fmt.Sprintf(" 0+%dx100", 100-above),
		}, holdsFrom: time.Minute, labels: map[string]string{"namespace": "backendslice-system"}},
		// The new leader's counters start at 0.
		{name: "reconciles failing above the ratio across a handover", alert: "BackendsliceReconcileErrors", leaderOwn: true, series: []string{
			fmt.Sprintf(leaderOf, podA) + " 1x11 stale",
			fmt.Sprintf(leaderOf, podB) + " 0x11 1x88",
			reconciles("error", podA) + fmt.Sprintf(" 0+%dx11 stale", above),
			reconciles("success", podA) + fmt.Sprintf(" 0+%dx11 stale", 100-above),
			reconciles("error", podB) + fmt.Sprintf(" _x12 0+%dx88", above),
			reconciles("success", podB) + fmt.Sprintf(" _x12 0+%dx88", 100-above),
		}, holdsFrom: time.Minute, labels: map[string]string{"namespace": "backendslice-system"}},
		{name: "reconciles failing below the ratio", alert: "BackendsliceReconcileErrors", series: []string{
			reconciles("error", podA) + fmt.Sprintf(" 0+%dx100", below),
			reconciles("success", podA) + fmt.Sprintf(" 0+%dx100", 100-below),
		}, holdsFrom: never},

		{name: "the leader steps down and none takes over", alert: "BackendsliceNoLeader", leaderOwn: true, series: []string{
			fmt.Sprintf(leaderOf, podA) + " 1x9 0x90",
		}, holdsFrom: 10 * time.Minute, labels: lease},
		{name: "no controller scraped", alert: "BackendsliceNoLeader", leaderOwn: true, series: []string{
			// A series of the alert's own namespace keeps promqltest's
			// storage from being empty.
			`up{job="backendslice-metrics", namespace="backendslice-system"} 0x100`,
		}, holdsFrom: 0, labels: lease},
		{name: "the leader's target goes away", alert: "BackendsliceNoLeader", leaderOwn: true, series: []string{
			fmt.Sprintf(leaderOf, podA) + " 1x9 stale",
		}, holdsFrom: 10 * time.Minute, labels: lease},
		{name: "only another release's controller leads", alert: "BackendsliceNoLeader", leaderOwn: true, series: []string{
			`leader_election_master_status{name="backendslice-controller.backendslice.io", namespace="other", pod="backendslice-x", instance="10.0.0.9:8080"} 1x100`,
		}, holdsFrom: 0, labels: lease},
		{name: "a handover", alert: "BackendsliceNoLeader", leaderOwn: true, series: []string{
			fmt.Sprintf(leaderOf, podA) + " 1x9 stale",
			fmt.Sprintf(leaderOf, podB) + " 0x9 1x90",
		}, holdsFrom: never},
	}
}

// TestAlertsFireAfterTheirFor runs the chart's rules, rendered with its
// defaults and with every value changed, through Prometheus's rule manager
// and PromQL engine over each scenario's series, and checks every
// evaluation for 100 minutes: the scenario's alert is pending from the
// first evaluation where its condition holds, fires exactly its rendered
// `for` later and not one evaluation sooner, carries the scenario's labels
// with its severity and without the replica's pod and instance; below its
// threshold, or for less than its `for`, it is never pending; and no other
// alert of the group is ever pending or firing.
func TestAlertsFireAfterTheirFor(t *testing.T) {
	for name, values := range ruleValues {
		t.Run(name, func(t *testing.T) {
			file := renderedRules(t, values)
			groups, errs := parseRules(file)
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			holds, severities := map[string]time.Duration{}, map[string]string{}
			for _, r := range groups.Groups[0].Rules {
				if r.Alert != "" {
					holds[r.Alert], severities[r.Alert] = time.Duration(r.For), r.Labels["severity"]
				}
			}
			ratio := renderedRatio(t, values)
			tested := map[string]bool{}
			for _, sc := range alertScenarios(ratio) {
				tested[sc.alert] = true
				t.Run(sc.name, func(t *testing.T) {
					hold, ok := holds[sc.alert]
					if !ok {
						t.Fatalf("the rules have no alert %s", sc.alert)
					}
					series := sc.series
					if !sc.leaderOwn {
						series = append([]string{fmt.Sprintf(leaderOf, podA) + " 1x100"}, series...)
					}
					evals, err := promrules.EvaluateRules(file, strings.Join(series, "\n"), time.Minute, time.Minute, 100*time.Minute)
					if err != nil {
						t.Fatal(err)
					}
					checkTimeline(t, sc, hold, severities[sc.alert], evals)
				})
			}
			for alert := range holds {
				if !tested[alert] && strings.HasPrefix(alert, "Backendslice") && alert != "BackendsliceManyStaleSources" {
					t.Errorf("no scenario of %s", alert)
				}
			}
		})
	}
}

// checkTimeline checks the evaluations of one scenario (see
// TestAlertsFireAfterTheirFor).
func checkTimeline(t *testing.T, sc alertScenario, hold time.Duration, severity string, evals []promrules.Evaluation) {
	t.Helper()
	fires := sc.holdsFrom + hold
	holds := func(at time.Duration) bool {
		return sc.holdsFrom != never && at >= sc.holdsFrom && (sc.holdsUntil == 0 || at < sc.holdsUntil)
	}
	firedAt, pendingAt := never, never
	for _, e := range evals {
		for alert, ls := range e.Pending {
			if alert != sc.alert {
				t.Errorf("at %s: %s is pending %v", e.At, alert, ls)
			}
		}
		for alert, ls := range e.Firing {
			if alert != sc.alert {
				t.Errorf("at %s: %s fires %v", e.At, alert, ls)
			}
		}
		pending, firing := e.Pending[sc.alert], e.Firing[sc.alert]
		if len(pending) > 0 && pendingAt == never {
			pendingAt = e.At
		}
		if len(firing) > 0 && firedAt == never {
			firedAt = e.At
		}
		switch {
		case !holds(e.At):
			if len(pending)+len(firing) > 0 {
				t.Errorf("at %s: pending %v, firing %v, want neither", e.At, pending, firing)
			}
		case e.At < fires:
			if len(pending) != 1 || len(firing) != 0 {
				t.Errorf("at %s (%s before its for of %s ends): pending %v, firing %v, want it pending", e.At, fires-e.At, hold, pending, firing)
			}
		default:
			if len(firing) != 1 || len(pending) != 0 {
				t.Errorf("at %s (its for of %s ended at %s): pending %v, firing %v, want it firing once", e.At, hold, fires, pending, firing)
				continue
			}
			checkLabels(t, e.At, firing[0], sc, severity)
		}
	}
	wantPending, wantFired := sc.holdsFrom, fires
	if sc.holdsFrom == never || hold == 0 {
		wantPending = never
	}
	if sc.holdsFrom == never || !holds(fires) {
		wantFired = never
	}
	if pendingAt != wantPending || firedAt != wantFired {
		t.Errorf("pending from %s and firing from %s, want %s and %s (-1ns: never)", pendingAt, firedAt, wantPending, wantFired)
	}
	if last := evals[len(evals)-1].At; wantFired != never && fires > last {
		t.Errorf("the scenario ends at %s, before the alert's for of %s ends: it cannot show it firing", last, hold)
	}
}

// checkLabels checks a firing alert's labels: the scenario's, its name,
// its severity, and none of a replica's.
func checkLabels(t *testing.T, at time.Duration, got labels.Labels, sc alertScenario, severity string) {
	t.Helper()
	want := maps.Clone(sc.labels)
	want["alertname"], want["severity"] = sc.alert, severity
	for k, v := range want {
		if got.Get(k) != v {
			t.Errorf("at %s: %s=%q, want %q (labels %s)", at, k, got.Get(k), v, got)
		}
	}
	for _, replica := range []string{"pod", "instance"} {
		if got.Has(replica) {
			t.Errorf("at %s: the alert carries the replica's %s (labels %s): a handover would restart its for", at, replica, got)
		}
	}
}

// renderedRatio is prometheusRule.alerts.reconcileErrors.ratio in values,
// else the chart's default.
func renderedRatio(t *testing.T, values string) float64 {
	t.Helper()
	var v struct {
		PrometheusRule struct {
			Alerts struct {
				ReconcileErrors struct {
					Ratio *float64 `json:"ratio"`
				} `json:"reconcileErrors"`
			} `json:"alerts"`
		} `json:"prometheusRule"`
	}
	if err := yaml.Unmarshal([]byte(values), &v); err != nil {
		t.Fatal(err)
	}
	if r := v.PrometheusRule.Alerts.ReconcileErrors.Ratio; r != nil {
		return *r
	}
	defaults, err := helmtest.ReadValues(chartValuesFile(t))
	if err != nil {
		t.Fatal(err)
	}
	alerts, _ := defaults["prometheusRule"].(map[string]any)["alerts"].(map[string]any)
	ratio, ok := alerts["reconcileErrors"].(map[string]any)["ratio"].(float64)
	if !ok {
		t.Fatalf("the chart's values have no prometheusRule.alerts.reconcileErrors.ratio")
	}
	return ratio
}

// chartValuesFile is the chart's values.yaml.
func chartValuesFile(t *testing.T) string {
	t.Helper()
	dir, err := helmtest.ChartDir()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "values.yaml")
}
