//go:build bench

package scale

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"golang.org/x/sync/errgroup"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/controllers"
	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/test/docsection"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// docs is where the report goes.
var docs = flag.String("docs", filepath.Join("..", "..", "..", "docs"), "directory for benchmarks-scale.md")

// only, if set, names the one scenario to run (a or b).
var only = flag.String("only", "", "run only this scenario (a or b)")

// workers is the controller's --concurrent in the benchmark.
var workers = flag.Int("concurrent", controllers.DefaultConcurrency, "the controller's workers")

// serverProfile, if set, is where a CPU profile of the API server is
// written, taken while the controller converges scenario b from stored specs.
var serverProfile = flag.String("serverprofile", "", "write a CPU profile of the API server during (b) from stored specs to this file, and one during (b)'s bare client + status patch to this file with .bare appended")

// steady is how long nothing changes in the last phase.
const steady = 60 * time.Second

// convergeTimeout bounds each wait for the controller.
const convergeTimeout = 15 * time.Minute

var (
	// controllerRequests counts the requests of the controller's client.
	controllerRequests counter
	// providerCalls counts the static provider's calls.
	providerCalls atomic.Int64
)

func TestMain(m *testing.M) {
	// The controller starts before m.Run, which would parse the flags.
	flag.Parse()
	os.Exit(framework.Run(m, framework.Options{
		Providers: func(providers.Waker) ([]providers.Provider, error) {
			return []providers.Provider{countingStatic{calls: &providerCalls}}, nil
		},
		WrapTransport: controllerRequests.wrap,
		Concurrency:   *workers,
	}))
}

// TestScaleReport converges each scenario from empty and after a 10% change,
// next to a bare client creating the same objects, then leaves everything
// alone for a minute, and writes docs/benchmarks-scale.md.
func TestScaleReport(t *testing.T) {
	ctx := context.Background()
	env := framework.E()
	var bareRequests counter
	bareCfg := rest.CopyConfig(env.Config())
	bareCfg.Wrap(bareRequests.wrap)
	bare, err := client.New(bareCfg, client.Options{Scheme: env.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	addServiceCIDR(t)
	watcher := watch(ctx, t)
	var results []result
	for _, sc := range scenarios {
		if *only != "" && sc.Name != *only {
			continue
		}
		r := result{scenario: sc}
		initial := sc.backends("ours-"+sc.Name, false)

		bareNS := namespace(t, "bare-"+sc.Name)
		ps, err := plan(ctx, initial, bareNS, framework.TestConfig())
		if err != nil {
			t.Fatal(err)
		}
		r.bareEmpty = runBare(t, &bareRequests, func() (int, error) { return createAll(ctx, bare, ps) })
		changed := sc.backends(bareNS, true)
		r.bareChange = runBare(t, &bareRequests, func() (int, error) { return updateAll(ctx, bare, ps, want(initial), want(changed)) })
		clearNamespace(ctx, t, watcher, bareNS)

		r.bareStatus, r.bareStatusChange = floorWithStatus(ctx, t, sc, "bare-status-"+sc.Name, bare, &bareRequests, watcher, nil)
		if *floorWatches {
			for _, w := range floorWatchVariants {
				empty, change := floorWithStatus(ctx, t, sc, "bare-"+w.name+"-"+sc.Name, bare, &bareRequests, watcher, w.watch)
				r.floorWatched = append(r.floorWatched, floorWatched{variant: w, empty: empty, change: change})
			}
		}

		// The same fleet, stored while no controller runs: the controller
		// starting on it has only its own writes to make, as the bare client.
		stored := sc.backends(namespace(t, "stored-"+sc.Name), false)
		var s sample
		framework.RestartControllerAfter(t, func() {
			if err := inParallel(ctx, stored, func(ctx context.Context, xb *v1alpha1.ExternalBackend) error {
				return env.Client.Create(ctx, xb)
			}); err != nil {
				t.Fatal(err)
			}
			s = take(t, &controllerRequests, &providerCalls)
			// The new controller's metrics start from zero.
			s.writes, s.reconciles = map[string]float64{}, 0
		})
		if *serverProfile != "" && sc.Name == "b" {
			go profileServer(t, *serverProfile, 20*time.Second)
		}
		if err := waitConverged(ctx, t, watcher, stored[0].Namespace, want(stored), convergeTimeout); err != nil {
			t.Fatal(err)
		}
		r.phases = append(r.phases, between(t, "from stored specs", s, take(t, &controllerRequests, &providerCalls)))
		clearNamespace(ctx, t, watcher, stored[0].Namespace)

		ns := namespace(t, "ours-"+sc.Name)
		a := take(t, &controllerRequests, &providerCalls)
		if err := inParallel(ctx, initial, func(ctx context.Context, xb *v1alpha1.ExternalBackend) error {
			return env.Client.Create(ctx, xb)
		}); err != nil {
			t.Fatal(err)
		}
		specWrites := time.Since(a.at)
		if err := waitConverged(ctx, t, watcher, ns, want(initial), convergeTimeout); err != nil {
			t.Fatal(err)
		}
		b := take(t, &controllerRequests, &providerCalls)
		fromEmpty := between(t, "from empty", a, b)
		fromEmpty.SpecWrites = specWrites
		r.phases = append(r.phases, fromEmpty)

		changed = sc.backends(ns, true)
		b.at = time.Now()
		var touched []*v1alpha1.ExternalBackend
		for i, xb := range changed {
			if specChanged(initial[i], xb) {
				touched = append(touched, xb)
			}
		}
		if err := inParallel(ctx, touched, func(ctx context.Context, xb *v1alpha1.ExternalBackend) error {
			// The controller's status writes can race the update.
			return retry.RetryOnConflict(retry.DefaultRetry, func() error {
				cur := &v1alpha1.ExternalBackend{}
				if err := env.Client.Get(ctx, client.ObjectKeyFromObject(xb), cur); err != nil {
					return err
				}
				cur.Spec = xb.Spec
				return env.Client.Update(ctx, cur)
			})
		}); err != nil {
			t.Fatal(err)
		}
		specWrites = time.Since(b.at)
		if err := waitConverged(ctx, t, watcher, ns, want(changed), convergeTimeout); err != nil {
			t.Fatal(err)
		}
		c := take(t, &controllerRequests, &providerCalls)
		change := between(t, "10% change", b, c)
		change.SpecWrites = specWrites
		r.phases = append(r.phases, change)
		results = append(results, r)
		t.Logf("scenario %s: bare %+v, %+v; ours %+v", sc.Name, r.bareEmpty, r.bareChange, r.phases)
	}

	a := take(t, &controllerRequests, &providerCalls)
	time.Sleep(steady)
	idle := between(t, "no change, 60 s", a, take(t, &controllerRequests, &providerCalls))
	t.Logf("steady: %+v", idle)

	var md bytes.Buffer
	lists := measureLists(ctx, t, namespace(t, "list-latency"))
	patches := measurePatches(ctx, t, namespace(t, "patch-cost"))
	writeMarkdown(&md, results, idle, *workers, lists, patches)
	if err := docsection.Replace(filepath.Join(*docs, "benchmarks-scale.md"), "converge", md.String()); err != nil {
		t.Fatal(err)
	}
}

// floorWithStatus runs the bare client's writes plus one status patch per
// backend, as the controller makes them: the floor of a controller that
// reports status, in namespace ns, from empty and for the change. The
// specs are stored first, untimed, while no controller runs, and gone
// again before it starts. If watch is set, it starts watches standing for
// the controller's before the floor's writes, and stops them after.
func floorWithStatus(ctx context.Context, t *testing.T, sc scenario, ns string, bare client.Client, bareRequests *counter, watcher client.Reader, watch func(ctx context.Context, t *testing.T) func()) (empty, change bareRun) {
	t.Helper()
	env := framework.E()
	statusNS := namespace(t, ns)
	withStatus := sc.backends(statusNS, false)
	sps, err := plan(ctx, withStatus, statusNS, framework.TestConfig())
	if err != nil {
		t.Fatal(err)
	}
	framework.RestartControllerAfter(t, func() {
		if err := inParallel(ctx, withStatus, func(ctx context.Context, xb *v1alpha1.ExternalBackend) error {
			return env.Client.Create(ctx, xb)
		}); err != nil {
			t.Fatal(err)
		}
		if watch != nil {
			stop := watch(ctx, t)
			defer stop()
		}
		if *serverProfile != "" && sc.Name == "b" && watch == nil {
			go profileServer(t, *serverProfile+".bare", 20*time.Second)
		}
		empty = runBare(t, bareRequests, func() (int, error) { return createAllWithStatus(ctx, bare, sps, withStatus) })
		// The user's edit, untimed, so that each status patch of the
		// change is for a new generation.
		from, edited := want(withStatus), sc.backends(statusNS, true)
		var touched []int
		for i := range withStatus {
			if specChanged(withStatus[i], edited[i]) {
				touched = append(touched, i)
			}
		}
		if _, err := eachBackend(ctx, len(touched), func(ctx context.Context, k int) (int, error) {
			xb := withStatus[touched[k]]
			xb.Spec = edited[touched[k]].Spec
			return 0, env.Client.Update(ctx, xb)
		}); err != nil {
			t.Fatal(err)
		}
		change = runBare(t, bareRequests, func() (int, error) {
			return updateAllWithStatus(ctx, bare, sps, withStatus, from, want(edited))
		})
		clearNamespace(ctx, t, watcher, statusNS)
	})
	return empty, change
}

// watch starts an informer cache of ExternalBackends and EndpointSlices for
// the test to look at: polling full lists of 2,000 backends and 4,000
// slices every 250 ms would load the API server more than the controller.
func watch(ctx context.Context, t *testing.T) client.Reader {
	t.Helper()
	env := framework.E()
	c, err := cache.New(env.Config(), cache.Options{Scheme: env.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	// Ask for both informers now, so that they run before the phases start.
	for _, o := range []client.Object{&v1alpha1.ExternalBackend{}, &discoveryv1.EndpointSlice{}} {
		if _, err := c.GetInformer(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	startCache(ctx, t, c)
	return c
}

// startCache runs the test's cache c until the test ends, and waits for
// it to sync.
func startCache(ctx context.Context, t *testing.T, c cache.Cache) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	go func() {
		if err := c.Start(ctx); err != nil {
			t.Error(err)
		}
	}()
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("the test's cache did not sync")
	}
}

// specWriters is how many ExternalBackend writes the test has in flight,
// as a GitOps tool applying a large commit would.
const specWriters = 8

// inParallel runs write for every backend, specWriters at a time.
func inParallel(ctx context.Context, xbs []*v1alpha1.ExternalBackend, write func(context.Context, *v1alpha1.ExternalBackend) error) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(specWriters)
	for _, xb := range xbs {
		g.Go(func() error { return write(ctx, xb) })
	}
	return g.Wait()
}

// runBare runs one step of the bare client and measures it; step returns
// how many objects it wrote.
func runBare(t *testing.T, requests *counter, step func() (int, error)) bareRun {
	t.Helper()
	before, server, start := requests.snapshot(), serverCPU(t), time.Now()
	writes, err := step()
	if err != nil {
		t.Fatal(err)
	}
	r := bareRun{took: time.Since(start), writes: writes, serverCPU: serverCPU(t).minus(server)}
	for k, v := range requests.snapshot() {
		r.requests += v - before[k]
	}
	return r
}

// namespace creates namespace name.
func namespace(t *testing.T, name string) string {
	t.Helper()
	if err := framework.E().Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	return name
}

// specChanged tells whether the change touched a backend.
func specChanged(a, b *v1alpha1.ExternalBackend) bool {
	return !equality.Semantic.DeepEqual(a.Spec, b.Spec)
}

// addServiceCIDR adds room for the scenarios' 4,000 Services: the control
// plane's own range is a /24. No kube-controller-manager runs to mark it
// Ready; the API server's allocator takes a ServiceCIDR without conditions
// as ready.
func addServiceCIDR(t *testing.T) {
	t.Helper()
	cidr := &networkingv1.ServiceCIDR{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-scale"},
		Spec:       networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.100.0.0/16", "fd00:10:100::/112"}},
	}
	if err := framework.E().Client.Create(context.Background(), cidr); err != nil {
		t.Fatal(err)
	}
}

// profileServer takes a CPU profile of the API server for d (its
// /debug/pprof, which the administrator may read) and writes it to path.
func profileServer(t *testing.T, path string, d time.Duration) {
	cfg := framework.E().Config()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Error(err)
		return
	}
	resp, err := hc.Get(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", strings.TrimRight(cfg.Host, "/"), int(d.Seconds())))
	if err != nil {
		t.Error(err)
		return
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %s", resp.Status, body)
	}
	if err == nil {
		err = os.WriteFile(path, body, 0o644)
	}
	if err != nil {
		t.Errorf("profiling the API server: %v", err)
	}
}

// clearNamespace deletes the ExternalBackends of ns, then the Services and
// slices left (no garbage collector runs beside the test's API server), so
// that every phase that creates Services starts from the same number of
// allocated ClusterIPs: the API server's allocator lists every allocated
// address of the range at each allocation, so a Service costs it more the
// more there are.
func clearNamespace(ctx context.Context, t *testing.T, watcher client.Reader, ns string) {
	t.Helper()
	c := framework.E().Client
	if err := c.DeleteAllOf(ctx, &v1alpha1.ExternalBackend{}, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	// The Services go once the controller has seen the backends go (the
	// test's watch stands for its cache, with a margin): else it restores
	// them, and its writes are counted in the next phase.
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var left v1alpha1.ExternalBackendList
		err := watcher.List(ctx, &left, client.InNamespace(ns))
		return len(left.Items) == 0, err
	})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	var svcs corev1.ServiceList
	if err := c.List(ctx, &svcs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(specWriters)
	for i := range svcs.Items {
		g.Go(func() error { return client.IgnoreNotFound(c.Delete(gctx, &svcs.Items[i])) })
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteAllOf(ctx, &discoveryv1.EndpointSlice{}, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
}
