//go:build bench

package memory

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/providers/static"
	"github.com/backendslice/backendslice/test/docsection"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

var (
	// docs is where the report goes.
	docs = flag.String("docs", filepath.Join("..", "..", "..", "docs"), "directory of benchmarks-scale.md")
	// fleet is the largest fleet; it is also measured at a quarter and a
	// half of its size.
	fleet = flag.Int("fleet", 4000, "backends of the largest fleet")
	// endpoints is the size of each of the two large backends.
	endpoints = flag.Int("endpoints", 10000, "endpoints of each large backend")
)

// maxApplied is the most endpoints of a backend written by client-side apply.
const maxApplied = 5000

// TestMain starts the control plane and the controller, with the static
// provider, for the one test.
func TestMain(m *testing.M) {
	// The controller starts before m.Run, which would parse the flags.
	flag.Parse()
	os.Exit(framework.Run(m, framework.Options{
		Providers: func(providers.Waker) ([]providers.Provider, error) {
			return []providers.Provider{static.New()}, nil
		},
	}))
}

// TestMemoryReport measures the process of the controller (the test
// process) with growing fleets of small backends, then with large
// backends, then the controller's caches of what it holds with and
// without their transforms, and writes the memory section of
// docs/benchmarks-scale.md.
func TestMemoryReport(t *testing.T) {
	start := time.Now()
	ctx := context.Background()
	addServiceCIDR(t)
	fleetNS, bigNS, emptyNS := namespace(t, "fleet"), namespace(t, "endpoints"), namespace(t, "empty")
	fleetOf := func(j int) *v1alpha1.ExternalBackend { return fleetBackend(fleetNS, j) }
	bigOf := func(k int) *v1alpha1.ExternalBackend { return bigBackend(bigNS, k, *endpoints) }

	// One backend converges first, so that the baseline has every lazily
	// built part of the controller and its clients (the first reconcile's
	// pools, discovery) and the slopes measure backends only.
	warmNS := namespace(t, "warmup")
	warmOf := func(j int) *v1alpha1.ExternalBackend { return fleetBackend(warmNS, j) }
	if err := createBackends(ctx, 0, 1, warmOf); err != nil {
		t.Fatal(err)
	}
	waitConverged(ctx, t, warmNS, 1, warmOf)

	r := report{Fleet: []point{{X: 0, usage: measure(t)}}}
	done := 0
	for _, n := range []int{*fleet / 4, *fleet / 2, *fleet} {
		if err := createBackends(ctx, done, n, fleetOf); err != nil {
			t.Fatal(err)
		}
		waitConverged(ctx, t, fleetNS, n, fleetOf)
		done = n
		r.Fleet = append(r.Fleet, point{X: n, usage: measure(t)})
		t.Logf("%d backends: %+v", n, r.Fleet[len(r.Fleet)-1].usage)
	}

	// The large backends come on top of the fleet: the fleet's last point is
	// the endpoints' first.
	r.Endpoints = []point{{X: 0, usage: r.Fleet[len(r.Fleet)-1].usage}}
	for k := range 2 {
		if err := createBackends(ctx, k, k+1, bigOf); err != nil {
			t.Fatal(err)
		}
		waitConverged(ctx, t, bigNS, k+1, bigOf)
		r.Endpoints = append(r.Endpoints, point{X: (k + 1) * *endpoints, usage: measure(t)})
		t.Logf("%d endpoints in large backends: %+v", (k+1)**endpoints, r.Endpoints[len(r.Endpoints)-1].usage)
	}
	r.HeapPerBackend, r.RSSPerBackend = fit(r.Fleet)
	r.HeapPerEndpoint, r.RSSPerEndpoint = fit(r.Endpoints)
	if r.HeapPerBackend <= 0 || r.HeapPerEndpoint <= 0 {
		t.Fatalf("the live heap does not grow with backends (%.0f bytes each) or endpoints (%.0f bytes each)", r.HeapPerBackend, r.HeapPerEndpoint)
	}

	// Large backends as client-side apply writes them, for their cache
	// only: the controller's figures above are taken without them. The
	// API server caps an object's annotations at 256 KiB, which the
	// manifest of a backend reaches at about 5,700 endpoints.
	appliedNS := namespace(t, "applied")
	r.AppliedSize = min(*endpoints, maxApplied)
	appliedOf := func(k int) *v1alpha1.ExternalBackend { return bigBackend(appliedNS, k, r.AppliedSize) }
	for k := range 2 {
		xb, err := applied(appliedOf(k))
		if err != nil {
			t.Fatal(err)
		}
		if err := framework.E().Client.Create(ctx, xb); err != nil {
			t.Fatal(err)
		}
	}
	waitConverged(ctx, t, appliedNS, 2, appliedOf)
	waitIdle(t)

	s := newCacheSetup(t)
	r.FleetCaches = measureCaches(ctx, t, s, fleetNS, emptyNS, allKinds)
	r.BigCaches = measureCaches(ctx, t, s, bigNS, emptyNS, allKinds)
	r.AppliedCaches = measureCaches(ctx, t, s, appliedNS, emptyNS, allKinds[:1])
	for ns, rows := range map[string][]cacheRow{fleetNS: r.FleetCaches, bigNS: r.BigCaches, appliedNS: r.AppliedCaches} {
		if sum := totals(rows); sum[withTransforms] >= sum[withoutTransforms] {
			t.Errorf("in %s the transforms save nothing: the caches hold %d bytes with them, %d without", ns, sum[withTransforms], sum[withoutTransforms])
		}
	}
	if t.Failed() {
		return
	}

	r.FleetSize, r.BigSize, r.Took = *fleet, *endpoints, time.Since(start)
	if err := docsection.Replace(filepath.Join(*docs, "benchmarks-scale.md"), "memory", r.markdown()); err != nil {
		t.Fatal(err)
	}
}
