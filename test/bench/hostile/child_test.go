//go:build bench

package hostile

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/probe"
	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/providers/plugin"
	"github.com/backendslice/backendslice/test/docsection"
)

// Result is what a fleet's process measured.
type Result struct {
	Name string
	// Before is the process before the prober and the plugin provider
	// started; During the window's samples; End the process after the
	// window, collected.
	Before, End Memory
	During      Window
	// Probes counts the probes run from the start; Failures those that
	// failed, by reason.
	Probes   uint64
	Failures map[string]uint64
	// PluginRequests counts the requests sent to the plugin; PluginErrors
	// are what Resolve said of the sources at the end, distinct, with how
	// many sources said each.
	PluginRequests uint64
	PluginErrors   map[string]int
	// FirstErrors counts the sources whose first Resolve failed.
	FirstErrors int
}

// Memory is the process's memory at one moment, collected first.
type Memory struct {
	HeapLive, RSS uint64
	Goroutines    int
}

// Window is the most the process held in the window, uncollected: what a
// container's limit meets.
type Window struct {
	HeapInuseMax, RSSMax uint64
	GoroutinesMax        int
}

// settled collects garbage, returns what it can to the system, and reads
// the process's memory.
func settled() Memory {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return Memory{HeapLive: ms.HeapAlloc, RSS: docsection.RSS(), Goroutines: runtime.NumGoroutine()}
}

// watch samples the process every 250 ms for d.
func watch(d time.Duration) Window {
	var w Window
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		w.HeapInuseMax, w.RSSMax = max(w.HeapInuseMax, ms.HeapInuse), max(w.RSSMax, docsection.RSS())
		w.GoroutinesMax = max(w.GoroutinesMax, runtime.NumGoroutine())
	}
	return w
}

// noWakes is the controller's side of the plugin's pushes, which this
// benchmark does not need.
type noWakes struct{}

func (noWakes) Wake(types.NamespacedName) {}

// runChild runs the fleet of dir/config.json: the controller's prober on
// its probe targets and its plugin provider on its sources, warms up for a
// probe period, samples the window, and writes dir/result.json.
func runChild(t *testing.T, dir string) {
	cb, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c fleetConfig
	if err := json.Unmarshal(cb, &c); err != nil {
		t.Fatal(err)
	}
	res := Result{Name: c.Name, Before: settled()}

	reg := prometheus.NewRegistry()
	metrics, err := probe.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	prober := probe.New(probe.Options{Metrics: metrics})
	stopped := make(chan error, 1)
	go func() { stopped <- prober.Start(ctx) }()
	for i, pt := range c.Probes {
		check := probe.Check{Kind: probe.Kind(pt.Kind), Port: pt.Port, Path: pt.Path, ServerName: pt.ServerName,
			Period: period, Timeout: timeout, SuccessThreshold: 1, FailureThreshold: 3, InitialReady: true}
		if pt.Kind == "https" {
			check.CAPEM = c.CAPEM
		}
		prober.Sync(types.NamespacedName{Namespace: "tenant", Name: fmt.Sprintf("probed-%d", i)},
			[]probe.Target{{Address: "127.0.0.1", Check: check}})
	}

	plugins, err := plugin.New(plugin.Options{}, noWakes{})
	if err != nil {
		t.Fatal(err)
	}
	conn := &providers.Connection{Name: "fleet", Key: "fleet", Settings: &plugin.Settings{
		URL: c.PluginURL, Timeout: 10 * time.Second, MaxEndpoints: 10, MaxConcurrentRequests: 16}}
	requests := make([]providers.Request, len(c.Sources))
	for i, g := range c.Sources {
		requests[i] = providers.Request{Namespace: "tenant", Backend: fmt.Sprintf("plugged-%d", i), Connection: conn,
			AddressTypes: []v1alpha1.AddressType{v1alpha1.AddressTypeIPv4},
			Source: v1alpha1.Source{Name: "inventory", ProviderRef: &v1alpha1.ProviderReference{Name: "fleet"},
				Plugin: &v1alpha1.PluginSource{Parameters: map[string]string{"group": g}}}}
		// The first call starts the source's watch. A hostile plugin's
		// first long-poll may fail before Resolve returns the answer
		// before it: the watch goes on all the same.
		if _, err := plugins.Resolve(ctx, requests[i]); err != nil {
			res.FirstErrors++
		}
	}

	time.Sleep(period)
	res.During = watch(c.Window)

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	res.Failures = map[string]uint64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "backendslice_probe_results_total":
				res.Probes += uint64(m.GetCounter().GetValue())
			case "backendslice_probe_failures_total":
				for _, l := range m.GetLabel() {
					if l.GetName() == "reason" {
						res.Failures[l.GetValue()] += uint64(m.GetCounter().GetValue())
					}
				}
			}
		}
	}
	res.PluginRequests = plugins.Stats().Requests
	res.PluginErrors = map[string]int{}
	for _, req := range requests {
		if _, err := plugins.Resolve(ctx, req); err != nil {
			res.PluginErrors[err.Error()]++
		}
	}
	res.End = settled()

	cancel()
	plugins.Close()
	if err := <-stopped; err != nil {
		t.Errorf("the prober: %v", err)
	}
	rb, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "result.json"), rb, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("plugin errors: %q", slices.Sorted(maps.Keys(res.PluginErrors)))
}
