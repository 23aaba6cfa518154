package plugins_test

import (
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/e2e/framework"
	"github.com/backendslice/backendslice/test/plugintest"
)

// example is one example plugin: how to start it on an inventory, the
// inventory with web's hosts in the states given, and its parameters.
type example struct {
	name string
	// start runs the plugin on file, listening at listen ("" for any port).
	start func(t *testing.T, file, listen string) *plugintest.Process
	// inventory is the plugin's file publishing to namespace ns three
	// hosts in the states given (serving, down, draining).
	inventory func(ns string, states ...string) string
	params    map[string]string
}

// examples are both example plugins.
var examples = []example{
	{
		name: "hostsfile", // Go, on the SDK
		start: func(t *testing.T, file, listen string) *plugintest.Process {
			return startHosts(t, file, listen)
		},
		inventory: func(ns string, states ...string) string {
			var b strings.Builder
			fmt.Fprintf(&b, "groups:\n  web:\n    namespaces: [%s]\n    hosts:\n", ns)
			for i, st := range states {
				fmt.Fprintf(&b, "      - {address: %s, zone: zone-%d, hostname: web-%d, state: %s}\n", webAddrs[i], i, i, st)
			}
			return b.String()
		},
		params: map[string]string{"group": "web"},
	},
	{
		name: "python", // no SDK, from the protocol document
		start: func(t *testing.T, file, listen string) *plugintest.Process {
			return startPython(t, file, listen)
		},
		inventory: func(ns string, states ...string) string {
			var eps []string
			for i, st := range states {
				eps = append(eps, fmt.Sprintf(`{"address": %q, "zone": "zone-%d", "hostname": "web-%d", "serving": %t, "terminating": %t}`,
					webAddrs[i], i, i, st != "down", st == "draining"))
			}
			return fmt.Sprintf(`{"services": {"web": {"namespaces": [%q], "endpoints": [%s]}}}`, ns, strings.Join(eps, ","))
		},
		params: map[string]string{"service": "web"},
	},
}

// webAddrs are the hosts of the web group.
var webAddrs = []string{"192.0.2.10", "192.0.2.11", "2001:db8::10"}

// TestExamplesPublishAndPush: each example plugin, a process of its own,
// publishes its hosts with their health, zone and hostname through a
// BackendProvider that is Ready, and a health flip in its inventory
// reaches the slice by push; the long-polls are the plugin's only
// requests once it answered.
func TestExamplesPublishAndPush(t *testing.T) {
	for _, ex := range examples {
		t.Run(ex.name, func(t *testing.T) {
			t.Parallel()
			ns := framework.Namespace(t)
			file := writeFile(t, "", ex.inventory(ns, "serving", "down", "draining"))
			p := ex.start(t, file, "")
			provider := "plugin-" + ns
			createProvider(t, provider, p.URL, []string{ns}, nil)
			xb := backend(ns, "web", provider, ex.params)
			framework.Create(t, xb)

			framework.WaitReady(t, xb)
			sl := framework.WaitStates(t, ns, xb.Name, framework.ServedOf(map[string]string{
				"192.0.2.10": "true/true/false", "192.0.2.11": "false/false/false", "2001:db8::10": "false/true/true"}))
			for _, s := range sl {
				for _, e := range s.Endpoints {
					if e.Zone == nil || !strings.HasPrefix(*e.Zone, "zone-") || e.Hostname == nil || !strings.HasPrefix(*e.Hostname, "web-") {
						t.Errorf("endpoint %v published without its zone or hostname: %+v", e.Addresses, e)
					}
				}
			}
			waitProvider(t, provider, metav1.ConditionTrue, v1alpha1.ReasonProviderReady)

			// The health flip: web-0 goes down, web-1 comes back.
			writeFile(t, file, ex.inventory(ns, "down", "serving", "draining"))
			framework.WaitStates(t, ns, xb.Name, framework.ServedOf(map[string]string{
				"192.0.2.10": "false/false/false", "192.0.2.11": "true/true/false", "2001:db8::10": "false/true/true"}))
		})
	}
}
