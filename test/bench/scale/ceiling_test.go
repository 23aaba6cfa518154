//go:build bench

package scale

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/bench/benchspec"
	"github.com/backendslice/backendslice/test/docsection"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// fleets are the sizes, in backends, at which the ceiling benchmark times
// single changes.
var fleets = flag.String("fleets", "5000,10000,20000", "fleet sizes in backends (TestCeilingReport)")

// changes is how many single changes are timed at each fleet size.
var changes = flag.Int("changes", 100, "single changes timed at each fleet size (TestCeilingReport)")

// changeGap spaces the single changes, so that each is timed alone.
const changeGap = 100 * time.Millisecond

// quiet is how long the idle cost is measured at each fleet size.
const quiet = 20 * time.Second

// step is what was measured at one fleet size.
type step struct {
	backends int
	// grow is the phase that created the backends added at this size.
	grow phase
	// latency holds each single change's time from the spec write to the
	// slice showing it, sorted.
	latency []time.Duration
	// change is the phase of the single changes; idle the quiet after it.
	change, idle phase
	heapMiB      float64
}

// TestCeilingReport grows one fleet of dual-stack backends (5 endpoints,
// as scenario b) to each size of -fleets. At each it times -changes single
// changes, one at a time, from the spec write to the test's watch seeing
// the new address in the backend's slice, and the cost of doing nothing.
// At the largest, it restarts the controller and times a change made while
// the new controller looks at every backend. It writes the ceiling section
// of docs/benchmarks-scale.md.
func TestCeilingReport(t *testing.T) {
	ctx := context.Background()
	env := framework.E()
	sizes, err := parseSizes(*fleets)
	if err != nil {
		t.Fatal(err)
	}
	addServiceCIDR(t)
	ns := namespace(t, "ceiling")
	w := newChangeWatch(ctx, t)
	rng := rand.New(rand.NewPCG(1, 2))
	var fleet []*v1alpha1.ExternalBackend
	var steps []step
	changed := 0
	for _, size := range sizes {
		a := take(t, &controllerRequests, &providerCalls)
		added := fleetBackends(ns, len(fleet), size)
		if err := inParallel(ctx, added, func(ctx context.Context, xb *v1alpha1.ExternalBackend) error {
			return env.Client.Create(ctx, xb)
		}); err != nil {
			t.Fatal(err)
		}
		fleet = append(fleet, added...)
		if err := w.waitReady(ctx, t, size); err != nil {
			t.Fatal(err)
		}
		st := step{backends: size, grow: between(t, fmt.Sprintf("grow to %d", size), a, take(t, &controllerRequests, &providerCalls))}

		b := take(t, &controllerRequests, &providerCalls)
		for range *changes {
			st.latency = append(st.latency, w.timeChange(ctx, t, fleet[rng.IntN(len(fleet))], changed))
			changed++
			time.Sleep(changeGap)
		}
		slices.Sort(st.latency)
		c := take(t, &controllerRequests, &providerCalls)
		st.change = between(t, fmt.Sprintf("%d single changes", *changes), b, c)
		time.Sleep(quiet)
		st.idle = between(t, "idle", c, take(t, &controllerRequests, &providerCalls))
		st.heapMiB = liveHeapMiB()
		steps = append(steps, st)
		t.Logf("%d backends: grow %s, change p50 %s p99 %s, idle %+v", size, st.grow.Took, percentile(st.latency, 50), percentile(st.latency, 99), st.idle)
	}

	// A restart at the largest size: every backend is looked at again, and
	// a change made meanwhile must not wait for all of them.
	var s sample
	framework.RestartControllerAfter(t, func() {
		s = take(t, &controllerRequests, &providerCalls)
		s.writes, s.reconciles = map[string]float64{}, 0
	})
	duringRestart := w.timeChange(ctx, t, fleet[rng.IntN(len(fleet))], changed)
	restart, err := waitReconciles(t, s, len(fleet))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("restart: %+v, change during it %s", restart, duringRestart)

	var md bytes.Buffer
	writeCeiling(&md, steps, restart, duringRestart)
	if err := docsection.Replace(filepath.Join(*docs, "benchmarks-scale.md"), "ceiling", md.String()); err != nil {
		t.Fatal(err)
	}
	// The one change made during the restart is the only thing to write.
	if n := restart.Requests["patch externalbackends/status"]; n > 1 {
		t.Errorf("restart of an unchanged fleet: %d status patches, want at most 1 (the change made meanwhile)", n)
	}
	for _, st := range steps {
		if n := total(st.idle.Writes); n != 0 {
			t.Errorf("%d backends: %d writes while nothing changed", st.backends, n)
		}
	}
}

// parseSizes reads -fleets: increasing sizes.
func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || (len(out) > 0 && n <= out[len(out)-1]) {
			return nil, fmt.Errorf("-fleets=%q: want increasing positive sizes", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// fleetBackends are backends from..to-1 of the fleet.
func fleetBackends(ns string, from, to int) []*v1alpha1.ExternalBackend {
	out := make([]*v1alpha1.ExternalBackend, 0, to-from)
	for j := from; j < to; j++ {
		xb := benchspec.Small(ns, "c", j)
		// Headless: the API server's ClusterIP allocator lists every
		// allocated address at each allocation, so with ClusterIPs the
		// growth would measure it more than the controller.
		xb.Spec.Service.Type = v1alpha1.ServiceTypeHeadless
		out = append(out, xb)
	}
	return out
}

// changeWatch is the test's view of the fleet: an informer cache trimmed
// to what the test reads (readiness of backends, addresses of slices), so
// that 20,000 backends and 40,000 slices cost the test process little, and
// a handler that tells when a slice shows an awaited address.
type changeWatch struct {
	reader client.Reader
	mu     sync.Mutex
	// awaited is the Service and address a change waits for; seen gets
	// the moment a slice of that Service shows it.
	awaited struct{ service, address string }
	seen    chan time.Time
}

func newChangeWatch(ctx context.Context, t *testing.T) *changeWatch {
	t.Helper()
	env := framework.E()
	c, err := cache.New(env.Config(), cache.Options{Scheme: env.Client.Scheme(), ByObject: map[client.Object]cache.ByObject{
		&v1alpha1.ExternalBackend{}:  {Transform: readinessOnly},
		&discoveryv1.EndpointSlice{}: {Transform: addressesOnly},
	}})
	if err != nil {
		t.Fatal(err)
	}
	w := &changeWatch{reader: c, seen: make(chan time.Time, 1)}
	inf, err := c.GetInformer(ctx, &discoveryv1.EndpointSlice{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { w.look(o) },
		UpdateFunc: func(_, o any) { w.look(o) },
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetInformer(ctx, &v1alpha1.ExternalBackend{}); err != nil {
		t.Fatal(err)
	}
	startCache(ctx, t, c)
	return w
}

// readinessOnly keeps of a backend what waitReady reads.
func readinessOnly(o any) (any, error) {
	xb, ok := o.(*v1alpha1.ExternalBackend)
	if !ok {
		return o, nil
	}
	return &v1alpha1.ExternalBackend{
		ObjectMeta: metav1.ObjectMeta{Namespace: xb.Namespace, Name: xb.Name, Generation: xb.Generation, ResourceVersion: xb.ResourceVersion},
		Status:     v1alpha1.ExternalBackendStatus{ObservedGeneration: xb.Status.ObservedGeneration, Conditions: xb.Status.Conditions},
	}, nil
}

// addressesOnly keeps of a slice its Service and addresses.
func addressesOnly(o any) (any, error) {
	s, ok := o.(*discoveryv1.EndpointSlice)
	if !ok {
		return o, nil
	}
	out := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{
		Namespace: s.Namespace, Name: s.Name, ResourceVersion: s.ResourceVersion,
		Labels: map[string]string{discoveryv1.LabelServiceName: s.Labels[discoveryv1.LabelServiceName]},
	}}
	for _, e := range s.Endpoints {
		out.Endpoints = append(out.Endpoints, discoveryv1.Endpoint{Addresses: e.Addresses})
	}
	return out, nil
}

// look signals seen when o is a slice of the awaited Service showing the
// awaited address.
func (w *changeWatch) look(o any) {
	s, ok := o.(*discoveryv1.EndpointSlice)
	if !ok {
		return
	}
	w.mu.Lock()
	want := w.awaited
	w.mu.Unlock()
	if s.Labels[discoveryv1.LabelServiceName] != want.service {
		return
	}
	for _, e := range s.Endpoints {
		if slices.Contains(e.Addresses, want.address) {
			select {
			case w.seen <- time.Now():
			default:
			}
			return
		}
	}
}

// timeChange replaces xb's first IPv4 address with the n-th new one and
// times it from the spec write until a slice shows it.
func (w *changeWatch) timeChange(ctx context.Context, t *testing.T, xb *v1alpha1.ExternalBackend, n int) time.Duration {
	t.Helper()
	addr := fmt.Sprintf("10.250.%d.%d", n/250, n%250+1)
	w.mu.Lock()
	w.awaited.service, w.awaited.address = xb.Name, addr
	w.mu.Unlock()
	select {
	case <-w.seen: // a late signal of an earlier change
	default:
	}
	start := time.Now()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &v1alpha1.ExternalBackend{}
		if err := framework.E().Client.Get(ctx, client.ObjectKeyFromObject(xb), cur); err != nil {
			return err
		}
		cur.Spec.Sources[0].Static.Endpoints[0].Address = addr
		return framework.E().Client.Update(ctx, cur)
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case at := <-w.seen:
		return at.Sub(start)
	case <-time.After(convergeTimeout):
		t.Fatalf("%s: %s not in a slice after %s", xb.Name, addr, convergeTimeout)
		return 0
	}
}

// waitReady waits until n backends are Ready for their generation, looking
// every 2 s (a list of 20,000 from the cache is not free).
func (w *changeWatch) waitReady(ctx context.Context, t *testing.T, n int) error {
	t.Helper()
	start := time.Now()
	for {
		var list v1alpha1.ExternalBackendList
		if err := w.reader.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
			return err
		}
		ready := 0
		for i := range list.Items {
			xb := &list.Items[i]
			c := meta.FindStatusCondition(xb.Status.Conditions, v1alpha1.ConditionReady)
			if c != nil && c.Status == metav1.ConditionTrue && xb.Status.ObservedGeneration == xb.Generation {
				ready++
			}
		}
		if ready >= n {
			return nil
		}
		if time.Since(start) > convergeTimeout {
			return fmt.Errorf("%d of %d backends Ready after %s", ready, n, convergeTimeout)
		}
		time.Sleep(2 * time.Second)
	}
}

// waitReconciles waits until the controller started at s has reconciled n
// backends, and gives the phase.
func waitReconciles(t *testing.T, s sample, n int) (phase, error) {
	t.Helper()
	for {
		now := take(t, &controllerRequests, &providerCalls)
		if int(now.reconciles) >= n {
			return between(t, "restart", s, now), nil
		}
		if time.Since(s.at) > convergeTimeout {
			return phase{}, fmt.Errorf("%d of %d backends reconciled after %s", int(now.reconciles), n, convergeTimeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// liveHeapMiB is the process's live heap after a collection.
func liveHeapMiB() float64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc) / (1 << 20)
}

// writeCeiling writes the ceiling section.
func writeCeiling(w *bytes.Buffer, steps []step, restart phase, duringRestart time.Duration) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("## The ceiling of one replica\n\n")
	p("Generated by `make bench-ceiling` (`test/bench/scale`, `TestCeilingReport`). ")
	p("One fleet of dual-stack backends of 5 static endpoints (3 IPv4, 2 IPv6; two slices and a headless Service each) grows to each size ")
	p("(headless because the API server's ClusterIP allocator lists every allocated address at each allocation, which would make ")
	p("the growth measure the allocator more than the controller; a single change does not touch the Service either way); ")
	p("at each, %d single changes, one at a time %s apart, each replacing one address of a random backend, are timed ", *changes, changeGap)
	p("from the spec write until the test's watch sees the new address in that backend's slice; then nothing changes for %s. ", quiet)
	p("The controller runs in the test process with %d workers, no client-side rate limit, against a real kube-apiserver and etcd ", *workers)
	p("on the same machine (%s/%s, %d CPUs, %s). ", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version())
	p("Live heap is the whole test process after a collection (controller, the test's trimmed watch cache of the fleet, client buffers); ")
	p("the controller's own memory per backend is in the memory section.\n\n")
	p("| backends | grow: time (backends/s) | change p50 | p90 | p99 | max | reconciles / change | requests / change | idle: requests | idle: CPU ours / API server / etcd (per s) | live heap | peak RSS |\n")
	p("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, st := range steps {
		added := st.grow.Reconciles
		rate := float64(added) / st.grow.Took.Seconds()
		perS := func(d time.Duration) string { return fmt.Sprintf("%.0f ms", perSecond(d, st.idle.Took)) }
		n := float64(len(st.latency))
		p("| %d | %s (%.0f) | %s | %s | %s | %s | %.2f | %.2f | %d | %s / %s / %s | %.0f MiB | %d MiB |\n",
			st.backends, round(st.grow.Took), rate,
			ms(percentile(st.latency, 50)), ms(percentile(st.latency, 90)), ms(percentile(st.latency, 99)), ms(st.latency[len(st.latency)-1]),
			float64(st.change.Reconciles)/n, float64(total(st.change.Requests))/n, total(st.idle.Requests),
			perS(st.idle.CPU), perS(st.idle.ServerCPU.apiserver), perS(st.idle.ServerCPU.etcd), st.heapMiB, st.idle.PeakRSSKiB/1024)
	}
	last := steps[len(steps)-1]
	p("\n**Restart at %d backends** (a new controller, caches filled from the API server, no memory of its own writes): ", last.backends)
	p("it looked at every backend in %s (%d reconciles, %s of its CPU, %d requests: %s; writes: %s). ",
		round(restart.Took), restart.Reconciles, round(restart.CPU), total(restart.Requests), byKey(restart.Requests), byKey(restart.Writes))
	p("A change made as it started (before its cache had synced, so that the change is part of the initial list) reached its slice in %s: ", ms(duringRestart))
	p("the initial list's backends whose status shows their generation handled go behind the others in the queue.\n\n")
	if len(steps) > 1 {
		first := steps[0]
		dn := float64(last.backends-first.backends) / 1000
		p("**Per 1,000 backends** (slope from %d to %d): live heap %+.1f MiB; idle CPU of the controller %+.1f ms/s; ",
			first.backends, last.backends, (last.heapMiB-first.heapMiB)/dn,
			(perSecond(last.idle.CPU, last.idle.Took)-perSecond(first.idle.CPU, first.idle.Took))/dn)
		p("single-change p99 %+.1f ms. Restart: %.2f s per 1,000 backends.\n\n",
			float64((percentile(last.latency, 99)-percentile(first.latency, 99)).Microseconds())/1000/dn,
			restart.Took.Seconds()/float64(last.backends)*1000)
	}
	p("Rerun: `make bench-ceiling` (`FLEETS=5000,10000,20000`, `-args -changes N`).\n")
}

// perSecond is d per second of span, in milliseconds.
func perSecond(d, span time.Duration) float64 {
	return float64(d.Milliseconds()) / span.Seconds()
}

// ms rounds a latency to the millisecond.
func ms(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
