// Package eventbudget bounds the Events the controller writes, per
// namespace and in all, so that one tenant's storm of Events can neither
// delay another tenant's Events nor grow the controller's memory or its
// queue of requests to the API server.
//
// Every backend of a namespace that keeps failing records Warnings at each
// reconcile. Events are written by a goroutine of their own, after the
// reconcile has returned, so nothing pushes back on them: without a budget
// they queue in front of the API server without bound. Here each namespace
// has a token bucket of its own (a few Events a second, a small burst), all
// namespaces share a global cap, and what is over budget is dropped, never
// queued. The same Event (one reason on one object) recorded again within
// a short window is charged once: the events API merges such repeats into
// one Event object's series, counted in memory, at no request's cost.
// Normal Events (a backend published, a provider's admission) leave a
// share of every bucket to Warnings, so that a GitOps sync creating a
// hundred backends at once cannot spend the budget that tells what failed.
package eventbudget

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
)

// Limit is a token bucket: Rate tokens a second, at most Burst held.
type Limit struct {
	Rate  float64
	Burst int
}

// Limits are the budget's buckets and its window of repeats.
type Limits struct {
	// PerNamespace is each namespace's own bucket.
	PerNamespace Limit
	// Global is the bucket that all namespaces share, on top of their own.
	Global Limit
	// RepeatWindow is how long after an Event was charged the same Event
	// (the same object, type, reason and action) passes free.
	RepeatWindow time.Duration
	// WarningReserve is the share (0 to 1) of each bucket's burst that
	// Normal Events leave to Warnings: a Normal Event is recorded only
	// while its buckets hold more than that.
	WarningReserve float64
}

// DefaultLimits are the controller's: a namespace may write 2 Events a
// second with bursts of 10 (a failing backend writes 2 per reconcile, and
// its repeats pass free), all namespaces together 20 a second with bursts
// of 100; Normal Events may spend half of each burst.
func DefaultLimits() Limits {
	return Limits{
		PerNamespace:   Limit{Rate: 2, Burst: 10},
		Global:         Limit{Rate: 20, Burst: 100},
		RepeatWindow:   30 * time.Second,
		WarningReserve: 0.5,
	}
}

// Verdict is what the budget says of one Event.
type Verdict int

const (
	// Allowed says the Event is recorded, and charged to its namespace and to
	// the global cap.
	Allowed Verdict = iota
	// Repeat says the same Event was charged within the repeat window; it is
	// recorded free, merged into the first one's series.
	Repeat
	// OverNamespace says the namespace spent its bucket; the Event is dropped.
	OverNamespace
	// OverGlobal says all namespaces together spent the global cap; the Event
	// is dropped.
	OverGlobal
)

// Dropped tells whether the Event is dropped.
func (v Verdict) Dropped() bool { return v == OverNamespace || v == OverGlobal }

// String names the budget that dropped an Event (the label of the drop
// counter), or how it passed.
func (v Verdict) String() string {
	switch v {
	case Allowed:
		return "allowed"
	case Repeat:
		return "repeat"
	case OverNamespace:
		return "namespace"
	default:
		return "global"
	}
}

// Key tells one Event from another within a namespace: what the events
// API aggregates by (the object, never its resourceVersion).
type Key struct {
	Kind, Name, UID      string
	Type, Reason, Action string
}

// Budget decides which Events are recorded. It is safe for concurrent use.
type Budget struct {
	limits Limits
	now    func() time.Time

	mu     sync.Mutex
	global *rate.Limiter
	// namespaces holds the namespaces whose bucket is not full or that
	// were charged within the repeat window: memory follows the active
	// namespaces, not every namespace that ever recorded an Event.
	namespaces map[string]*namespaceBudget
	// swept is when namespaces were last swept.
	swept time.Time
}

// namespaceBudget is one namespace's bucket and the Events charged to it
// within the repeat window.
type namespaceBudget struct {
	bucket  *rate.Limiter
	charged map[Key]time.Time
}

// New returns a budget of limits; now is the clock (time.Now when nil).
func New(limits Limits, now func() time.Time) *Budget {
	if now == nil {
		now = time.Now
	}
	t := now()
	return &Budget{
		limits:     limits,
		now:        now,
		global:     newBucket(limits.Global),
		namespaces: map[string]*namespaceBudget{},
		swept:      t,
	}
}

// Allow charges the Event k of namespace ns, and says whether it may be
// recorded. It never waits.
func (b *Budget) Allow(ns string, k Key) Verdict {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	b.sweep(now)
	nb := b.namespace(ns)
	if at, ok := nb.charged[k]; ok && now.Sub(at) < b.limits.RepeatWindow {
		return Repeat
	}
	// Both buckets are checked before either is charged: an Event the
	// global cap drops costs its namespace nothing.
	if nb.bucket.TokensAt(now) < b.need(k, b.limits.PerNamespace) {
		return OverNamespace
	}
	if b.global.TokensAt(now) < b.need(k, b.limits.Global) {
		return OverGlobal
	}
	nb.bucket.AllowN(now, 1)
	b.global.AllowN(now, 1)
	nb.charged[k] = now
	return Allowed
}

// need is how many tokens a bucket of l must hold for the Event k to be
// recorded: one for a Warning, one on top of the Warnings' reserve for any
// other.
func (b *Budget) need(k Key, l Limit) float64 {
	if k.Type == corev1.EventTypeWarning {
		return 1
	}
	return 1 + b.limits.WarningReserve*float64(l.Burst)
}

// Namespaces is how many namespaces the budget remembers.
func (b *Budget) Namespaces() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.namespaces)
}

// namespace is ns's budget, a full bucket when ns is not remembered.
// b.mu is held.
func (b *Budget) namespace(ns string) *namespaceBudget {
	nb, ok := b.namespaces[ns]
	if !ok {
		nb = &namespaceBudget{bucket: newBucket(b.limits.PerNamespace), charged: map[Key]time.Time{}}
		b.namespaces[ns] = nb
	}
	return nb
}

// sweep forgets, once a repeat window, the charges older than the window,
// and the namespaces left with none and a full bucket: such a namespace is
// remembered again, as it was, at its next Event. b.mu is held.
func (b *Budget) sweep(now time.Time) {
	if now.Sub(b.swept) < b.limits.RepeatWindow {
		return
	}
	b.swept = now
	for ns, nb := range b.namespaces {
		for k, at := range nb.charged {
			if now.Sub(at) >= b.limits.RepeatWindow {
				delete(nb.charged, k)
			}
		}
		if len(nb.charged) == 0 && nb.bucket.TokensAt(now) >= float64(b.limits.PerNamespace.Burst) {
			delete(b.namespaces, ns)
		}
	}
}

// newBucket is a full token bucket of l. The budget passes its own clock
// to every call, so that tests run it on a fake one.
func newBucket(l Limit) *rate.Limiter { return rate.NewLimiter(rate.Limit(l.Rate), l.Burst) }
