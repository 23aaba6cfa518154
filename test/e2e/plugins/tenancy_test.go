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

// TestTenancy: each example plugin is reached only through providerRef,
// under the same admission as every kind (a counting proxy in front of it
// records each namespace's requests). A namespace the provider does not
// admit is refused and asks the plugin nothing; one admitted publishes,
// within the provider's allowedCIDRs and the deny list; revoked, what it
// published is withdrawn at once. A tenant cannot choose where the
// controller connects: the source has no url, and a url parameter goes to
// the platform team's plugin, which refuses it.
func TestTenancy(t *testing.T) {
	for _, ex := range examples {
		t.Run(ex.name, func(t *testing.T) {
			t.Parallel()
			admitted, other := framework.Namespace(t), framework.Namespace(t)
			evil := newFake(t)
			evil.set("web", serving("192.0.2.66"))
			// 192.0.2.11 is outside allowedCIDRs, 2001:db8::10 inside.
			file := writeFile(t, "", ex.inventory(admitted, "serving", "serving", "serving"))
			p := ex.start(t, file, "")
			proxy := plugintest.NewCounter(t, p.URL)
			provider := "plugin-" + admitted
			bp := createProvider(t, provider, proxy.URL, []string{admitted}, func(bp *v1alpha1.BackendProvider) {
				bp.Spec.AllowedCIDRs = []string{"192.0.2.10/32", "2001:db8::/32"}
			})

			refused := backend(other, "web", provider, ex.params)
			framework.Create(t, refused)
			framework.WaitCondition(t, refused, v1alpha1.ConditionResolved, metav1.ConditionFalse, v1alpha1.ReasonProviderNotAdmitted)
			// The same reason says first that the provider does not exist
			// when the backend reaches the controller before the provider
			// its cache has not yet seen: wait for the refusal proper.
			framework.Eventually(t, framework.Timeout, "the refusal", func() error {
				msg := conditionMessage(framework.Get(t, refused), v1alpha1.ConditionResolved)
				if !strings.Contains(msg, fmt.Sprintf("namespace %s is not admitted to BackendProvider %q", other, provider)) {
					return fmt.Errorf("refusal says %q", msg)
				}
				return nil
			})

			xb := backend(admitted, "web", provider, ex.params)
			framework.Create(t, xb)
			framework.WaitAddresses(t, admitted, xb.Name, framework.Served("192.0.2.10", "2001:db8::10")...)
			waitDropped(t, xb, "192.0.2.11")

			// The url a tenant writes is a parameter the plugin refuses;
			// the controller connects where the BackendProvider says only.
			params := map[string]string{"url": evil.srv.URL}
			for k, v := range ex.params {
				params[k] = v
			}
			sneaky := backend(admitted, "sneaky", provider, params)
			framework.Create(t, sneaky)
			framework.WaitCondition(t, sneaky, v1alpha1.ConditionResolved, metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec)

			// Revoked: withdrawn at once, not held as a failing plugin's.
			framework.Edit(t, bp, func(p *v1alpha1.BackendProvider) { p.Spec.Namespaces.Names = []string{"elsewhere"} })
			framework.WaitCondition(t, xb, v1alpha1.ConditionResolved, metav1.ConditionFalse, v1alpha1.ReasonProviderNotAdmitted)
			framework.WaitAddresses(t, admitted, xb.Name)

			if n := proxy.Requests(other); n != 0 {
				t.Errorf("the plugin was asked %d time(s) for a namespace it does not admit", n)
			}
			if n := proxy.Requests(admitted); n == 0 {
				t.Error("the proxy counted no request of the admitted namespace: the count proves nothing")
			}
			if n := evil.requests(admitted) + evil.requests(other); n != 0 {
				t.Errorf("the url a tenant wrote was asked %d time(s)", n)
			}
		})
	}
}

// TestDenyList: what a plugin answers passes the deny list as every
// source's does: a denied address is dropped and named on status.
func TestDenyList(t *testing.T) {
	t.Parallel()
	ns := framework.Namespace(t)
	f := newFake(t)
	f.set("web", serving("192.0.2.50"), serving("203.0.113.200"))
	createProvider(t, "plugin-"+ns, f.srv.URL, []string{ns}, nil)
	xb := backend(ns, "web", "plugin-"+ns, map[string]string{"group": "web"})
	framework.Create(t, xb)
	framework.WaitAddresses(t, ns, xb.Name, "192.0.2.50")
	waitDropped(t, xb, "203.0.113.200")
}

// conditionMessage is the message of condition typ on xb.
func conditionMessage(xb *v1alpha1.ExternalBackend, typ string) string {
	for _, c := range xb.Status.Conditions {
		if c.Type == typ {
			return c.Message
		}
	}
	return ""
}

// TestAdmissionBounds: the CRD refuses what a plugin source or provider
// may not be, naming the field: no providerRef, too many parameters, keys
// or values out of bounds; a provider url with user information or a
// query, a token sent in the clear to another host, two kinds at once.
func TestAdmissionBounds(t *testing.T) {
	t.Parallel()
	ns := framework.Namespace(t)
	many := map[string]string{}
	for i := range 33 {
		many[fmt.Sprintf("k%d", i)] = "v"
	}
	for _, c := range []struct {
		name   string
		params map[string]string
		ref    bool
		says   string
	}{
		{"no providerRef", map[string]string{"group": "web"}, false, "a plugin source names the BackendProvider of its plugin"},
		{"too many parameters", many, true, "must have at most 32 items"},
		{"a key out of bounds", map[string]string{"-web": "x"}, true, "keys are letters, digits"},
		{"a value too long", map[string]string{"group": strings.Repeat("w", 1025)}, true, "values at most 1024"},
	} {
		xb := backend(ns, "bounds", "p", c.params)
		if !c.ref {
			xb.Spec.Sources[0].ProviderRef = nil
		}
		err := framework.E().Client.Create(ctx, xb)
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: create = %v, want a refusal saying %q", c.name, err, c.says)
		}
	}
	for _, c := range []struct {
		name string
		spec v1alpha1.BackendProviderSpec
		says string
	}{
		{"user information in the url", v1alpha1.BackendProviderSpec{Plugin: &v1alpha1.PluginProvider{URL: "http://user:pw@plugin.example:80"}}, "spec.plugin.url"},
		{"a query in the url", v1alpha1.BackendProviderSpec{Plugin: &v1alpha1.PluginProvider{URL: "https://plugin.example/?x=1"}}, "spec.plugin.url"},
		{"a token in the clear to another host", v1alpha1.BackendProviderSpec{Plugin: &v1alpha1.PluginProvider{URL: "http://plugin.example:9000",
			TokenSecretRef: &v1alpha1.SecretKeyReference{Name: "t", Key: "token"}}}, "a token is sent only over https, or to a sidecar on localhost"},
		{"two kinds", v1alpha1.BackendProviderSpec{Plugin: &v1alpha1.PluginProvider{URL: "http://127.0.0.1:9000"}, Static: &v1alpha1.StaticProvider{},
			AllowedCIDRs: []string{"192.0.2.0/24"}}, "set exactly one of static, dns, consul, aws, plugin"},
	} {
		c.spec.Namespaces = v1alpha1.NamespaceSelection{Names: []string{ns}}
		bp := &v1alpha1.BackendProvider{ObjectMeta: metav1.ObjectMeta{Name: "bounds-" + ns}, Spec: c.spec}
		err := framework.E().Client.Create(ctx, bp)
		if err == nil {
			_ = framework.E().Client.Delete(ctx, bp)
		}
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: create = %v, want a refusal saying %q", c.name, err, c.says)
		}
	}
}

// waitDropped waits until xb's status names addr, alone, as dropped.
func waitDropped(t *testing.T, xb *v1alpha1.ExternalBackend, addr string) {
	t.Helper()
	framework.Eventually(t, framework.Timeout, xb.Name+" drops "+addr, func() error {
		if d := framework.Get(t, xb).Status.Dropped; len(d) != 1 || d[0].Address != addr {
			return fmt.Errorf("dropped %+v", d)
		}
		return nil
	})
}
