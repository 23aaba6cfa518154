package noisy

import (
	"context"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/test/e2e/framework"
)

// renewal is one renewal of the lease as the API server stored it.
type renewal struct {
	At     time.Time // spec.renewTime, the leader's clock
	Holder string    // spec.holderIdentity
}

// leaseWatch records every renewal of the controller's lease, from a
// watch of it, so that a phase can ask for the longest time the leader
// went without renewing: a leader that cannot renew within its renew
// deadline (10 s by default) gives up leading and exits.
type leaseWatch struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	renewals []renewal
}

// watchLease starts recording the lease's renewals.
func watchLease(t *testing.T) *leaseWatch {
	t.Helper()
	c, ok := framework.E().Client.(client.WithWatch)
	if !ok {
		t.Fatalf("the framework's client %T cannot watch", framework.E().Client)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &leaseWatch{cancel: cancel, done: make(chan struct{})}
	go l.run(ctx, c)
	return l
}

// run watches the lease until ctx ends, watching again whenever the API
// server ends a watch; each new watch starts with the lease as it is,
// which record takes once.
func (l *leaseWatch) run(ctx context.Context, c client.WithWatch) {
	defer close(l.done)
	for ctx.Err() == nil {
		w, err := c.Watch(ctx, &coordinationv1.LeaseList{}, client.InNamespace(controllerNS),
			client.MatchingFields{"metadata.name": leaseName})
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for ev := range w.ResultChan() {
			if lease, ok := ev.Object.(*coordinationv1.Lease); ok && ev.Type != watch.Deleted {
				l.record(lease)
			}
		}
		w.Stop()
	}
}

// record adds the lease's renewal unless it is the last one seen.
func (l *leaseWatch) record(lease *coordinationv1.Lease) {
	if lease.Spec.RenewTime == nil {
		return
	}
	r := renewal{At: lease.Spec.RenewTime.Time}
	if lease.Spec.HolderIdentity != nil {
		r.Holder = *lease.Spec.HolderIdentity
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.renewals); n > 0 && l.renewals[n-1] == r {
		return
	}
	l.renewals = append(l.renewals, r)
}

// LeaseStats are the lease's renewals over a stretch of the run.
type LeaseStats struct {
	// Renewals seen in the stretch.
	Renewals int
	// LongestGap is the longest time between two successive renewals
	// (or from the last renewal to the stretch's end) in the stretch.
	LongestGap time.Duration
	// HolderChanges counts renewals by another holder than the one before.
	HolderChanges int
	// Exits are the managers that stopped on their own in the stretch.
	Exits []managerExit
}

// between is what the lease did from from to to.
func (l *leaseWatch) between(from, to time.Time) LeaseStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	var s LeaseStats
	var prev *renewal
	for i := range l.renewals {
		r := &l.renewals[i]
		if r.At.After(to) {
			break
		}
		if !r.At.Before(from) {
			s.Renewals++
			if prev != nil {
				s.LongestGap = max(s.LongestGap, r.At.Sub(prev.At))
				if r.Holder != prev.Holder {
					s.HolderChanges++
				}
			}
		}
		prev = r
	}
	if prev != nil {
		s.LongestGap = max(s.LongestGap, to.Sub(prev.At))
	}
	s.Exits = running.exitsBetween(from, to)
	return s
}

// stop ends the watch.
func (l *leaseWatch) stop() {
	l.cancel()
	<-l.done
}
