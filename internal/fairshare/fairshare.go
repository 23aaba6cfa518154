// Package fairshare bounds how many reconciles of one namespace run at
// once, so that one tenant's burst cannot take every worker: with four
// workers and a share of three, a backend of any other namespace always
// finds a worker free, whatever one namespace asks for. A reconcile that
// finds its namespace's share taken does not wait (it would hold a worker
// while waiting): the caller puts it back in the queue, a little later.
package fairshare

import "sync"

// Limiter counts the reconciles running per namespace.
type Limiter struct {
	mu      sync.Mutex
	share   int
	running map[string]int
}

// New returns a limiter letting each namespace run at most share
// reconciles at once (at least one).
func New(share int) *Limiter {
	return &Limiter{share: max(share, 1), running: map[string]int{}}
}

// Share is how many reconciles of one namespace may run at once.
func (l *Limiter) Share() int { return l.share }

// Enter takes a slot of namespace ns. It returns the function that gives
// the slot back, and false (with no slot taken) when ns already runs its
// share.
func (l *Limiter) Enter(ns string) (release func(), ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.running[ns] >= l.share {
		return nil, false
	}
	l.running[ns]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.running[ns]--; l.running[ns] == 0 {
				// A namespace with nothing running leaves no entry behind.
				delete(l.running, ns)
			}
		})
	}, true
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
