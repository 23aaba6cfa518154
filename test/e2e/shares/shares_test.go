package shares_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/consultest"
	"github.com/backendslice/backendslice/test/e2e/framework"
	"github.com/backendslice/backendslice/test/plugintest"
)

// settle bounds how long a test waits for the controller to reach a state:
// a safety bound for a broken controller, not a measurement.
const settle = time.Minute

// quiet is the window over which a settled install is watched for loops.
const quiet = 10 * time.Second

// createProvider creates BackendProvider name admitting namespaces,
// deleted when the test ends.
func createProvider(t *testing.T, name string, spec v1alpha1.BackendProviderSpec, namespaces ...string) {
	t.Helper()
	spec.Namespaces = v1alpha1.NamespaceSelection{Names: namespaces}
	bp := &v1alpha1.BackendProvider{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
	framework.Create(t, bp)
	t.Cleanup(func() { _ = framework.E().Client.Delete(ctx, bp) })
}

// createBackend creates backend name in ns with sources, deleted when the
// test ends (so that its watches go before the next test).
func createBackend(t *testing.T, ns, name string, sources ...v1alpha1.Source) *v1alpha1.ExternalBackend {
	t.Helper()
	xb := framework.Backend(ns, name, sources...)
	framework.Create(t, xb)
	t.Cleanup(func() { _ = client.IgnoreNotFound(framework.E().Client.Delete(ctx, xb)) })
	return xb
}

// consulSources are n sources reading services prefix-0 ... through
// provider: services that need not exist.
func consulSources(provider, prefix string, n int) []v1alpha1.Source {
	var out []v1alpha1.Source
	for i := range n {
		out = append(out, v1alpha1.Source{Name: fmt.Sprintf("s%d", i), ProviderRef: &v1alpha1.ProviderReference{Name: provider},
			Consul: &v1alpha1.ConsulSource{Service: fmt.Sprintf("%s-%d", prefix, i)}})
	}
	return out
}

// pluginSources are n sources asking group through provider.
func pluginSources(provider, group string, n int) []v1alpha1.Source {
	var out []v1alpha1.Source
	for i := range n {
		out = append(out, v1alpha1.Source{Name: fmt.Sprintf("s%d", i), ProviderRef: &v1alpha1.ProviderReference{Name: provider},
			Plugin: &v1alpha1.PluginSource{Parameters: map[string]string{"group": group}}})
	}
	return out
}

// messages are the messages of xb's conditions, as they are now.
func messages(t *testing.T, xb *v1alpha1.ExternalBackend) string {
	t.Helper()
	var out []string
	for _, c := range framework.Get(t, xb).Status.Conditions {
		out = append(out, c.Type+": "+c.Message)
	}
	return strings.Join(out, "\n")
}

// waitMessage waits until a condition of xb says want.
func waitMessage(t *testing.T, xb *v1alpha1.ExternalBackend, want string) string {
	t.Helper()
	var got string
	framework.Eventually(t, settle, fmt.Sprintf("%s/%s saying %q", xb.Namespace, xb.Name, want), func() error {
		if got = messages(t, xb); !strings.Contains(got, want) {
			return fmt.Errorf("its conditions say:\n%s", got)
		}
		return nil
	})
	return got
}

// waitReadyWithout waits until xb is Ready, failing the test if any of its
// conditions says one of refused on the way there.
func waitReadyWithout(t *testing.T, xb *v1alpha1.ExternalBackend, refused ...string) {
	t.Helper()
	framework.Eventually(t, settle, fmt.Sprintf("%s/%s Ready", xb.Namespace, xb.Name), func() error {
		now := framework.Get(t, xb)
		for _, c := range now.Status.Conditions {
			for _, r := range refused {
				if strings.Contains(c.Message, r) {
					t.Fatalf("%s/%s's %s condition said %q on its way to Ready: %s", xb.Namespace, xb.Name, c.Type, r, c.Message)
				}
			}
		}
		if !meta.IsStatusConditionTrue(now.Status.Conditions, v1alpha1.ConditionReady) {
			return fmt.Errorf("not Ready: %+v", now.Status.Conditions)
		}
		return nil
	})
}

// reconciles is how many reconciles the controller has finished.
func reconciles(t *testing.T) float64 {
	t.Helper()
	n, _ := framework.MetricValue(t, "backendslice_reconciles_total", nil)
	return n
}

// activity is what the controller did over a window.
type activity struct {
	reconciles, writes float64
	// rewritten are the backends whose object (status) was written.
	rewritten []string
}

// watchQuiet counts the controller's reconciles and Service and slice
// writes over window, and which of backends it rewrote.
func watchQuiet(t *testing.T, window time.Duration, backends ...*v1alpha1.ExternalBackend) activity {
	t.Helper()
	versions := func() []string {
		var out []string
		for _, xb := range backends {
			out = append(out, framework.Get(t, xb).ResourceVersion)
		}
		return out
	}
	writes := func() float64 { return framework.Writes(t, "Service") + framework.Writes(t, "EndpointSlice") }
	v0, r0, w0 := versions(), reconciles(t), writes()
	time.Sleep(window)
	v1, r1, w1 := versions(), reconciles(t), writes()
	a := activity{reconciles: r1 - r0, writes: w1 - w0}
	for i, xb := range backends {
		if v0[i] != v1[i] {
			a.rewritten = append(a.rewritten, xb.Namespace+"/"+xb.Name)
		}
	}
	return a
}

// TestConsulShare: a namespace admitted to two BackendProviders on one
// agent (one naming it 127.0.0.1, the other localhost) fills the
// controller's budget for that agent with services that need not exist;
// another namespace's new backend, through a third provider on the same
// agent, becomes Ready, and neither "429" nor "already watches" reaches
// it: a watch is taken back from the first namespace, which is told its
// share. Without the budget per agent the first namespace would hold
// agentConns watches, every connection the agent gives the controller's
// address. Once settled, nothing loops.
func TestConsulShare(t *testing.T) {
	hog, quietNS := framework.Namespace(t), framework.Namespace(t)
	_, port, _ := strings.Cut(agent.Addr, ":")
	createProvider(t, "consul-by-ip", v1alpha1.BackendProviderSpec{Consul: &v1alpha1.ConsulProvider{Address: agent.Addr}}, hog)
	createProvider(t, "consul-by-name", v1alpha1.BackendProviderSpec{Consul: &v1alpha1.ConsulProvider{Address: "localhost:" + port}}, hog)
	createProvider(t, "consul-quiet", v1alpha1.BackendProviderSpec{Consul: &v1alpha1.ConsulProvider{Address: agent.Addr}}, quietNS)
	if err := agent.Register(consultest.Service{ID: "payments", Name: "payments", Address: "192.0.2.40"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = agent.Deregister("payments") })

	first := createBackend(t, hog, "first", consulSources("consul-by-ip", "hog-a", consulPerConnection)...)
	framework.Eventually(t, settle, "the first backend's watches", func() error {
		if n := consulWatches.Watches(); n != consulPerConnection {
			return fmt.Errorf("%d watches", n)
		}
		return nil
	})
	second := createBackend(t, hog, "second", consulSources("consul-by-name", "hog-b", consulPerConnection)...)
	waitMessage(t, second, fmt.Sprintf("the Consul agent at %s already watches %d Consul services, its limit (--consul-max-watches-per-agent)", agent.Addr, consulPerAgent))
	if n := consulWatches.Watches(); n != consulPerAgent {
		t.Fatalf("%d watches with the first namespace alone, want the agent's budget, %d", n, consulPerAgent)
	}

	victim := createBackend(t, quietNS, "payments", v1alpha1.Source{Name: "consul", ProviderRef: &v1alpha1.ProviderReference{Name: "consul-quiet"},
		Consul: &v1alpha1.ConsulSource{Service: "payments"}})
	waitReadyWithout(t, victim, "429", "already watches")
	framework.WaitAddresses(t, quietNS, "payments", "192.0.2.40")
	if n := consulWatches.Watches(); n > consulPerAgent {
		t.Errorf("%d watches, more than the agent's budget, %d", n, consulPerAgent)
	}
	waitMessage(t, second, fmt.Sprintf("namespace %s holds %d of the %d watches of the Consul agent at %s (--consul-max-watches-per-agent), and its share is %d while 2 namespaces hold watches there",
		hog, consulPerAgent-1, consulPerAgent, agent.Addr, consulPerAgent/2))

	time.Sleep(2 * time.Second) // the last status writes and their echoes
	a := watchQuiet(t, quiet, first, second, victim)
	t.Logf("in %s of quiet: %v reconciles, %v Service and slice writes, rewritten %v", quiet, a.reconciles, a.writes, a.rewritten)
	if a.writes != 0 || len(a.rewritten) != 0 {
		t.Errorf("in %s of quiet: %v Service and slice writes, backends rewritten %v; want none", quiet, a.writes, a.rewritten)
	}
	// The first namespace's refused sources are retried with the
	// controller's backoff (doubling to a minute): a few reconciles (3
	// measured), where a loop would make hundreds.
	if a.reconciles > 20 {
		t.Errorf("%v reconciles in %s of quiet, want at most 20", a.reconciles, quiet)
	}
}

// hostsPlugin runs the hostsfile plugin on a file of groups, behind a
// proxy that counts resolve requests; it returns the proxy's URL.
func hostsPlugin(t *testing.T, groups string) (string, *plugintest.Counter) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "hosts.yaml")
	if err := os.WriteFile(file, []byte(groups), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := plugintest.Start("http", hostsfile, "-listen", "127.0.0.1:0", "-file", file)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	c := plugintest.NewCounter(t, p.URL)
	return c.URL, c
}

// TestPluginShare: a namespace fills a plugin's watches; another
// namespace's new backend becomes Ready, a watch taken back from the
// first, which is told its share; no "already has" reaches the second.
func TestPluginShare(t *testing.T) {
	hog, quietNS := framework.Namespace(t), framework.Namespace(t)
	u, _ := hostsPlugin(t, "groups:\n  web:\n    namespaces: [\"*\"]\n    hosts:\n      - {address: 192.0.2.50}\n")
	createProvider(t, "plugin-shared", v1alpha1.BackendProviderSpec{Plugin: &v1alpha1.PluginProvider{URL: u}}, hog, quietNS)
	before := plugins.Stats().Watches

	first := createBackend(t, hog, "first", pluginSources("plugin-shared", "web", pluginWatches)...)
	framework.WaitReady(t, first)
	second := createBackend(t, hog, "second", pluginSources("plugin-shared", "web", 2)...)
	waitMessage(t, second, fmt.Sprintf("already has %d sources, the controller's limit for one plugin", pluginWatches))
	if n := plugins.Stats().Watches - before; n != pluginWatches {
		t.Fatalf("%d watches with the first namespace alone, want the plugin's budget, %d", n, pluginWatches)
	}

	victim := createBackend(t, quietNS, "web", pluginSources("plugin-shared", "web", 1)...)
	waitReadyWithout(t, victim, "already has")
	framework.WaitAddresses(t, quietNS, "web", "192.0.2.50")
	if n := plugins.Stats().Watches - before; n > pluginWatches {
		t.Errorf("%d watches, more than the plugin's budget, %d", n, pluginWatches)
	}
	// The first backend's newest source gave its watch back.
	said := waitMessage(t, first, fmt.Sprintf("namespace %s holds %d of the %d sources the plugin of BackendProvider plugin-shared", hog, pluginWatches-1, pluginWatches))
	if !strings.Contains(said, fmt.Sprintf("and its share is %d while 2 namespaces hold sources there", pluginWatches/2)) {
		t.Errorf("the first namespace is not told its share: %s", said)
	}

	time.Sleep(2 * time.Second)
	a := watchQuiet(t, quiet, first, second, victim)
	t.Logf("in %s of quiet: %v reconciles, %v Service and slice writes, rewritten %v", quiet, a.reconciles, a.writes, a.rewritten)
	if a.writes != 0 || len(a.rewritten) != 0 {
		t.Errorf("in %s of quiet: %v Service and slice writes, backends rewritten %v; want none", quiet, a.writes, a.rewritten)
	}
	if a.reconciles > 20 {
		t.Errorf("%v reconciles in %s of quiet, want at most 20", a.reconciles, quiet)
	}
}

// TestRefusedPluginSourcesStayQuiet: 32 sources the plugin refuses (its
// consent rules: the group lists another namespace) hold no watch, and
// over a quiet window the plugin is asked next to nothing for them (they
// wait minutes before asking again), while the backends say AccessDenied
// and when they are asked again, without a status rewrite.
func TestRefusedPluginSourcesStayQuiet(t *testing.T) {
	tenant := framework.Namespace(t)
	u, asked := hostsPlugin(t, "groups:\n  private:\n    namespaces: [nobody]\n    hosts:\n      - {address: 192.0.2.60}\n")
	createProvider(t, "plugin-refusing", v1alpha1.BackendProviderSpec{Plugin: &v1alpha1.PluginProvider{URL: u}}, tenant)
	before := plugins.Stats().Watches

	var backends []*v1alpha1.ExternalBackend
	for i := range 2 {
		backends = append(backends, createBackend(t, tenant, fmt.Sprintf("refused-%d", i), pluginSources("plugin-refusing", "private", 16)...))
	}
	for _, xb := range backends {
		framework.WaitCondition(t, xb, v1alpha1.ConditionResolved, metav1.ConditionFalse, v1alpha1.ReasonAccessDenied)
		waitMessage(t, xb, "it holds no watch and is asked again within")
	}
	if n := plugins.Stats().Watches - before; n != 0 {
		t.Errorf("the refused sources hold %d watches, want none", n)
	}
	first := asked.Requests(tenant)
	t.Logf("the 32 refused sources asked the plugin %d time(s) to settle", first)

	time.Sleep(2 * time.Second)
	r0 := asked.Requests(tenant)
	a := watchQuiet(t, quiet, backends...)
	n := asked.Requests(tenant) - r0
	t.Logf("in %s of quiet: %d resolve request(s) to the plugin, %v reconciles, %v Service and slice writes, rewritten %v",
		quiet, n, a.reconciles, a.writes, a.rewritten)
	if n > 0 {
		t.Errorf("the refused sources asked the plugin %d time(s) in %s of quiet, want none (they wait minutes)", n, quiet)
	}
	if a.writes != 0 || len(a.rewritten) != 0 {
		t.Errorf("in %s of quiet: %v Service and slice writes, backends rewritten %v; want none", quiet, a.writes, a.rewritten)
	}
	// An AccessDenied backend is looked at again every 15 s (answered
	// from memory here): at most one reconcile each in the window, and a
	// couple of slack.
	if a.reconciles > 4 {
		t.Errorf("%v reconciles in %s of quiet, want at most 4", a.reconciles, quiet)
	}
}
