package consul_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/consultest"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// probeInterval is how often the benchmark reads the slice while it waits:
// it bounds the error of each measurement.
const probeInterval = 2 * time.Millisecond

// flipSpacing parts two flips, so that each is an isolated check failure as
// in production. Back to back, a check flapping several times a second
// meets the watch's rate limit (10 queries a second, which Consul asks of
// blocking-query loops) and the benchmark would measure that limit instead.
const flipSpacing = 500 * time.Millisecond

// BenchmarkCheckToSlice measures the delay from a Consul TTL check turning
// critical on the agent to the EndpointSlice showing the endpoint
// ready=false, through the whole path: the agent's sync to the catalog, the
// provider's blocking query, its wake-up, the reconcile and the write. Each
// iteration is one flip; in between, untimed, the check is set back to
// passing, the slice shows ready again, and flipSpacing passes. Run it over
// 100 flips with
//
//	go test ./test/e2e/consul -run '^$' -bench CheckToSlice -benchtime 100x
//
// It reports the median and the 99th percentile.
func BenchmarkCheckToSlice(b *testing.B) {
	ctx := context.Background()
	c := framework.E().Client
	ns := fmt.Sprintf("bench-check-to-slice-%d", time.Now().UnixNano())
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		b.Fatal(err)
	}
	svc := consultest.Service{ID: "bench-1", Name: "bench", Address: "192.0.2.90"}
	if err := agent.Register(svc); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = agent.Deregister(svc.ID) })
	if err := c.Create(ctx, newBackend(ns, "bench", catalog("bench"))); err != nil {
		b.Fatal(err)
	}
	waitReady := func(want bool) time.Time {
		b.Helper()
		deadline := time.Now().Add(framework.Timeout)
		for time.Now().Before(deadline) {
			var list discoveryv1.EndpointSliceList
			if err := c.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{
				discoveryv1.LabelServiceName: "bench", discoveryv1.LabelManagedBy: v1alpha1.ManagedByValue,
			}); err != nil {
				b.Fatal(err)
			}
			if readyIn(list.Items, svc.Address) == want {
				return time.Now()
			}
			time.Sleep(probeInterval)
		}
		b.Fatalf("the slice did not show %s ready=%t within %s", svc.Address, want, framework.Timeout)
		return time.Time{}
	}
	waitReady(true)

	delays := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		if err := agent.SetCheck(svc.ID, api.HealthPassing); err != nil {
			b.Fatal(err)
		}
		waitReady(true)
		time.Sleep(flipSpacing)
		b.StartTimer()
		// SetCheck waits for the catalog to catch up: flip in the background
		// and watch the slice from the moment of the flip.
		start := time.Now()
		flipped := make(chan error, 1)
		go func() { flipped <- agent.SetCheck(svc.ID, api.HealthCritical) }()
		seen := waitReady(false)
		if err := <-flipped; err != nil {
			b.Fatal(err)
		}
		delays = append(delays, seen.Sub(start))
	}
	b.StopTimer()
	slices.Sort(delays)
	median, p99 := framework.Percentile(delays, 0.5), framework.Percentile(delays, 0.99)
	b.ReportMetric(float64(median.Microseconds())/1000, "median-ms")
	b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
	b.Logf("check critical -> slice ready=false over %d flips: median %v, p99 %v, min %v, max %v (probe every %v)",
		len(delays), median, p99, delays[0], delays[len(delays)-1], probeInterval)
}

// readyIn is the ready condition of addr in the slices; false when absent.
func readyIn(sl []discoveryv1.EndpointSlice, addr string) bool {
	for _, s := range sl {
		for _, e := range s.Endpoints {
			if len(e.Addresses) == 1 && e.Addresses[0] == addr {
				return ptr.Deref(e.Conditions.Ready, false)
			}
		}
	}
	return false
}
