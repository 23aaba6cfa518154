//go:build bench

// Package hostile measures what peers a tenant can choose cost the
// controller's memory: probe targets and plugin long-polls that answer
// with headers that never end, headers that trickle, huge bodies, or a TLS
// handshake that never ends, beside the same fleet answering as it should,
// in one run. Each fleet runs in a process of its own (the test binary
// started again with -child), holding the controller's prober and plugin
// provider, so that its heap and RSS are theirs; the servers run in the
// test process.
package hostile

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/backendslice/backendslice/test/docsection"
)

var (
	report = flag.String("report", "", "if set, the Markdown file (docs/benchmarks.md) whose hostile-peers section TestHostileReport rewrites")
	size   = flag.Int("size", 64, "probe targets, and plugin long-polls, of each fleet (a multiple of 4)")
	window = flag.Duration("window", 30*time.Second, "measured window of each fleet, after a warm-up of one probe period")
	// child is set only in a fleet's process, which the test starts.
	child = flag.String("child", "", "internal: run as a fleet's process, with its configuration and result in this directory")
)

// The probes' period and timeout: the issue's, a timeout just under the
// period, so that a probe that is never answered holds what it read for
// as long as a check allows.
const (
	period  = 10 * time.Second
	timeout = 9900 * time.Millisecond
)

// fleetConfig is what a fleet's process runs.
type fleetConfig struct {
	Name string
	// Probes are the probe targets; CAPEM verifies the HTTPS ones.
	Probes []probeTarget
	CAPEM  string
	// PluginURL is the plugin the sources ask; Sources their groups.
	PluginURL string
	Sources   []string
	Window    time.Duration
}

// probeTarget is one probe target on 127.0.0.1.
type probeTarget struct {
	Kind, Path, ServerName string
	Port                   int32
}

// TestHostileReport runs the well-behaved fleet, then the hostile one,
// each in its own process, and writes the hostile-peers section.
func TestHostileReport(t *testing.T) {
	if *child != "" {
		runChild(t, *child)
		return
	}
	if *size%4 != 0 || *size <= 0 {
		t.Fatalf("-size %d: a positive multiple of 4", *size)
	}
	began := time.Now()
	srv := startServers(t, *size)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r := Report{Size: *size, Period: period, Timeout: timeout, Window: *window, CPUs: runtime.NumCPU(), Go: runtime.Version(),
		LoadBefore: docsection.LoadAverage()}
	for i, c := range srv.fleets() {
		c.Window = *window
		res := runFleet(t, exe, filepath.Join(t.TempDir(), fmt.Sprint(i)), c)
		t.Logf("%s: RSS %s -> %s (most %s), heap live %s -> %s, heap in use most %s; probes %d (failed %v); plugin requests %d",
			c.Name, mib(res.Before.RSS), mib(res.End.RSS), mib(res.During.RSSMax), mib(res.Before.HeapLive), mib(res.End.HeapLive),
			mib(res.During.HeapInuseMax), res.Probes, res.Failures, res.PluginRequests)
		r.Fleets = append(r.Fleets, res)
	}
	r.Sent = srv.sent()
	r.LoadAfter, r.Took = docsection.LoadAverage(), time.Since(began)

	well, hostile := r.Fleets[0], r.Fleets[1]
	if hostile.Probes == 0 || well.Probes == 0 || hostile.PluginRequests <= uint64(*size) {
		t.Errorf("probes run: %d well-behaved, %d hostile; plugin requests of the hostile fleet %d: the fleets did not run",
			well.Probes, hostile.Probes, hostile.PluginRequests)
	}
	body := r.Markdown()
	t.Log("\n" + body)
	switch {
	case *report == "":
	case t.Failed():
		t.Logf("%s left as it was: the run failed", *report)
	default:
		// The file holds other sections, which stay.
		if err := docsection.Replace(*report, "hostile-peers", body); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote the hostile-peers section of %s", *report)
	}
}

// runFleet runs c's process in dir and returns what it measured.
func runFleet(t *testing.T, exe, dir string, c fleetConfig) Result {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cb, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cb, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestHostileReport$", "-test.v", "-test.timeout=10m", "-child="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: the fleet's process failed: %v\n%s", c.Name, err, out)
	}
	rb, err := os.ReadFile(filepath.Join(dir, "result.json"))
	if err != nil {
		t.Fatalf("%s: no result: %v\n%s", c.Name, err, out)
	}
	var res Result
	if err := json.Unmarshal(rb, &res); err != nil {
		t.Fatal(err)
	}
	return res
}
