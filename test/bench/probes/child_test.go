//go:build bench

package probes

import (
	"context"
	"encoding/json"
	"math"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backendslice/backendslice/probe"
)

// Result is what the prober's process measured.
type Result struct {
	Targets, Uses, Backends int
	// Wall is the measured window; User and Sys the process's CPU time in it.
	Wall, User, Sys time.Duration
	// Probes are the probes run in the window, by kind; Failed those that
	// failed. NotReady is the targets not ready at the end.
	Probes   map[string]uint64
	Failed   uint64
	NotReady int
	// MeanDuration is how long a probe took on average, by kind.
	MeanDuration map[string]time.Duration
	// Before is the process before the prober (with the targets already
	// built: they are the caller's); During is the window.
	Before, During Memory
	// Lateness is the prober's lateness histogram over the window.
	Lateness Histogram
	// Start is the exact lateness as seen at the dial: see startLateness.
	Start Quantiles
	// MinInterval and MaxInterval are the shortest and longest time from
	// a probe of a target to its next, for the probes in the window;
	// Irregular counts the intervals off the period by more than half of it
	// (a target probed twice a period, or skipped).
	MinInterval, MaxInterval time.Duration
	Irregular                int
}

// Memory is the process's memory and goroutines.
type Memory struct {
	// HeapLive is the heap in use right after a collection (HeapAlloc);
	// HeapInuseMax the largest HeapInuse of the samples.
	HeapLive, HeapInuseMax uint64
	// RSS is VmRSS (before the prober, or at the end of the window);
	// RSSMax the largest of the samples.
	RSS, RSSMax uint64
	// Goroutines before the prober; GoroutinesMean and GoroutinesMax over
	// the window's samples.
	Goroutines     int
	GoroutinesMean float64
	GoroutinesMax  int
}

// Histogram is a Prometheus histogram over the window: Buckets hold
// cumulative counts.
type Histogram struct {
	Count   uint64
	Sum     float64
	Buckets []Bucket
}

// Bucket is one bucket: observations ≤ Le.
type Bucket struct {
	Le    float64
	Count uint64
}

// Quantile is the upper bound of the bucket holding quantile q ("≤ 1 ms").
func (h Histogram) Quantile(q float64) string {
	if h.Count == 0 {
		return "n/a"
	}
	rank := uint64(math.Ceil(q * float64(h.Count)))
	for _, b := range h.Buckets {
		if b.Count >= rank {
			return "≤ " + seconds(b.Le)
		}
	}
	return "> " + seconds(h.Buckets[len(h.Buckets)-1].Le)
}

// Below is the share of observations ≤ le.
func (h Histogram) Below(le float64) float64 {
	for _, b := range h.Buckets {
		if b.Le == le && h.Count > 0 {
			return float64(b.Count) / float64(h.Count)
		}
	}
	return math.NaN()
}

// Quantiles of a set of durations.
type Quantiles struct {
	N             int
	P50, P99, Max time.Duration
}

// Cores is the window's CPU time in cores.
func (r Result) Cores() float64 { return (r.User + r.Sys).Seconds() / r.Wall.Seconds() }

// AllProbes is the probes of every kind in the window.
func (r Result) AllProbes() uint64 {
	var n uint64
	for _, v := range r.Probes {
		n += v
	}
	return n
}

// ProbesPerSecond is the probes run a second in the window.
func (r Result) ProbesPerSecond() float64 { return float64(r.AllProbes()) / r.Wall.Seconds() }

// MicrosPerProbe is the CPU time of a probe, in µs.
func (r Result) MicrosPerProbe() float64 {
	return float64((r.User + r.Sys).Microseconds()) / float64(r.AllProbes())
}

// runChild is the prober's process: it runs in the lab's node namespace
// (netlab's Start puts it there), so net.Dialer reaches the hosts.
func runChild(t *testing.T, dir string) {
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c config
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	marks, err := os.OpenFile(filepath.Join(dir, "marks"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer marks.Close()
	mark := func(s string) {
		if _, err := marks.WriteString(s + "\n"); err != nil {
			t.Fatal(err)
		}
	}

	// The caller's data (the targets, as the reconciles have them) and the
	// dial log are made before the baseline, so that the difference is the
	// prober's.
	ts := c.targetList()
	backends := c.backends(ts)
	log := newDialLog(ts, int((c.Window+c.Period)/c.Period)+4)
	var d net.Dialer
	dial := func(ctx context.Context, network, address string) (net.Conn, error) {
		log.record(address)
		return d.DialContext(ctx, network, address)
	}
	var res Result
	res.Targets, res.Backends = len(ts), len(backends)
	for _, l := range backends {
		res.Uses += len(l)
	}
	res.Before = baseline()

	reg := prometheus.NewRegistry()
	m, err := probe.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	p := probe.New(probe.Options{Dial: dial, Metrics: m})
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- p.Start(ctx) }()
	for name, l := range backends {
		p.Sync(name, l)
	}
	t.Logf("%s: %d targets, %d backends, %d uses; warm-up %s", c.Name, res.Targets, res.Backends, res.Uses, c.Period)
	time.Sleep(c.Period)

	s0 := gather(t, reg)
	u0, y0 := rusage()
	w0 := time.Now()
	mark("start")
	res.During = sample(w0, c.Window)
	u1, y1 := rusage()
	w1 := time.Now()
	mark("end")
	s1 := gather(t, reg)
	res.Wall, res.User, res.Sys = w1.Sub(w0), u1-u0, y1-y0

	// The live heap with the prober still running.
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	res.During.HeapLive = ms.HeapAlloc
	res.During.RSS = rss()

	for _, tg := range ts {
		if !p.Passing(tg) {
			res.NotReady++
		}
	}
	cancel()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}

	res.Probes, res.Failed, res.MeanDuration = map[string]uint64{}, 0, map[string]time.Duration{}
	for k, v := range s1.results {
		n := uint64(v - s0.results[k])
		res.Probes[k[0]] += n
		if k[1] == "fail" {
			res.Failed += n
		}
	}
	for k, sum := range s1.durationSum {
		if n := s1.durationCount[k] - s0.durationCount[k]; n > 0 {
			res.MeanDuration[k] = time.Duration((sum - s0.durationSum[k]) / float64(n) * float64(time.Second))
		}
	}
	res.Lateness = s1.lateness.minus(s0.lateness)
	res.Start = log.startLateness(c.Period, w0, w1)
	res.MinInterval, res.MaxInterval, res.Irregular = log.intervals(c.Period, w0, w1)

	out, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "result.json"), out, 0o644); err != nil {
		t.Fatal(err)
	}
	// The caller's lists stay alive to the end, as a controller's do: the
	// live heap in the window must not lose what the baseline counted.
	runtime.KeepAlive(backends)
}

// baseline collects garbage, returns what it can to the system, and reads
// the process's memory and goroutines.
func baseline() Memory {
	runtime.GC()
	debug.FreeOSMemory()
	time.Sleep(100 * time.Millisecond)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	r := rss()
	return Memory{HeapLive: ms.HeapAlloc, HeapInuseMax: ms.HeapInuse, RSS: r, RSSMax: r, Goroutines: runtime.NumGoroutine()}
}

// sample reads the memory and goroutines every second from start for d.
func sample(start time.Time, d time.Duration) Memory {
	var m Memory
	var goroutines, n int
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for range int(d/time.Second) + 1 {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		g := runtime.NumGoroutine()
		m.HeapInuseMax, m.RSSMax, m.GoroutinesMax = max(m.HeapInuseMax, ms.HeapInuse), max(m.RSSMax, rss()), max(m.GoroutinesMax, g)
		goroutines += g
		n++
		left := d - time.Since(start)
		if left <= 0 {
			break
		}
		if left < time.Second {
			time.Sleep(left)
			continue
		}
		<-tick.C
	}
	m.GoroutinesMean = float64(goroutines) / float64(n)
	return m
}

// rusage is the process's user and system CPU time so far.
func rusage() (user, sys time.Duration) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

// snapshot is the prober's metrics at one moment.
type snapshot struct {
	// results by kind and result.
	results       map[[2]string]float64
	durationSum   map[string]float64
	durationCount map[string]uint64
	lateness      Histogram
}

// gather reads the prober's metrics from reg.
func gather(t *testing.T, reg *prometheus.Registry) snapshot {
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	s := snapshot{results: map[[2]string]float64{}, durationSum: map[string]float64{}, durationCount: map[string]uint64{}}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			switch mf.GetName() {
			case "backendslice_probe_results_total":
				s.results[[2]string{labels["kind"], labels["result"]}] = m.GetCounter().GetValue()
			case "backendslice_probe_duration_seconds":
				s.durationSum[labels["kind"]] = m.GetHistogram().GetSampleSum()
				s.durationCount[labels["kind"]] = m.GetHistogram().GetSampleCount()
			case "backendslice_probe_lateness_seconds":
				h := m.GetHistogram()
				s.lateness = Histogram{Count: h.GetSampleCount(), Sum: h.GetSampleSum()}
				for _, b := range h.GetBucket() {
					s.lateness.Buckets = append(s.lateness.Buckets, Bucket{Le: b.GetUpperBound(), Count: b.GetCumulativeCount()})
				}
			}
		}
	}
	return s
}

// minus is h less an earlier state of it.
func (h Histogram) minus(earlier Histogram) Histogram {
	out := Histogram{Count: h.Count - earlier.Count, Sum: h.Sum - earlier.Sum}
	for i, b := range h.Buckets {
		if i < len(earlier.Buckets) {
			b.Count -= earlier.Buckets[i].Count
		}
		out.Buckets = append(out.Buckets, b)
	}
	return out
}

// dialLog records when each target was dialled: the test's own view of
// when its probes started. Its memory is allocated up front.
type dialLog struct {
	index map[string]int32
	n     []atomic.Int32
	at    []int64
	per   int
}

func newDialLog(ts []probe.Target, per int) *dialLog {
	l := &dialLog{index: make(map[string]int32, len(ts)), n: make([]atomic.Int32, len(ts)), at: make([]int64, len(ts)*per), per: per}
	for i, t := range ts {
		l.index[net.JoinHostPort(t.Address, strconv.Itoa(int(t.Check.Port)))] = int32(i)
	}
	return l
}

func (l *dialLog) record(address string) {
	now := time.Now().UnixNano()
	i, ok := l.index[address]
	if !ok {
		return
	}
	if k := int(l.n[i].Add(1)) - 1; k < l.per {
		l.at[int(i)*l.per+k] = now
	}
}

// dials are target i's dial times, in order (a target's probes never
// overlap).
func (l *dialLog) dials(i int) []int64 {
	return l.at[i*l.per : i*l.per+min(l.per, int(l.n[i].Load()))]
}

// intervals are the shortest and longest time between a target's probe
// and the one before it, over the probes dialled in [from, to), and how
// many of those are off period by more than half of it.
func (l *dialLog) intervals(period time.Duration, from, to time.Time) (shortest, longest time.Duration, irregular int) {
	shortest = time.Duration(math.MaxInt64)
	for i := range l.n {
		ds := l.dials(i)
		for j := 1; j < len(ds); j++ {
			if ds[j] < from.UnixNano() || ds[j] >= to.UnixNano() {
				continue
			}
			d := time.Duration(ds[j] - ds[j-1])
			shortest, longest = min(shortest, d), max(longest, d)
			if d < period/2 || d > period*3/2 {
				irregular++
			}
		}
	}
	if longest == 0 {
		shortest = 0
	}
	return shortest, longest, irregular
}

// startLateness is the lateness of the window's probes as the dials show
// it. A target's k-th probe is due exactly k periods after its first (the
// prober schedules from the due time, not from when a probe ran), so
// dial_k − k·period is the first due time plus the k-th probe's delay; its
// least value over the target's probes stands for the due time, and each
// probe's lateness is its excess over it. That undercounts by the least
// delay of the target (the warm-up's probes count too), and it counts what
// the prober's histogram does not: from the pop to the dial (the probe's
// goroutine starting, and for HTTP the transport's dial goroutine).
func (l *dialLog) startLateness(period time.Duration, from, to time.Time) Quantiles {
	var late []int64
	p := int64(period)
	for i := range l.n {
		ds := l.dials(i)
		if len(ds) == 0 {
			continue
		}
		base := int64(math.MaxInt64)
		shifted := make([]int64, len(ds))
		for j, d := range ds {
			k := (d - ds[0] + p/2) / p
			shifted[j] = d - k*p
			base = min(base, shifted[j])
		}
		for j, d := range ds {
			if d >= from.UnixNano() && d < to.UnixNano() {
				late = append(late, shifted[j]-base)
			}
		}
	}
	if len(late) == 0 {
		return Quantiles{}
	}
	slices.Sort(late)
	q := func(f float64) time.Duration {
		return time.Duration(late[min(len(late)-1, int(math.Ceil(f*float64(len(late))))-1)])
	}
	return Quantiles{N: len(late), P50: q(0.5), P99: q(0.99), Max: time.Duration(late[len(late)-1])}
}
