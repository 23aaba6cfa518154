package controllers

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zapcore"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/backendslice/backendslice/controllers/externalbackend"
	"github.com/backendslice/backendslice/internal/eventbudget"
	"github.com/backendslice/backendslice/internal/fairshare"
	"github.com/backendslice/backendslice/providers/static"
)

// leaseNamespace holds the test controller's lease.
const leaseNamespace = "backendslice-system"

// TestLeaseRenewedUnderAFlood: the manager's client limiter is held empty
// by requests that name no namespace, the flow the lease's renewals once
// shared, for longer than the renew deadline; the lease is renewed all
// along and the manager keeps leading.
func TestLeaseRenewedUnderAFlood(t *testing.T) {
	const qps, flooders = 2, 40
	// Errors only: a lost lease is what the test would show.
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	cp, c := startControlPlane(t, leaseNamespace)
	mgr := startLeader(t, cp.Config, qps)
	renewals := watchRenewals(t, c)
	// More requests at once than the limiter lets through in the window:
	// each flooder's first request waits its turn behind the others'.
	window := DefaultRenewDeadline + 5*time.Second
	ctx, cancel := context.WithTimeout(context.Background(), window)
	defer cancel()
	sent := flood(ctx, mgr.GetAPIReader(), flooders)
	<-ctx.Done()
	// Mechanism: fewer requests got through than were waiting, so one of
	// them waited the whole window, past the renew deadline, in the flow
	// the lease would have waited in.
	t.Logf("in %s: the flood sent %d requests from %d goroutines, the lease was renewed %d times", window, sent.Load(), flooders, renewals.since(time.Now().Add(-window)))
	if n := sent.Load(); n >= flooders {
		t.Fatalf("the flood sent %d requests in %s at %d a second: it never queued %d requests at once", n, window, qps, flooders)
	}
	// At a renewal every 500ms, 30 in the window: a third of them is
	// plenty, whatever the machine's load.
	if n := renewals.since(time.Now().Add(-window)); n < 10 {
		t.Errorf("the lease was renewed %d times in %s while the flood waited, want at least 10", n, window)
	}
	select {
	case <-mgr.exited:
		t.Fatalf("the manager stopped under the flood: %v", mgr.err)
	default:
	}
}

// startLeader starts the controller, as NewManager wires it, with leader
// election and a client limit of qps, and waits until it leads. The
// returned manager's exited is closed should it stop before the test ends;
// when the test ends it is stopped and waited for.
func startLeader(t *testing.T, cfg *rest.Config, qps int) *runningManager {
	t.Helper()
	reg, err := static.Kinds().NewRegistry(static.New())
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := NewManager(cfg, ManagerOptions{
		MetricsBindAddress:      "0",
		HealthProbeBindAddress:  "0",
		LeaderElection:          true,
		LeaderElectionNamespace: leaseNamespace,
		Lease:                   LeaseTimings{Duration: DefaultLeaseDuration, RenewDeadline: DefaultRenewDeadline, RetryPeriod: DefaultRetryPeriod},
		KubeAPIQPS:              float32(qps),
		KubeAPIBurst:            qps,
		Config:                  externalbackend.Config{Namespace: leaseNamespace, MaxEndpointsPerSlice: 100},
		Providers:               reg,
		MetricsRegistry:         prometheus.NewRegistry(),
		SkipNameValidation:      true,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &runningManager{Manager: mgr, exited: make(chan struct{})}
	go func() {
		defer close(m.exited)
		m.err = mgr.Start(ctx)
	}()
	t.Cleanup(func() { cancel(); <-m.exited })
	select {
	case <-mgr.Elected():
	case <-m.exited:
		t.Fatalf("the manager stopped before it led: %v", m.err)
	case <-time.After(time.Minute):
		t.Fatal("the manager did not lead within a minute")
	}
	return m
}

// runningManager is a started manager; err is what its Start returned,
// once exited is closed.
type runningManager struct {
	ctrl.Manager
	exited chan struct{}
	err    error
}

// flood sends requests that name no namespace from n goroutines, one after
// the other each, until ctx ends, and counts those that were sent.
func flood(ctx context.Context, r client.Reader, n int) *atomic.Int64 {
	var sent atomic.Int64
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for ctx.Err() == nil {
				if r.List(ctx, &corev1.NamespaceList{}) == nil {
					sent.Add(1)
				}
			}
		})
	}
	go wg.Wait()
	return &sent
}

// renewalLog keeps each renewal time of the lease seen.
type renewalLog struct {
	mu    sync.Mutex
	times map[time.Time]bool
}

// since counts the renewals at or after from.
func (l *renewalLog) since(from time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for at := range l.times {
		if !at.Before(from) {
			n++
		}
	}
	return n
}

// watchRenewals reads the controller's lease every 200ms, as an
// administrator, until the test ends.
func watchRenewals(t *testing.T, c client.Client) *renewalLog {
	l := &renewalLog{times: map[time.Time]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			l.read(ctx, c)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return l
}

// read records the lease's renewal time, if it can be read.
func (l *renewalLog) read(ctx context.Context, c client.Client) {
	var lease coordinationv1.Lease
	key := types.NamespacedName{Namespace: leaseNamespace, Name: "backendslice-controller.backendslice.io"}
	if c.Get(ctx, key, &lease) != nil || lease.Spec.RenewTime == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.times[lease.Spec.RenewTime.Time] = true
}

// TestEventsAndLeaseHaveLimitersOfTheirOwn: neither the Events' client nor
// the lease's takes tokens from the limiter of the manager's config (the
// tenants'), and the lease's has room for two requests every retry period,
// twice over.
func TestEventsAndLeaseHaveLimitersOfTheirOwn(t *testing.T) {
	tenants := &rest.Config{Host: "https://127.0.0.1:1", QPS: 50, Burst: 100}
	tenants.RateLimiter = fairshare.NewRateLimiter(tenants.QPS, tenants.Burst)
	ev := eventsConfig(tenants, eventbudget.DefaultLimits())
	lease := leaseConfig(tenants, 500*time.Millisecond)
	for name, c := range map[string]*rest.Config{"events": ev, "lease": lease} {
		if c.RateLimiter == nil || c.RateLimiter == tenants.RateLimiter {
			t.Errorf("the %s client's limiter is the tenants'", name)
		}
	}
	if tenants.UserAgent != "" {
		t.Errorf("the manager's config was changed: user agent %q", tenants.UserAgent)
	}
	if lease.QPS != 8 || lease.RateLimiter.QPS() != 8 {
		t.Errorf("the lease may send %v (limiter %v) requests a second at a 500ms retry period, want 8", lease.QPS, lease.RateLimiter.QPS())
	}
}
