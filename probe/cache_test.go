package probe

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// TestClientCacheFollowsTargets edits a backend's HTTPS server name many
// times, each edit probed, then deletes the backend: the prober keeps the
// HTTP client of the live setting only, and none once the backend is gone.
func TestClientCacheFollowsTargets(t *testing.T) {
	const edits = 30
	d := &floodDialer{blackholed: map[string]bool{}, dials: map[string]int{}}
	p := New(Options{Dial: d.dial})
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- p.Start(ctx) }()

	ca := newPKI(t, "db.test").caPEM
	backend := types.NamespacedName{Namespace: "default", Name: "db"}
	for i := range edits {
		target := Target{Address: "192.0.2.1", Check: Check{Kind: HTTPS, Port: 443, Path: "/",
			ServerName: fmt.Sprintf("db-%d.test", i), CAPEM: ca,
			Period: 20 * time.Millisecond, Timeout: 10 * time.Millisecond,
			SuccessThreshold: 1, FailureThreshold: 1, InitialReady: true}}
		before := d.count(target.Address)
		p.Sync(backend, []Target{target})
		if !waitFor(5*time.Second, func() bool { return d.count(target.Address) > before }) {
			t.Fatalf("edit %d: no probe in 5s", i)
		}
	}
	cancel()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if n := len(p.clients); n > 1 {
		t.Errorf("%d HTTP clients after %d server name edits, want at most 1: one per setting in use", n, edits)
	}
	p.Sync(backend, nil)
	if n := len(p.clients); n != 0 {
		t.Errorf("%d HTTP clients after the backend was deleted, want 0", n)
	}
}

// largeCATargets are n targets whose check trusts a CA bundle of about
// 1 MiB, copied afresh as each reconcile reads it from its Secret.
func largeCATargets(t testing.TB, n int) func() []Target {
	one := newPKI(t, "db.test").caPEM
	bundle := strings.Repeat(one, (1<<20)/len(one)+1)
	return func() []Target {
		ca := strings.Clone(bundle)
		targets := make([]Target, n)
		for i := range targets {
			targets[i] = Target{Address: fmt.Sprintf("10.%d.%d.%d", i>>16, i>>8&0xff, i&0xff), Check: Check{
				Kind: HTTPS, Port: 443, Path: "/", ServerName: "db.test", CAPEM: ca,
				Period: 10 * time.Second, Timeout: time.Second, SuccessThreshold: 1, FailureThreshold: 3}}
		}
		return targets
	}
}

// reconcile does what a reconcile of a backend does with the prober: a
// verdict per target, then a Sync of them all.
func reconcile(p *Prober, backend types.NamespacedName, targets []Target) {
	for _, t := range targets {
		p.Passing(t)
	}
	p.Sync(backend, targets)
}

// TestLargeCANotHashedPerTarget reconciles 16,000 targets whose check
// trusts a 1 MiB CA bundle, and the same targets with a small CA: the
// bundle is digested once per distinct check, not hashed per target, so
// the two take about as long. Before, map keys held the bundle and one
// reconcile hashed it several times per target (seconds under the
// prober's lock).
func TestLargeCANotHashedPerTarget(t *testing.T) {
	const n = 16000
	backend := types.NamespacedName{Namespace: "default", Name: "db"}
	fastest := func(targets func() []Target) time.Duration {
		p := New(Options{})
		best := time.Duration(1<<63 - 1)
		for range 3 {
			ts := targets()
			began := time.Now()
			reconcile(p, backend, ts)
			best = min(best, time.Since(began))
		}
		return best
	}
	large := fastest(largeCATargets(t, n))
	small := fastest(func() []Target {
		ts := largeCATargets(t, n)()
		for i := range ts {
			ts[i].Check.CAPEM = "small"
		}
		return ts
	})
	t.Logf("a reconcile of %d targets: %v with a 1 MiB CA, %v with a small one", n, large, small)
	// Hashed per target, the bundle costs hundreds of times the small
	// reconcile; digested once, a few milliseconds more.
	if limit := 5*small + 200*time.Millisecond; large > limit {
		t.Errorf("a reconcile with a 1 MiB CA took %v, want under %v (5 times the %v with a small CA, and 200ms): the CA must not be hashed per target",
			large, limit, small)
	}
}

// BenchmarkReconcileLargeCA is one reconcile of 16,000 targets whose
// check trusts a 1 MiB CA bundle, read afresh.
func BenchmarkReconcileLargeCA(b *testing.B) {
	targets := largeCATargets(b, 16000)
	p := New(Options{})
	backend := types.NamespacedName{Namespace: "default", Name: "db"}
	for b.Loop() {
		reconcile(p, backend, targets())
	}
}
