package plugins_test

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/consultest"
	"github.com/backendslice/backendslice/test/docsection"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// The benchmark's size: `make bench-plugins` runs 100 flips and 1,000
// backends and writes the report; the suite runs a few of each, checking
// that every flip and every backend arrives.
var (
	flips        = flag.Int("flips", 5, "health flips timed for the plugin and for Consul each")
	costBackends = flag.Int("cost-backends", 20, "backends on one plugin for the cost of polling and pushing")
	idleWindow   = flag.Duration("idle", 10*time.Second, "how long the idle cost is measured")
	report       = flag.String("report", "", "rewrite the plugins section of this Markdown file (docs/benchmarks.md)")
)

// probeInterval is how often the benchmark reads the slice while it waits.
const probeInterval = 2 * time.Millisecond

// flipSpacing parts two flips, each an isolated change as in production
// (Consul's watch loop is rate-limited to 10 queries a second, as is a
// plugin's).
const flipSpacing = 500 * time.Millisecond

// TestBenchmarkPlugins measures, in one run on the real API server: the
// delay from a health flip to the slice, for a plugin that pushes and for
// a Consul check, side by side; and what 1,000 backends on one plugin
// cost, polled and pushed. Not parallel: it measures the process's CPU.
func TestBenchmarkPlugins(t *testing.T) {
	pluginFlips := flipToSlice(t, pluginFlipper(t))
	consulFlips := flipToSlice(t, consulFlipper(t))
	var costs []cost
	for _, push := range []bool{false, true} {
		costs = append(costs, measureCost(t, push))
	}
	body := reportOf(pluginFlips, consulFlips, costs)
	t.Log("\n" + body)
	if *report != "" {
		if err := docsection.Replace(*report, "plugins", body); err != nil {
			t.Fatal(err)
		}
	}
}

// flipper flips one endpoint's health; watch names its slice.
type flipper struct {
	ns, svc, addr string
	set           func(healthy bool) error
}

// pluginFlipper is a backend of a plugin that pushes (the SDK's, over
// HTTP): a flip is the plugin's inventory changing.
func pluginFlipper(t *testing.T) flipper {
	ns := framework.Namespace(t)
	f := newFake(t)
	f.set("web", serving("192.0.2.90"))
	createProvider(t, "bench-"+ns, f.srv.URL, []string{ns}, nil)
	framework.Create(t, backend(ns, "web", "bench-"+ns, map[string]string{"group": "web"}))
	return flipper{ns: ns, svc: "web", addr: "192.0.2.90", set: func(healthy bool) error {
		f.set("web", sdkEndpoint("192.0.2.90", healthy))
		return nil
	}}
}

// consulFlipper is a backend of a Consul service: a flip is its TTL check.
func consulFlipper(t *testing.T) flipper {
	ns := framework.Namespace(t)
	svc := consultest.Service{ID: "bench-" + ns, Name: "bench-" + ns, Address: "192.0.2.91"}
	if err := agent.Register(svc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = agent.Deregister(svc.ID) })
	bp := &v1alpha1.BackendProvider{ObjectMeta: metav1.ObjectMeta{Name: "consul-" + ns}, Spec: v1alpha1.BackendProviderSpec{
		Consul: &v1alpha1.ConsulProvider{Address: agent.Addr}, Namespaces: v1alpha1.NamespaceSelection{Names: []string{ns}}}}
	framework.Create(t, bp)
	t.Cleanup(func() { _ = framework.E().Client.Delete(ctx, bp) })
	xb := framework.Backend(ns, "web", v1alpha1.Source{Name: "consul", ProviderRef: &v1alpha1.ProviderReference{Name: bp.Name},
		Consul: &v1alpha1.ConsulSource{Service: svc.Name}})
	xb.Spec.DrainPeriod = &metav1.Duration{}
	framework.Create(t, xb)
	return flipper{ns: ns, svc: "web", addr: svc.Address, set: func(healthy bool) error {
		status := api.HealthCritical
		if healthy {
			status = api.HealthPassing
		}
		return agent.SetCheck(svc.ID, status)
	}}
}

// flipToSlice times *flips flips of f to unhealthy, from the change at the
// source to the slice showing the endpoint not ready; in between, untimed,
// the endpoint is made healthy again.
func flipToSlice(t *testing.T, f flipper) []time.Duration {
	t.Helper()
	waitReadyIs(t, f, true)
	delays := make([]time.Duration, 0, *flips)
	for range *flips {
		if err := f.set(true); err != nil {
			t.Fatal(err)
		}
		waitReadyIs(t, f, true)
		time.Sleep(flipSpacing)
		start := time.Now()
		// A Consul check's change waits for the catalog: flip in the
		// background and watch the slice from the moment of the flip.
		done := make(chan error, 1)
		go func() { done <- f.set(false) }()
		seen := waitReadyIs(t, f, false)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		delays = append(delays, seen.Sub(start))
	}
	slices.Sort(delays)
	return delays
}

// waitReadyIs waits until the slice shows f's endpoint ready as want.
func waitReadyIs(t *testing.T, f flipper, want bool) time.Time {
	t.Helper()
	deadline := time.Now().Add(framework.Timeout)
	for time.Now().Before(deadline) {
		var list discoveryv1.EndpointSliceList
		if err := framework.E().Client.List(ctx, &list, client.InNamespace(f.ns), client.MatchingLabels{
			discoveryv1.LabelServiceName: f.svc, discoveryv1.LabelManagedBy: v1alpha1.ManagedByValue}); err != nil {
			t.Fatal(err)
		}
		for _, s := range list.Items {
			for _, e := range s.Endpoints {
				if len(e.Addresses) == 1 && e.Addresses[0] == f.addr && ptr.Deref(e.Conditions.Ready, false) == want {
					return time.Now()
				}
			}
		}
		time.Sleep(probeInterval)
	}
	t.Fatalf("%s/%s did not show %s ready=%t within %s", f.ns, f.svc, f.addr, want, framework.Timeout)
	return time.Time{}
}

// cost is what backends on one plugin cost, polled or pushed.
type cost struct {
	push     bool
	backends int
	converge time.Duration
	// Over the idle window: requests to the plugin, the controller's
	// CPU (this process), the plugin's CPU, and writes to the API server.
	requests                 int
	controllerCPU, pluginCPU time.Duration
	writes                   float64
	window                   time.Duration
}

// measureCost puts *costBackends backends on one hostsfile plugin (a
// process of its own), polled (no index: asked every 30 s, the
// protocol's default) or pushed (long-polls), waits until all are
// published, then measures an idle window in which nothing changes.
func measureCost(t *testing.T, push bool) cost {
	ns := framework.Namespace(t)
	var b strings.Builder
	fmt.Fprintf(&b, "groups:\n  web:\n    namespaces: [%s]\n    hosts:\n      - {address: 192.0.2.95}\n      - {address: 192.0.2.96}\n", ns)
	file := writeFile(t, "", b.String())
	p := startHosts(t, file, "", "-push="+strconv.FormatBool(push))
	provider := "cost-" + ns
	base := plugins.Stats().Watches
	createProvider(t, provider, p.URL, []string{ns}, func(bp *v1alpha1.BackendProvider) {
		bp.Spec.Plugin.MaxConcurrentRequests = 64
	})
	start := time.Now()
	names := make([]string, *costBackends)
	for i := range names {
		names[i] = fmt.Sprintf("web-%04d", i)
		xb := backend(ns, names[i], provider, map[string]string{"group": "web"})
		// Headless: a thousand cluster IPs would not fit the test's Service range.
		xb.Spec.Service.Type = v1alpha1.ServiceTypeHeadless
		framework.Create(t, xb)
	}
	framework.Eventually(t, 10*time.Minute, fmt.Sprintf("%d backends published", len(names)), func() error {
		var list discoveryv1.EndpointSliceList
		if err := framework.E().Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(list.Items) < len(names) {
			return fmt.Errorf("%d slices of %d", len(list.Items), len(names))
		}
		return nil
	})
	c := cost{push: push, backends: len(names), converge: time.Since(start), window: *idleWindow}
	// Settled: the first answers' wake-ups are done.
	time.Sleep(2 * time.Second)
	req0, cpu0, pcpu0 := plugins.Stats().Requests, selfCPU(t), processCPU(t, p.PID())
	writes0 := framework.Writes(t, "EndpointSlice") + framework.Writes(t, "Service")
	time.Sleep(c.window)
	c.requests = int(plugins.Stats().Requests - req0)
	c.controllerCPU, c.pluginCPU = selfCPU(t)-cpu0, processCPU(t, p.PID())-pcpu0
	c.writes = framework.Writes(t, "EndpointSlice") + framework.Writes(t, "Service") - writes0
	if c.writes != 0 {
		t.Errorf("%d writes while nothing changed", int(c.writes))
	}
	// The backends go with the namespace's test; stop watching them now,
	// so that the next mode's window is its own.
	for _, n := range names {
		_ = framework.E().Client.Delete(ctx, backend(ns, n, provider, nil))
	}
	framework.Eventually(t, time.Minute, "the watches stop", func() error {
		if s := plugins.Stats(); s.Watches != base {
			return fmt.Errorf("%d watches, %d before", s.Watches, base)
		}
		return nil
	})
	return c
}

// selfCPU is the CPU time this process (the controller, the test client
// and the in-process fakes, idle) has used.
func selfCPU(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// processCPU is the CPU time process pid has used (/proc/pid/stat).
func processCPU(t *testing.T, pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, _ := strconv.Atoi(fields[11])
	stime, _ := strconv.Atoi(fields[12])
	// Clock ticks, 100 a second on Linux.
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// reportOf is the plugins section of docs/benchmarks.md.
func reportOf(plugin, consul []time.Duration, costs []cost) string {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d.Microseconds())/1000) }
	var b strings.Builder
	fmt.Fprintf(&b, "## Plugins: a pushed health flip against Consul's, and what 1,000 backends on one plugin cost\n\n")
	fmt.Fprintf(&b, "`make bench-plugins` (`TestBenchmarkPlugins` in `test/e2e/plugins`), one run on the real API server. ")
	fmt.Fprintf(&b, "A flip is an endpoint turning unhealthy at its source: for the plugin, its inventory changing (the SDK's plugin over HTTP, which pushes: a long-poll answers); for Consul, a TTL check turning critical on a real agent (blocking query). ")
	fmt.Fprintf(&b, "Timed from the change to the EndpointSlice showing the endpoint `ready=false`, read every %s, %s apart.\n\n", probeInterval, flipSpacing)
	fmt.Fprintf(&b, "| source | flips | p50 | p99 | max |\n| --- | --- | --- | --- | --- |\n")
	for _, r := range []struct {
		name string
		d    []time.Duration
	}{{"plugin (push)", plugin}, {"Consul (blocking query)", consul}} {
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s |\n", r.name, len(r.d), ms(framework.Percentile(r.d, 0.5)), ms(framework.Percentile(r.d, 0.99)), ms(r.d[len(r.d)-1]))
	}
	fmt.Fprintf(&b, "\nBackends on one plugin (the hostsfile example, a process of its own), all asking for one group of two hosts, their Services headless; ")
	fmt.Fprintf(&b, "then an idle window with nothing changing. Polled: the plugin answers without an index and is asked again every 30 s (the protocol's default). ")
	fmt.Fprintf(&b, "Pushed: each source holds a long-poll of up to 60 s (`--plugin-wait`), answered at once on a change. ")
	fmt.Fprintf(&b, "Controller CPU is this test process's (the controller, and the test's idle client); plugin CPU the plugin process's.\n\n")
	fmt.Fprintf(&b, "| mode | backends | all published after | idle window | requests to the plugin | per backend a minute | controller CPU | plugin CPU | API writes |\n")
	fmt.Fprintf(&b, "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, c := range costs {
		mode := "polled"
		if c.push {
			mode = "pushed"
		}
		perMin := float64(c.requests) / float64(c.backends) / c.window.Minutes()
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %d | %.2f | %s | %s | %d |\n", mode, c.backends, c.converge.Round(100*time.Millisecond),
			c.window, c.requests, perMin, c.controllerCPU.Round(10*time.Millisecond), c.pluginCPU.Round(10*time.Millisecond), int(c.writes))
	}
	return b.String()
}
