package aws

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/backendslice/backendslice/providers"
)

// streamKey names one shared Describe listing.
type streamKey struct {
	identity
	// kind is the Describe action listed.
	kind string
}

// stream is one shared, cached Describe listing of a region. One listing
// runs at a time; callers that come while it runs wait for its answer
// rather than starting their own.
type stream[T any] struct {
	s     *Session
	fetch func(ctx context.Context) (T, error)

	// mu guards the fields below, per stream so that one slow region does
	// not hold up another.
	mu      sync.Mutex
	value   T
	err     error
	expires time.Time
	// taken is when value was listed.
	taken time.Time
	// running is closed when the listing in flight ends; nil when none runs.
	running chan struct{}
}

// streamOf returns the stream of key, made on first use with fetch.
func streamOf[T any](s *Session, key streamKey, fetch func(context.Context) (T, error)) *stream[T] {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.streams[key].(*stream[T]); ok {
		return st
	}
	st := &stream[T]{s: s, fetch: fetch}
	s.streams[key] = st
	return st
}

// get returns the stream's answer, listing the region again first when the
// answer has expired or, when maxAge is not zero, is older than maxAge. A
// cancelled ctx returns a transient error at once; the listing goes on for
// the callers that come next.
func (st *stream[T]) get(ctx context.Context, maxAge time.Duration) (T, error) {
	st.mu.Lock()
	now := st.s.clock.Now()
	if st.running == nil && now.Before(st.expires) && (maxAge == 0 || st.err != nil || now.Sub(st.taken) <= maxAge) {
		v, err := st.value, st.err
		st.mu.Unlock()
		return v, err
	}
	if st.running == nil {
		st.running = make(chan struct{})
		go st.list()
	}
	running := st.running
	st.mu.Unlock()
	select {
	case <-running:
	case <-ctx.Done():
		var zero T
		return zero, providers.Transient(ctx.Err())
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.value, st.err
}

// relistIfMissing returns m when found says it has what a source names;
// otherwise the listing list gives no older than the recheck period, since
// what the source names may be newer than m.
func relistIfMissing[M any](ctx context.Context, s *Session, m M, found func(M) bool,
	list func(context.Context, time.Duration) (M, error)) (M, error) {
	if found(m) {
		return m, nil
	}
	return list(ctx, s.fresh())
}

// hasKey says whether a listing holds key.
func hasKey[V any](key string) func(map[string]V) bool {
	return func(m map[string]V) bool {
		_, ok := m[key]
		return ok
	}
}

// list runs one listing, detached from any caller's context so that a
// caller giving up does not fail the others waiting, and stores its answer.
func (st *stream[T]) list() {
	ctx, cancel := context.WithTimeout(context.Background(), st.s.timeout)
	defer cancel()
	v, err := st.fetch(ctx)
	st.mu.Lock()
	defer st.mu.Unlock()
	now := st.s.clock.Now()
	if err != nil {
		// A refusal is not held: the controller does not retry it, so only
		// a new or changed backend asks again, and it should see a policy
		// that was fixed meanwhile.
		hold := st.s.hold
		if refusal(err) != "" {
			hold = 0
		}
		var zero T
		st.value, st.err, st.expires = zero, err, now.Add(hold)
	} else {
		life := time.Duration(float64(st.s.refresh) * (1 - jitter*rand.Float64()))
		st.value, st.err, st.expires, st.taken = v, nil, now.Add(life), now
	}
	close(st.running)
	st.running = nil
}
