package fairshare

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Buckets are token buckets of one rate and burst, one per namespace.
//
// A single bucket shared by every backend (controller-runtime's default
// retry limiter: 10 a second, 100 at once) is reserved far ahead by the
// namespace that fails most: a thousand failing backends push every other
// namespace's first retry back by minutes. With a bucket per namespace,
// a namespace's failures delay only its own retries.
//
// A bucket that has refilled is as good as a new one, so buckets are
// forgotten once full: memory follows the namespaces that spent tokens
// lately, not every namespace ever seen.
type Buckets struct {
	limit rate.Limit
	burst int
	now   func() time.Time

	mu      sync.Mutex
	buckets map[string]*rate.Limiter
	swept   time.Time
}

// sweepEvery is how often full buckets are forgotten.
const sweepEvery = time.Minute

// NewBuckets returns buckets of limit tokens a second, burst at once.
func NewBuckets(limit rate.Limit, burst int) *Buckets {
	return &Buckets{limit: limit, burst: max(burst, 1), now: time.Now, buckets: map[string]*rate.Limiter{}}
}

// Delay reserves a token of namespace ns's bucket and returns how long to
// wait for it.
func (b *Buckets) Delay(ns string) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	b.sweep(now)
	bucket, ok := b.buckets[ns]
	if !ok {
		bucket = rate.NewLimiter(b.limit, b.burst)
		b.buckets[ns] = bucket
	}
	return bucket.ReserveN(now, 1).DelayFrom(now)
}

// sweep forgets the buckets that are full again, at most once a
// sweepEvery. b.mu is held.
func (b *Buckets) sweep(now time.Time) {
	if now.Sub(b.swept) < sweepEvery {
		return
	}
	b.swept = now
	for ns, bucket := range b.buckets {
		if bucket.TokensAt(now) >= float64(b.burst) {
			delete(b.buckets, ns)
		}
	}
}

// Len is how many buckets are kept.
func (b *Buckets) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.buckets)
}

// RetryBuckets is a work queue rate limiter that takes a token of the
// item's namespace's bucket for each retry; combine it with a per-item
// backoff (workqueue.NewTypedMaxOfRateLimiter).
type RetryBuckets struct{ *Buckets }

// When is how long to wait before retrying item.
func (r RetryBuckets) When(item reconcile.Request) time.Duration { return r.Delay(item.Namespace) }

// Forget does nothing: a bucket refills by itself.
func (RetryBuckets) Forget(reconcile.Request) {}

// NumRequeues is zero: the per-item backoff counts retries.
func (RetryBuckets) NumRequeues(reconcile.Request) int { return 0 }
