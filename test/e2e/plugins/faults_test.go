package plugins_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// TestPluginDiesAndControllerRestarts: a plugin that dies keeps the
// endpoints it published (SourceFailed, as a failing Consul does); a
// controller restarted while the plugin is down still publishes them; the
// plugin back on its port publishes again, and its changes reach the
// slice. Not parallel: it restarts the controller.
func TestPluginDiesAndControllerRestarts(t *testing.T) {
	for _, ex := range examples {
		t.Run(ex.name, func(t *testing.T) {
			ns := framework.Namespace(t)
			file := writeFile(t, "", ex.inventory(ns, "serving", "serving", "serving"))
			p := ex.start(t, file, "")
			provider := "plugin-" + ns
			createProvider(t, provider, p.URL, []string{ns}, nil)
			xb := backend(ns, "web", provider, ex.params)
			framework.Create(t, xb)
			all := framework.Served(webAddrs...)
			framework.WaitAddresses(t, ns, xb.Name, all...)

			p.Kill()
			framework.WaitCondition(t, xb, v1alpha1.ConditionResolved, metav1.ConditionFalse, v1alpha1.ReasonSourceFailed)
			framework.WaitAddresses(t, ns, xb.Name, all...)

			framework.RestartController(t)
			// The new controller has asked the dead plugin, and holds
			// what the slices publish.
			framework.Eventually(t, framework.Timeout, "the restarted controller reports the dead plugin", func() error {
				if e := sourceError(t, xb); !strings.Contains(e, "connection refused") {
					return errorf("source error %q", e)
				}
				return nil
			})
			framework.WaitAddresses(t, ns, xb.Name, all...)

			// Back on its port, with a change.
			writeFile(t, file, ex.inventory(ns, "serving", "down", "serving"))
			ex.start(t, file, p.Addr)
			framework.WaitReady(t, xb)
			framework.WaitStates(t, ns, xb.Name, framework.ServedOf(map[string]string{
				"192.0.2.10": "true/true/false", "192.0.2.11": "false/false/false", "2001:db8::10": "true/true/false"}))
		})
	}
}

// TestGarbageKeepsLastKnownGood: a plugin that answers what the protocol
// does not allow (not JSON, too many endpoints, too large an answer, a
// redirect, an error without the protocol's body) fails the source, which
// keeps what it published and names what was wrong; the redirect's target
// is never asked. Once the plugin behaves, its answer is published.
func TestGarbageKeepsLastKnownGood(t *testing.T) {
	t.Parallel()
	ns := framework.Namespace(t)
	f := newFake(t)
	f.set("web", serving("192.0.2.20"), serving("192.0.2.21"))
	target := newFake(t)
	provider := "plugin-" + ns
	createProvider(t, provider, f.srv.URL, []string{ns}, func(bp *v1alpha1.BackendProvider) {
		bp.Spec.Plugin.MaxEndpoints = 3
	})
	xb := backend(ns, "web", provider, map[string]string{"group": "web"})
	framework.Create(t, xb)
	framework.WaitAddresses(t, ns, xb.Name, "192.0.2.20", "192.0.2.21")

	many := `{"endpoints":[` + strings.Repeat(`{"address":"192.0.2.30","serving":true},`, 3) + `{"address":"192.0.2.31","serving":true}]}`
	for _, c := range []struct {
		name string
		h    http.HandlerFunc
		says string
	}{
		{"not JSON", answer(200, "<html>maintenance</html>"), "not the protocol's JSON"},
		{"too many endpoints", answer(200, many), "4 endpoints, more than spec.plugin.maxEndpoints=3"},
		{"too large", answer(200, `{"endpoints":[],"pad":"`+strings.Repeat("x", 70<<10)+`"}`), "an answer larger than 67072 bytes"},
		{"redirect", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, target.srv.URL+r.URL.Path, http.StatusTemporaryRedirect)
		},
			"a redirect (307"},
		{"error without body", answer(500, "boom"), "status 500 without the protocol's error body"},
	} {
		f.become(c.h)
		framework.Eventually(t, framework.Timeout, c.name+" fails the source", func() error {
			if e := sourceError(t, xb); !strings.Contains(e, c.says) {
				return errorf("source error %q, want it to say %q", e, c.says)
			}
			return nil
		})
		framework.WaitCondition(t, xb, v1alpha1.ConditionResolved, metav1.ConditionFalse, v1alpha1.ReasonSourceFailed)
		framework.WaitAddresses(t, ns, xb.Name, "192.0.2.20", "192.0.2.21")
	}
	if n := target.requests(ns); n != 0 {
		t.Errorf("the redirect was followed: its target got %d request(s)", n)
	}
	f.set("web", serving("192.0.2.22"))
	f.become(nil)
	framework.WaitReady(t, xb)
	framework.WaitAddresses(t, ns, xb.Name, "192.0.2.22")
}

// answer answers every request with status and body.
func answer(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}
}

// TestSlowPluginStallsNoOne: a plugin that never answers holds no
// reconcile of another provider's backends: with a dozen backends waiting
// on it, a backend of another plugin, created after them, is published.
func TestSlowPluginStallsNoOne(t *testing.T) {
	t.Parallel()
	stuck := make(chan struct{})
	slow := newFake(t)
	slow.become(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-stuck:
		case <-r.Context().Done():
		}
	})
	t.Cleanup(func() { close(stuck) })
	nsSlow, nsOther := framework.Namespace(t), framework.Namespace(t)
	createProvider(t, "slow-"+nsSlow, slow.srv.URL, []string{nsSlow}, func(bp *v1alpha1.BackendProvider) {
		bp.Spec.Plugin.Timeout = &metav1.Duration{Duration: 3 * time.Second}
		bp.Spec.Plugin.MaxConcurrentRequests = 2
	})
	for _, name := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"} {
		framework.Create(t, backend(nsSlow, name, "slow-"+nsSlow, map[string]string{"group": "web"}))
	}
	fine := newFake(t)
	fine.set("web", serving("192.0.2.40"))
	createProvider(t, "fine-"+nsOther, fine.srv.URL, []string{nsOther}, nil)
	xb := backend(nsOther, "web", "fine-"+nsOther, map[string]string{"group": "web"})
	framework.Create(t, xb)
	framework.WaitReady(t, xb)
	framework.WaitAddresses(t, nsOther, xb.Name, "192.0.2.40")
}
