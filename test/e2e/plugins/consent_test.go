package plugins_test

import (
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// TestConsentBeforeExistence runs the hostsfile plugin as a process: a
// group that does not list the namespace and one that does not exist are
// refused alike (AccessDenied, the same words), so that a tenant learns
// nothing of what exists; a group the namespace was admitted to, taken out
// of the file, is BackendNotFound and its endpoints drain. The plugin
// metrics count the long-polls held, the refused sources and the requests
// by outcome, by BackendProvider.
func TestConsentBeforeExistence(t *testing.T) {
	t.Parallel()
	ns := framework.Namespace(t)
	hosts := func(withWeb bool) string {
		var b strings.Builder
		b.WriteString("groups:\n  private:\n    namespaces: [elsewhere]\n    hosts:\n      - {address: 192.0.2.71}\n")
		if withWeb {
			fmt.Fprintf(&b, "  web:\n    namespaces: [%s]\n    hosts:\n      - {address: 192.0.2.70}\n", ns)
		}
		return b.String()
	}
	file := writeFile(t, "", hosts(true))
	p := startHosts(t, file, "")
	provider := "plugin-" + ns
	createProvider(t, provider, p.URL, []string{ns}, nil)
	web := backend(ns, "web", provider, map[string]string{"group": "web"})
	private := backend(ns, "private", provider, map[string]string{"group": "private"})
	missing := backend(ns, "missing", provider, map[string]string{"group": "missing"})
	for _, xb := range []*v1alpha1.ExternalBackend{web, private, missing} {
		framework.Create(t, xb)
	}
	framework.WaitAddresses(t, ns, web.Name, "192.0.2.70")
	var said []string
	for _, xb := range []*v1alpha1.ExternalBackend{private, missing} {
		framework.WaitCondition(t, xb, v1alpha1.ConditionResolved, metav1.ConditionFalse, v1alpha1.ReasonAccessDenied)
		e := sourceError(t, xb)
		if !strings.Contains(e, "is not published to namespace "+ns) {
			t.Errorf("%s: source error %q, want the plugin's refusal", xb.Name, e)
		}
		said = append(said, strings.ReplaceAll(e, `"`+xb.Name+`"`, `"GROUP"`))
	}
	if strings.ReplaceAll(said[0], "private", "GROUP") != strings.ReplaceAll(said[1], "missing", "GROUP") {
		t.Errorf("a group of another namespace and a missing group are refused in other words:\n%s\n%s", said[0], said[1])
	}

	framework.Eventually(t, framework.Timeout, "the plugin metrics", func() error {
		if n, _ := framework.MetricValue(t, "backendslice_plugin_long_polls", map[string]string{"provider": provider}); n != 1 {
			return errorf("%v long-polls held, want 1 (the web backend's)", n)
		}
		if n, _ := framework.MetricValue(t, "backendslice_plugin_refused_sources", map[string]string{"provider": provider}); n != 2 {
			return errorf("%v refused sources, want 2", n)
		}
		if n, _ := framework.MetricValue(t, "backendslice_plugin_requests_total",
			map[string]string{"provider": provider, "operation": "resolve", "outcome": "forbidden"}); n < 2 {
			return errorf("%v forbidden resolves, want at least 2", n)
		}
		if n, _ := framework.MetricValue(t, "backendslice_plugin_requests_total", map[string]string{"provider": provider, "outcome": "not_found"}); n != 0 {
			return errorf("%v not_found answers, want none", n)
		}
		return nil
	})

	// The web group goes: the namespace it listed learns it is gone.
	writeFile(t, file, hosts(false))
	framework.WaitCondition(t, web, v1alpha1.ConditionResolved, metav1.ConditionFalse, v1alpha1.ReasonBackendNotFound)
	framework.WaitAddresses(t, ns, web.Name)
	if n, _ := framework.MetricValue(t, "backendslice_plugin_requests_total", map[string]string{"provider": provider, "outcome": "not_found"}); n < 1 {
		t.Errorf("%v not_found answers counted, want at least 1", n)
	}
}
