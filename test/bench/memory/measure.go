//go:build bench

package memory

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/controllers/externalbackend"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// usage is the process's memory at one moment, in bytes.
type usage struct {
	// Heap is the live heap: HeapAlloc right after a collection.
	Heap int64
	// RSS is VmRSS right after the runtime returned all it could to the OS.
	RSS int64
}

// samples is how many readings a measurement takes, a second apart; it
// keeps their median, so that one reading taken while a goroutine of the
// controller or client-go held a buffer does not decide the figure.
const samples = 3

// measure waits until the controller is idle, then reads the process's
// memory samples times and gives the medians.
func measure(t *testing.T) usage {
	t.Helper()
	waitIdle(t)
	var heaps, rsss []int64
	for i := range samples {
		if i > 0 {
			time.Sleep(time.Second)
		}
		u := read(t)
		heaps, rsss = append(heaps, u.Heap), append(rsss, u.RSS)
	}
	return usage{Heap: median(heaps), RSS: median(rsss)}
}

// read collects garbage twice (objects a finalizer kept alive through the
// first go in the second), returns free memory to the OS, and reads the
// live heap and VmRSS.
func read(t *testing.T) usage {
	t.Helper()
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return usage{Heap: int64(ms.HeapAlloc), RSS: vmRSS(t)}
}

// liveHeap is the live heap after two collections, in bytes.
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// vmRSS is this process's resident set (VmRSS) in bytes.
func vmRSS(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kib, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kib << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// waitIdle waits until the controller has reconciled nothing for 3 s: the
// echoes of its own status writes come back as reconciles after the last
// backend is Ready, and their buffers are not the steady state.
func waitIdle(t *testing.T) {
	t.Helper()
	const quiet = 3 * time.Second
	deadline := time.Now().Add(2 * time.Minute)
	last, since := -1.0, time.Now()
	for time.Since(since) < quiet {
		if time.Now().After(deadline) {
			t.Fatalf("the controller still reconciles 2 minutes after convergence (%.0f reconciles)", last)
		}
		if n, _ := framework.MetricValue(t, "backendslice_reconciles_total", nil); n != last {
			last, since = n, time.Now()
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// median is the middle of xs (the upper one of an even count).
func median(xs []int64) int64 {
	s := slices.Sorted(slices.Values(xs))
	return s[len(s)/2]
}

// point is the process's memory with x backends or endpoints in place.
type point struct {
	X int
	usage
}

// fit is the least-squares line through points: bytes per unit of X, by
// heap and by RSS.
func fit(points []point) (heapSlope, rssSlope float64) {
	var mx, mh, mr float64
	n := float64(len(points))
	for _, p := range points {
		mx += float64(p.X) / n
		mh += float64(p.Heap) / n
		mr += float64(p.RSS) / n
	}
	var sxx, sxh, sxr float64
	for _, p := range points {
		dx := float64(p.X) - mx
		sxx += dx * dx
		sxh += dx * (float64(p.Heap) - mh)
		sxr += dx * (float64(p.RSS) - mr)
	}
	return sxh / sxx, sxr / sxx
}

// kind is one kind of object the controller caches.
type kind struct {
	Name string
	obj  client.Object
	list func() client.ObjectList
	// ours is what the controller's cache selects of it (its label
	// selector), for counting the objects a cache should hold.
	ours []client.ListOption
}

// allKinds are the objects that grow with backends and endpoints.
var allKinds = []kind{
	{Name: "ExternalBackend", obj: &v1alpha1.ExternalBackend{}, list: func() client.ObjectList { return &v1alpha1.ExternalBackendList{} }},
	{
		Name: "Service", obj: &corev1.Service{}, list: func() client.ObjectList { return &corev1.ServiceList{} },
		ours: []client.ListOption{client.HasLabels{v1alpha1.BackendLabel}},
	},
	{
		Name: "EndpointSlice", obj: &discoveryv1.EndpointSlice{}, list: func() client.ObjectList { return &discoveryv1.EndpointSliceList{} },
		ours: []client.ListOption{client.HasLabels{v1alpha1.BackendLabel}},
	},
}

// cacheSetup is what every measured cache shares: built once, so that a
// cache's heap is its informer's and not a new REST mapper's or HTTP
// client's.
type cacheSetup struct {
	cfg *rest.Config
	// options are the three caches measured side by side.
	options [variants]cache.Options
}

// The variants of the caches: the controller's options, the same without
// transforms (label selectors kept), and the same with every object cut
// down to its key (what an informer costs whatever a transform drops).
const (
	withTransforms = iota
	withoutTransforms
	keysOnly
	variants
)

// newCacheSetup builds the options of the variants from
// externalbackend.CacheOptions.
func newCacheSetup(t *testing.T) cacheSetup {
	t.Helper()
	env := framework.E()
	httpClient, err := rest.HTTPClientFor(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	with, err := externalbackend.CacheOptions("")
	if err != nil {
		t.Fatal(err)
	}
	with.Scheme, with.Mapper, with.HTTPClient = env.Client.Scheme(), env.Client.RESTMapper(), httpClient
	s := cacheSetup{cfg: env.Config()}
	s.options[withTransforms] = with
	for v, transform := range map[int]toolscache.TransformFunc{withoutTransforms: nil, keysOnly: toKey} {
		opts := with
		opts.DefaultTransform = nil
		opts.ByObject = make(map[client.Object]cache.ByObject, len(with.ByObject))
		for obj, by := range with.ByObject {
			by.Transform = transform
			opts.ByObject[obj] = by
		}
		s.options[v] = opts
	}
	return s
}

// toKey is a transform that replaces an object by a new one of its type
// with only its name, namespace and resource version.
func toKey(o any) (any, error) {
	obj, ok := o.(client.Object)
	if !ok {
		return o, nil
	}
	key, ok := reflect.New(reflect.TypeOf(obj).Elem()).Interface().(client.Object)
	if !ok {
		return nil, fmt.Errorf("%T: a new one is no client.Object", o)
	}
	key.SetName(obj.GetName())
	key.SetNamespace(obj.GetNamespace())
	key.SetResourceVersion(obj.GetResourceVersion())
	return key, nil
}

// cacheHeap starts a cache of opts limited to namespace ns with the one
// informer of k, waits for it to sync, and gives the live heap it added and
// how many objects it holds.
func cacheHeap(ctx context.Context, t *testing.T, s cacheSetup, opts cache.Options, ns string, k kind) (heap int64, objects int) {
	t.Helper()
	opts.DefaultNamespaces = map[string]cache.Config{ns: {}}
	before := liveHeap()
	c, err := cache.New(s.cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetInformer(ctx, k.obj); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		t.Fatalf("a cache of %s in %s did not sync", k.Name, ns)
	}
	heap = liveHeap() - before
	// Counted after the reading: the list is the test's, not the cache's.
	list := k.list()
	if err := c.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		t.Fatal(err)
	}
	objects = meta.LenList(list)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return heap, objects
}

// cacheRow is one kind's cache in one namespace, by variant: the median
// over cacheRounds of the heap each added, less an empty cache's.
type cacheRow struct {
	Kind    string
	Objects int
	Heap    [variants]int64
	// Spread is the widest gap between two rounds of one variant: how far
	// a figure of the row can be trusted.
	Spread int64
}

// cacheRounds is how many times each cache is built; the rounds alternate
// the variants, so that a drift of the controller's own heap weighs on all
// alike.
const cacheRounds = 5

// measureCaches measures, for each of kinds, a cache of each variant over
// namespace ns, net of a cache over the empty namespace empty built in the
// same round (an informer's own cost: its goroutines' heap, its watch's
// first buffers). It fails if a cache holds other than the objects the
// API server has.
func measureCaches(ctx context.Context, t *testing.T, s cacheSetup, ns, empty string, kinds []kind) []cacheRow {
	t.Helper()
	var rows []cacheRow
	for _, k := range kinds {
		want, err := count(ctx, ns, k)
		if err != nil {
			t.Fatal(err)
		}
		row := cacheRow{Kind: k.Name, Objects: want}
		var rounds [variants][]int64
		for range cacheRounds {
			bare, _ := cacheHeap(ctx, t, s, s.options[withTransforms], empty, k)
			for v, opts := range s.options {
				full, n := cacheHeap(ctx, t, s, opts, ns, k)
				if n != want {
					t.Fatalf("a cache of %s in %s holds %d objects, the API server %d", k.Name, ns, n, want)
				}
				rounds[v] = append(rounds[v], full-bare)
			}
		}
		for v, r := range rounds {
			row.Heap[v] = median(r)
			row.Spread = max(row.Spread, slices.Max(r)-slices.Min(r))
		}
		t.Logf("cache of %s in %s (%d objects): with the transforms, without, keys only: %v", k.Name, ns, want, rounds)
		rows = append(rows, row)
	}
	return rows
}

// count is how many objects of k in ns the controller's cache selects,
// as the API server lists them.
func count(ctx context.Context, ns string, k kind) (int, error) {
	n := 0
	list := k.list()
	err := eachPage(ctx, ns, list, func() { n += meta.LenList(list) }, k.ours...)
	if err != nil {
		return 0, fmt.Errorf("counting %s in %s: %w", k.Name, ns, err)
	}
	return n, nil
}

// totals sums the rows by variant.
func totals(rows []cacheRow) [variants]int64 {
	var out [variants]int64
	for _, r := range rows {
		for v := range out {
			out[v] += r.Heap[v]
		}
	}
	return out
}
