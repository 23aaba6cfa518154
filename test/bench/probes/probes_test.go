//go:build bench

// Package probes measures the prober at the size the probes issue asks for:
// 10,000 endpoints at a 10 s period on one replica. The endpoints are real
// servers in a netlab; the prober runs in a process of its own inside the
// lab's node namespace (the test binary, started again with -child), so that
// its CPU time, memory and goroutines are the prober's alone, and it dials
// with net.Dialer as the controller does. This process keeps the lab and its
// servers, and measures what they cost over the same windows.
package probes

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/backendslice/backendslice/probe"
	"github.com/backendslice/backendslice/test/docsection"
	"github.com/backendslice/backendslice/test/netlab"
)

var (
	window = flag.Duration("window", 60*time.Second, "measured window of each configuration (at least 3 probe periods), after a warm-up of one period")
	report = flag.String("report", "", "if set, the Markdown file (docs/benchmarks.md) whose probes section TestProbeScaleReport rewrites")
	// child is set only in the prober's process, which the test starts.
	child = flag.String("child", "", "internal: run as the prober's process, with the configuration and results in this directory")
)

// The fleet: hosts × ports targets, the first tcpPorts ports of every host
// checked over TCP and the rest over HTTP (20%).
const (
	hosts        = 20
	portsPerHost = 500
	tcpPorts     = 400
	firstPort    = 20000
	targets      = hosts * portsPerHost
	// perBackend is how many targets a backend of the first set has.
	perBackend = 10
	period     = 10 * time.Second
	timeout    = 1 * time.Second
)

// config is what a prober's process runs.
type config struct {
	// Name is the configuration's column in the report.
	Name string
	// Hosts are the hosts' IPv4 addresses.
	Hosts []string
	// Owners is how many backends use each target (1 or 2).
	Owners int
	// Period, Timeout and Window are the checks' period and timeout and the
	// measured window (after a warm-up of one period).
	Period, Timeout, Window time.Duration
}

// targetList is the fleet: target i is on host i%hosts, port
// firstPort+i/hosts, so that a backend's ten targets are ten hosts on one
// port, as a Service's endpoints would be.
func (c config) targetList() []probe.Target {
	out := make([]probe.Target, 0, targets)
	for i := range targets {
		n := i / len(c.Hosts)
		ck := probe.Check{
			Kind: probe.TCP, Port: int32(firstPort + n),
			Period: c.Period, Timeout: c.Timeout,
			SuccessThreshold: 1, FailureThreshold: 3, InitialReady: true,
		}
		if n >= tcpPorts {
			ck.Kind, ck.Path, ck.StatusCodes = probe.HTTP, "/", probe.DefaultStatusCodes
		}
		out = append(out, probe.Target{Address: c.Hosts[i%len(c.Hosts)], Check: ck})
	}
	return out
}

// backends splits the targets among backends: backend b of the first set
// has targets b*10 to b*10+9; with two owners, backend 1000+b of the second
// set has targets b, b+1000, …, b+9000, so that each target is in two
// different lists.
func (c config) backends(ts []probe.Target) map[types.NamespacedName][]probe.Target {
	sets := len(ts) / perBackend
	out := make(map[types.NamespacedName][]probe.Target, sets*c.Owners)
	name := func(n int) types.NamespacedName {
		return types.NamespacedName{Namespace: "bench", Name: "backend-" + strconv.Itoa(n)}
	}
	for b := range sets {
		out[name(b)] = ts[b*perBackend : (b+1)*perBackend]
	}
	if c.Owners > 1 {
		for b := range sets {
			l := make([]probe.Target, 0, perBackend)
			for j := range perBackend {
				l = append(l, ts[b+j*sets])
			}
			out[name(sets+b)] = l
		}
	}
	return out
}

// TestProbeScaleReport serves 10,000 targets in a lab and measures, one after
// another in one run: the servers alone (no prober), one prober with each
// target used by one backend, and one with each used by two.
func TestProbeScaleReport(t *testing.T) {
	if *child != "" {
		runChild(t, *child)
		return
	}
	if *window < 3*period {
		t.Fatalf("-window %s: at least 3 periods (%s)", *window, 3*period)
	}
	began := time.Now()
	raiseNoFile(t, targets+4096)

	lab, err := netlab.New(t.Logf)
	if err != nil {
		t.Fatalf("netlab (needs root and `ip netns`): %v", err)
	}
	defer func() {
		if err := lab.Close(); err != nil {
			t.Errorf("closing the lab: %v", err)
		}
	}()
	addrs := serve(t, lab)

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r := Report{
		CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), Go: runtime.Version(), CPUModel: cpuModel(),
		Targets: targets, HTTPTargets: targets - hosts*tcpPorts, Hosts: hosts, Period: period, Timeout: timeout,
		Window: *window, Concurrency: probe.DefaultConcurrency, LoadBefore: docsection.LoadAverage(),
	}

	t.Logf("baseline: the servers alone for %s", *window)
	r.Baseline = measureServers(*window)
	t.Logf("baseline: servers %.4f cores, %d goroutines, RSS %.1f MiB",
		r.Baseline.Cores(), r.Baseline.Goroutines, mib(r.Baseline.RSS))

	for i, owners := range []int{1, 2} {
		c := config{
			Name: fmt.Sprintf("%d backend(s) per target", owners), Hosts: addrs, Owners: owners,
			Period: period, Timeout: timeout, Window: *window,
		}
		run := runProber(t, lab, exe, filepath.Join(t.TempDir(), strconv.Itoa(i)), c)
		t.Logf("%s: %d backends, %.0f probes/s (%d failed), prober %.4f cores (%.1f µs/probe), servers %.4f cores; "+
			"heap live %.1f -> %.1f MiB, RSS %.1f -> %.1f MiB; goroutines %.0f (max %d); lateness p50 %s p99 %s max %s (histogram: p99 %s)",
			c.Name, run.Prober.Backends, run.Prober.ProbesPerSecond(), run.Prober.Failed,
			run.Prober.Cores(), run.Prober.MicrosPerProbe(), run.Servers.Cores(),
			mib(run.Prober.Before.HeapLive), mib(run.Prober.During.HeapLive),
			mib(run.Prober.Before.RSS), mib(run.Prober.During.RSSMax),
			run.Prober.During.GoroutinesMean, run.Prober.During.GoroutinesMax,
			ms(run.Prober.Start.P50), ms(run.Prober.Start.P99), ms(run.Prober.Start.Max),
			run.Prober.Lateness.Quantile(0.99))
		r.Runs = append(r.Runs, run)
	}
	r.LoadAfter, r.Took = docsection.LoadAverage(), time.Since(began)

	for _, run := range r.Runs {
		p := run.Prober
		if p.Failed > 0 || p.NotReady > 0 {
			t.Errorf("%s: %d probes failed and %d targets are not ready: every server was up", run.Name, p.Failed, p.NotReady)
		}
		if p.Irregular > 0 {
			t.Errorf("%s: %d times a target was not probed once a period (intervals %s to %s)", run.Name, p.Irregular, p.MinInterval, p.MaxInterval)
		}
	}
	body := r.Markdown()
	t.Log("\n" + body)
	if *report != "" && t.Failed() {
		t.Logf("%s left as it was: the run failed", *report)
	} else if *report != "" {
		// The file holds other sections (churn, failover), which stay.
		if err := docsection.Replace(*report, "probes", body); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote the probes section of %s", *report)
	}
}

// serve starts the hosts and their servers, and returns the hosts' IPv4
// addresses.
func serve(t *testing.T, lab *netlab.Lab) []string {
	t.Helper()
	hs := make([]*netlab.Host, hosts)
	addrs := make([]string, hosts)
	for i := range hs {
		h, err := lab.AddHost(fmt.Sprintf("p%d", i))
		if err != nil {
			t.Fatalf("adding host %d: %v", i, err)
		}
		hs[i], addrs[i] = h, h.Addr4.String()
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, hosts)
	for _, h := range hs {
		wg.Go(func() {
			for n := range portsPerHost {
				port := firstPort + n
				serveOne := h.ServeTCP
				if n >= tcpPorts {
					serveOne = h.ServeHTTP
				}
				if err := serveOne(port); err != nil {
					errs <- fmt.Errorf("serving port %d on %s: %w", port, h.Name, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d hosts serve %d TCP and %d HTTP ports each (%d servers) after %s",
		hosts, tcpPorts, portsPerHost-tcpPorts, targets, time.Since(start).Round(time.Millisecond))
	return addrs
}

// raiseNoFile lifts the soft limit on open files to at least n (the servers'
// listeners and the probes' connections), within the hard limit.
func raiseNoFile(t *testing.T, n uint64) {
	t.Helper()
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		t.Fatal(err)
	}
	if l.Cur >= n {
		return
	}
	if l.Max < n {
		l.Max = n // root may raise the hard limit
	}
	l.Cur = n
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		t.Fatalf("raising RLIMIT_NOFILE to %d (the lab serves %d ports): %v", n, targets, err)
	}
}

// Servers is what the lab's servers (this process) cost over a window, and
// how busy the whole machine was.
type Servers struct {
	CPU        time.Duration
	Wall       time.Duration
	Goroutines int
	RSS        uint64
	// Busy and Steal are the machine's busy and stolen CPU over the window,
	// in cores (from /proc/stat): every process's, not only the test's.
	Busy, Steal float64
}

// Cores is the CPU time over the window, in cores.
func (s Servers) Cores() float64 { return s.CPU.Seconds() / s.Wall.Seconds() }

// measureServers measures this process over d with no prober running.
func measureServers(d time.Duration) Servers {
	c0, t0, m0 := cpuTime(), time.Now(), machineCPU()
	time.Sleep(d)
	return servers(c0, t0, m0)
}

// servers reads this process and the machine since c0, t0 and m0.
func servers(c0 time.Duration, t0 time.Time, m0 cpuStat) Servers {
	s := Servers{CPU: cpuTime() - c0, Wall: time.Since(t0), Goroutines: runtime.NumGoroutine(), RSS: rss()}
	s.Busy, s.Steal = machineCPU().since(m0)
	return s
}

// cpuStat is the first line of /proc/stat: the machine's CPU time so far,
// in clock ticks.
type cpuStat struct{ busy, steal, total uint64 }

// machineCPU reads the machine's CPU time.
func machineCPU() cpuStat {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuStat{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return cpuStat{}
	}
	var v [8]uint64 // user nice system idle iowait irq softirq steal
	for i := range v {
		v[i], _ = strconv.ParseUint(f[i+1], 10, 64)
	}
	var s cpuStat
	for _, x := range v {
		s.total += x
	}
	s.busy = s.total - v[3] - v[4]
	s.steal = v[7]
	return s
}

// since is the machine's busy and stolen CPU since earlier, in cores.
func (s cpuStat) since(earlier cpuStat) (busy, steal float64) {
	total := float64(s.total - earlier.total)
	if total == 0 {
		return 0, 0
	}
	n := float64(runtime.NumCPU())
	return float64(s.busy-earlier.busy) / total * n, float64(s.steal-earlier.steal) / total * n
}

// Run is one configuration: the prober's process and the servers over the
// same window.
type Run struct {
	Name    string
	Prober  Result
	Servers Servers
}

// runProber runs the prober's process for c in dir and measures this
// process (the servers) over the window the prober's process marks.
func runProber(t *testing.T, lab *netlab.Lab, exe, dir string, c config) Run {
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
	// The prober's process writes "start" and "end" of its window to a
	// FIFO. Opened read-write, it never blocks this side nor reads EOF.
	fifo := filepath.Join(dir, "marks")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	marks := make(chan string, 4)
	go func() {
		s := bufio.NewScanner(f)
		for s.Scan() {
			marks <- s.Text()
		}
	}()

	logPath := filepath.Join(dir, "prober.log")
	p, err := lab.Start(logPath, exe, "-test.run=^TestProbeScaleReport$", "-test.v", "-test.timeout=30m", "-child="+dir)
	if err != nil {
		t.Fatal(err)
	}
	fail := func(format string, args ...any) {
		p.Stop()
		out, _ := os.ReadFile(logPath)
		t.Fatalf("%s: %s\nthe prober's process:\n%s", c.Name, fmt.Sprintf(format, args...), out)
	}
	deadline := time.After(c.Period + c.Window + 3*time.Minute)
	var s Servers
	var c0 time.Duration
	var t0 time.Time
	var m0 cpuStat
	exited := p.Exited()
	for ended := false; !ended; {
		select {
		case m := <-marks:
			switch m {
			case "start":
				c0, t0, m0 = cpuTime(), time.Now(), machineCPU()
			case "end":
				s = servers(c0, t0, m0)
				ended = true
			}
		case <-exited:
			fail("exited before its window ended: %v", p.Err())
		case <-deadline:
			fail("still running after %s", c.Period+c.Window+3*time.Minute)
		}
	}
	select {
	case <-exited:
	case <-deadline:
		fail("still running after %s", c.Period+c.Window+3*time.Minute)
	}
	if err := p.Err(); err != nil {
		fail("failed: %v", err)
	}
	rb, err := os.ReadFile(filepath.Join(dir, "result.json"))
	if err != nil {
		fail("no result: %v", err)
	}
	var res Result
	if err := json.Unmarshal(rb, &res); err != nil {
		t.Fatal(err)
	}
	return Run{Name: c.Name, Prober: res, Servers: s}
}

// cpuTime is the user and system CPU time of this process so far (every
// thread, those that ended too).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rss is this process's resident set (VmRSS), in bytes.
func rss() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	return statusKB(string(b), "VmRSS:") * 1024
}

// statusKB is the value in kB of field in /proc/<pid>/status.
func statusKB(status, field string) uint64 {
	s := bufio.NewScanner(strings.NewReader(status))
	for s.Scan() {
		var kb uint64
		if n, _ := fmt.Sscanf(s.Text(), field+" %d kB", &kb); n == 1 {
			return kb
		}
	}
	return 0
}

// cpuModel is the first model name of /proc/cpuinfo.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	s := bufio.NewScanner(strings.NewReader(string(b)))
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
