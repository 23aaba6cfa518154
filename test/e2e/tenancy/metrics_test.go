package tenancy_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/consultest"
	"github.com/backendslice/backendslice/test/dnstest"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// metric is the sum of the controller's series of name whose labels
// include match, and how many there are.
func metric(t *testing.T, name string, match map[string]string) (float64, int) {
	t.Helper()
	return framework.MetricValue(t, name, match)
}

// waitMetric waits until the sum of name's series matching match is
// want, and that there is exactly one such series (none when gone).
func waitMetric(t *testing.T, name string, match map[string]string, want float64, gone bool) {
	t.Helper()
	framework.Eventually(t, checkBound+5*time.Second, fmt.Sprintf("%s%v", name, match), func() error {
		v, n := metric(t, name, match)
		switch {
		case gone && n != 0:
			return fmt.Errorf("%d series left, value %v", n, v)
		case !gone && (n != 1 || v != want):
			return fmt.Errorf("%d series, value %v; want one of %v", n, v, want)
		}
		return nil
	})
}

// TestAlertMetricsFollowTheProviders checks, on the real API server, that
// the series the chart's alerts read move with what they describe. A
// backend through a DNS BackendProvider is polled: its source's last
// success time advances; once the resolver stops, the source is stale,
// its time stops (checked twice over several refresh periods), the
// backend's Ready series says SourceFailed, the provider's Ready series
// ConnectionFailed, and resolves and checks through it count transient
// errors; with the resolver back, all return. A backend through a Consul
// BackendProvider whose agent is stopped counts errors the same way, and
// its stale source and the provider's Ready recover when the agent is
// started again. A backend deleted, and a provider deleted, leave no
// series.
func TestAlertMetricsFollowTheProviders(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "alert-metrics", nil)

	server, err := dnstest.New(zone)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = server.Stop() })
	name := "web-" + ns + "." + zone
	setAddrs(server, name, "198.51.100.131")
	dnsBP := uniqueName(ns, "dns")
	createProvider(t, dnsBP, admits("", ns), dnsSpec(server.Addr))

	agent := consultest.Run(t, consultest.Config{Node: "metrics-agent"})
	service := "db-" + ns
	must(t, agent.Register(consultest.Service{ID: service + "-1", Name: service, Address: "192.0.2.131"}))
	secret := uniqueName(ns, "token")
	putSecret(t, secret, "token", "any-token")
	consulBP := uniqueName(ns, "consul")
	createProvider(t, consulBP, admits("", ns), consulSpec(agent.Addr, "", secret))

	web := backend(ns, "web", drainHour, dnsSource(dnsBP, name))
	db := backend(ns, "db", drainHour, consulSource(consulBP, service))
	framework.Create(t, web)
	framework.Create(t, db)
	framework.WaitReady(t, web)
	framework.WaitReady(t, db)

	cond := func(backend, typ, reason string) map[string]string {
		return map[string]string{"namespace": ns, "name": backend, "type": typ, "reason": reason}
	}
	source := func(backend, src, kind string) map[string]string {
		return map[string]string{"namespace": ns, "name": backend, "source": src, "kind": kind}
	}
	provider := func(name, reason string) map[string]string {
		return map[string]string{"name": name, "type": v1alpha1.ConditionReady, "reason": reason}
	}
	calls := func(provider, call, outcome string) float64 {
		v, _ := metric(t, "backendslice_provider_calls_total", map[string]string{"provider": provider, "call": call, "outcome": outcome})
		return v
	}
	const (
		stale       = "backendslice_source_stale"
		lastSuccess = "backendslice_source_last_success_timestamp_seconds"
		xbCondition = "backendslice_externalbackend_condition"
		bpCondition = "backendslice_backendprovider_condition"
	)
	webSource, dbSource := source("web", web.Spec.Sources[0].Name, "dns"), source("db", db.Spec.Sources[0].Name, "consul")

	// Healthy: Ready series, nothing stale, successful calls.
	for _, b := range []string{"web", "db"} {
		waitMetric(t, xbCondition, cond(b, v1alpha1.ConditionReady, v1alpha1.ReasonReady), 1, false)
	}
	waitMetric(t, stale, webSource, 0, false)
	waitMetric(t, stale, dbSource, 0, false)
	for _, bp := range []string{dnsBP, consulBP} {
		waitMetric(t, bpCondition, provider(bp, v1alpha1.ReasonProviderReady), 1, false)
		framework.Eventually(t, checkBound, "successful resolves and checks of "+bp, func() error {
			if r, c := calls(bp, "resolve", "success"), calls(bp, "check", "success"); r == 0 || c == 0 {
				return fmt.Errorf("%v resolves and %v checks succeeded", r, c)
			}
			return nil
		})
	}
	// A polled source's time moves while it answers (its TTL is 1s).
	first, _ := metric(t, lastSuccess, webSource)
	framework.Eventually(t, 10*time.Second, "the dns source's last success to advance", func() error {
		if v, _ := metric(t, lastSuccess, webSource); v <= first {
			return fmt.Errorf("still %v", v)
		}
		return nil
	})

	// The resolver stops.
	errsBefore := calls(dnsBP, "resolve", "transient")
	must(t, server.Stop())
	waitMetric(t, stale, webSource, 1, false)
	waitMetric(t, xbCondition, cond("web", v1alpha1.ConditionReady, v1alpha1.ReasonSourceFailed), 0, false)
	waitMetric(t, xbCondition, cond("web", v1alpha1.ConditionReady, v1alpha1.ReasonReady), 0, true)
	waitMetric(t, bpCondition, provider(dnsBP, v1alpha1.ReasonConnectionFailed), 0, false)
	waitMetric(t, bpCondition, provider(dnsBP, v1alpha1.ReasonProviderReady), 0, true)
	stopped, _ := metric(t, lastSuccess, webSource)
	time.Sleep(3 * time.Second)
	if v, _ := metric(t, lastSuccess, webSource); v != stopped {
		t.Errorf("the stale dns source's last success moved from %v to %v while its resolver was stopped", stopped, v)
	}
	if after := calls(dnsBP, "resolve", "transient"); after <= errsBefore {
		t.Errorf("resolves through %s with its resolver stopped: %v transient errors, %v before", dnsBP, after, errsBefore)
	}
	if n := calls(dnsBP, "check", "transient"); n == 0 {
		t.Errorf("no failed check of %s counted with its resolver stopped", dnsBP)
	}
	t.Logf("dns source stale, its last success held at %s", time.Unix(int64(stopped), 0).UTC().Format(time.RFC3339))

	must(t, server.Restart())
	waitMetric(t, stale, webSource, 0, false)
	waitMetric(t, xbCondition, cond("web", v1alpha1.ConditionReady, v1alpha1.ReasonReady), 1, false)
	waitMetric(t, bpCondition, provider(dnsBP, v1alpha1.ReasonProviderReady), 1, false)
	if v, _ := metric(t, lastSuccess, webSource); v <= stopped {
		t.Errorf("the dns source answers again, but its last success is still %v", v)
	}

	// The Consul agent stops.
	resolveErrs, checkErrs := calls(consulBP, "resolve", "transient"), calls(consulBP, "check", "transient")
	must(t, agent.Stop())
	waitMetric(t, stale, dbSource, 1, false)
	waitMetric(t, bpCondition, provider(consulBP, v1alpha1.ReasonConnectionFailed), 0, false)
	framework.Eventually(t, checkBound, "failed resolves and checks through "+consulBP, func() error {
		if r, c := calls(consulBP, "resolve", "transient"), calls(consulBP, "check", "transient"); r <= resolveErrs || c <= checkErrs {
			return fmt.Errorf("%v resolve and %v check errors, from %v and %v", r, c, resolveErrs, checkErrs)
		}
		return nil
	})
	must(t, agent.Restart())
	must(t, agent.Register(consultest.Service{ID: service + "-1", Name: service, Address: "192.0.2.131"}))
	waitMetric(t, stale, dbSource, 0, false)
	waitMetric(t, bpCondition, provider(consulBP, v1alpha1.ReasonProviderReady), 1, false)

	// Gone objects leave no series.
	if err := k8s.Delete(ctx, web); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{xbCondition, stale, lastSuccess} {
		waitMetric(t, name, map[string]string{"namespace": ns, "name": "web"}, 0, true)
	}
	deleteProvider(t, dnsBP)
	waitMetric(t, bpCondition, map[string]string{"name": dnsBP}, 0, true)
	if _, n := metric(t, stale, dbSource); n != 1 {
		t.Errorf("backend db has %d stale series after another backend went, want 1", n)
	}
}
