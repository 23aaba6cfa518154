package aws

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/backendslice/backendslice/providers"
)

// The Describe actions a stream lists.
const (
	describeDBInstances = "DescribeDBInstances"
	describeDBClusters  = "DescribeDBClusters"
	describeInstances   = "DescribeInstances"
)

// streamKey names one shared Describe listing.
type streamKey struct {
	identity
	// kind is the Describe action listed.
	kind string
}

// shared is a listing that some sources read.
type shared struct {
	// users is how many sources read it.
	users int
	// clients are the SDK clients it lists with.
	clients *clients
	// stream is its *stream[T], made by the first streamOf.
	stream any
}

// errClosed is the failure of a listing asked for after Session.Close.
var errClosed = errors.New("the AWS session is closed")

// stream is one shared, cached Describe listing of a region. One listing
// runs at a time; callers that come while it runs wait for its answer
// rather than starting their own.
type stream[T any] struct {
	s *Session
	// clients are the ones the stream was made with, so that a listing in
	// flight never puts clients back into a session that let go of them.
	clients *clients
	fetch   func(context.Context, *clients) (T, error)

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

// streamOf returns the stream of key, made on first use with fetch. Resolve
// records the source's use of key first; when no source uses key (one that
// was forgotten meanwhile, or after Close) the stream serves this caller
// only and is not kept.
func streamOf[T any](s *Session, key streamKey, fetch func(context.Context, *clients) (T, error)) *stream[T] {
	s.mu.Lock()
	defer s.mu.Unlock()
	sh, ok := s.streams[key]
	if !ok {
		return &stream[T]{s: s, clients: s.newClients(key.identity), fetch: fetch}
	}
	if st, ok := sh.stream.(*stream[T]); ok {
		return st
	}
	st := &stream[T]{s: s, clients: sh.clients, fetch: fetch}
	sh.stream = st
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
		if !st.s.spawn(st.list) {
			st.mu.Unlock()
			var zero T
			return zero, errClosed
		}
		// list waits for st.mu, so it sees running set.
		st.running = make(chan struct{})
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
// caller giving up does not fail the others waiting, and stores its answer
// in the stream only: a stream the session let go of meanwhile answers the
// callers waiting and is then dropped.
func (st *stream[T]) list() {
	ctx, cancel := context.WithTimeout(st.s.ctx, st.s.timeout)
	defer cancel()
	v, err := st.fetch(ctx, st.clients)
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
