// Package fairshare bounds how many reconciles of one namespace run at
// once while other namespaces want workers, so that one tenant's burst
// cannot take every worker: with four workers and a share of three, a
// backend of another namespace finds a worker free, whatever one namespace
// asks for. The share is work-conserving: a namespace alone (no other has
// asked for a worker within the window) may use every worker, so a fleet
// that lives in one namespace converges as fast as without the share. A
// reconcile that finds its namespace's share taken does not wait (it would
// hold a worker while waiting): the caller puts it back in the queue, a
// little later.
package fairshare

import (
	"sync"
	"time"
)

// Window is how long a namespace counts as wanting workers after it last
// asked for one: longer than a deferred reconcile's return to the queue,
// so that a namespace kept waiting keeps counting.
const Window = 2 * time.Second

// Limiter counts the reconciles running per namespace.
type Limiter struct {
	mu      sync.Mutex
	share   int
	now     func() time.Time
	running map[string]int
	// asked is when each namespace last asked for a worker.
	asked map[string]time.Time
}

// New returns a limiter letting each namespace run at most share
// reconciles at once (at least one) while another namespace wants
// workers; now is the clock (time.Now when nil).
func New(share int, now func() time.Time) *Limiter {
	if now == nil {
		now = time.Now
	}
	return &Limiter{share: max(share, 1), now: now, running: map[string]int{}, asked: map[string]time.Time{}}
}

// Share is how many reconciles of one namespace may run at once while
// other namespaces want workers.
func (l *Limiter) Share() int { return l.share }

// Enter takes a slot of namespace ns. It returns the function that gives
// the slot back, and false (with no slot taken) when ns already runs its
// share and another namespace asked for a worker within the Window.
func (l *Limiter) Enter(ns string) (release func(), ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.asked[ns] = now
	if l.running[ns] >= l.share && l.othersWant(ns, now) {
		return nil, false
	}
	l.running[ns]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.running[ns]--; l.running[ns] == 0 {
				// A namespace with nothing running leaves no count behind.
				delete(l.running, ns)
			}
		})
	}, true
}

// othersWant tells whether a namespace other than ns asked for a worker
// within the Window, and forgets those that did not. l.mu is held.
func (l *Limiter) othersWant(ns string, now time.Time) bool {
	want := false
	for other, at := range l.asked {
		switch {
		case now.Sub(at) > Window:
			delete(l.asked, other)
		case other != ns:
			want = true
		}
	}
	return want
}

// Running is how many reconciles of ns run now.
func (l *Limiter) Running(ns string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.running[ns]
}

// ShareOf is the share that leaves one of workers free for the other
// namespaces: workers-1, and 1 for a single worker (which then cannot
// leave any free).
func ShareOf(workers int) int { return max(workers-1, 1) }
