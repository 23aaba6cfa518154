package aws

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/backendslice/backendslice/providers"
)

// The Describe actions a listing lists.
const (
	describeDBInstances = "DescribeDBInstances"
	describeDBClusters  = "DescribeDBClusters"
	describeInstances   = "DescribeInstances"

	describeReplicationGroups = "DescribeReplicationGroups"
	describeCacheClusters     = "DescribeCacheClusters"
	describeServerlessCaches  = "DescribeServerlessCaches"
	// MemoryDB's DescribeClusters, named apart from other services'.
	describeMemoryDBClusters = "memorydb:DescribeClusters"
	// listTagsOf is the start of the kind of a listing of one cache's
	// tags (ElastiCache and MemoryDB list none with their caches): the
	// rest names the cache.
	listTagsOf = "tags of "
)

// listingKey names one shared Describe listing.
type listingKey struct {
	identity
	// kind is the Describe action listed.
	kind string
}

// shared is a listing that some sources read, with its cached answers.
type shared struct {
	// users is how many sources read it.
	users int
	// clients are the SDK clients it lists with.
	clients *clients
	// The cached answers of the key's Describe action, made by the first
	// listingOf: only the one of that action is set.
	dbInstances       *cachedListing[map[string]dbInstance]
	dbClusters        *cachedListing[map[string]dbCluster]
	instances         *cachedListing[map[string]ec2Instance]
	replicationGroups *cachedListing[map[string]replicationGroup]
	cacheClusters     *cachedListing[map[string]cacheCluster]
	serverlessCaches  *cachedListing[map[string]serverlessCache]
	memoryDBClusters  *cachedListing[map[string]memoryDBCluster]
	tags              *cachedListing[map[string]string]
}

// The slots of shared that listingOf fills, one for each Describe action.
func (sh *shared) dbInstancesSlot() **cachedListing[map[string]dbInstance] { return &sh.dbInstances }
func (sh *shared) dbClustersSlot() **cachedListing[map[string]dbCluster]   { return &sh.dbClusters }
func (sh *shared) instancesSlot() **cachedListing[map[string]ec2Instance]  { return &sh.instances }
func (sh *shared) replicationGroupsSlot() **cachedListing[map[string]replicationGroup] {
	return &sh.replicationGroups
}
func (sh *shared) cacheClustersSlot() **cachedListing[map[string]cacheCluster] {
	return &sh.cacheClusters
}
func (sh *shared) serverlessCachesSlot() **cachedListing[map[string]serverlessCache] {
	return &sh.serverlessCaches
}
func (sh *shared) memoryDBClustersSlot() **cachedListing[map[string]memoryDBCluster] {
	return &sh.memoryDBClusters
}
func (sh *shared) tagsSlot() **cachedListing[map[string]string] { return &sh.tags }

// errClosed is the failure of a listing asked for after Session.Close.
var errClosed = errors.New("the AWS session is closed")

// cachedListing is one shared, cached Describe listing of a region. One listing
// runs at a time; callers that come while it runs wait for its answer
// rather than starting their own.
type cachedListing[T any] struct {
	s *Session
	// key names the listing in the log.
	key listingKey
	// clients are the ones the listing was made with, so that a listing in
	// flight never puts clients back into a session that let go of them.
	clients *clients
	fetch   func(context.Context, *clients) (T, error)

	// mu guards the fields below, per listing so that one slow region does
	// not hold up another.
	mu      sync.Mutex
	value   T
	err     error
	expires time.Time
	// taken is when the listing that answered value started, started when
	// the one in flight did: what AWS holds since may be missing from it.
	taken, started time.Time
	// running is closed when the listing in flight ends; nil when none runs.
	running chan struct{}
	// good is the answer of the last listing that succeeded, kept through
	// failures since; read is whether one did.
	good T
	read bool
}

// lastGood is the answer of the listing's last success, however old, and
// whether it had one.
func (l *cachedListing[T]) lastGood() (T, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.good, l.read
}

// listingOf returns the listing of key, made on first use with fetch. Resolve
// records the source's use of key first; when no source uses key (one that
// was forgotten meanwhile, or after Close) the listing serves this caller
// only and is not kept.
func listingOf[T any](s *Session, key listingKey, slot func(*shared) **cachedListing[T], fetch func(context.Context, *clients) (T, error)) *cachedListing[T] {
	s.mu.Lock()
	defer s.mu.Unlock()
	sh, ok := s.listings[key]
	if !ok {
		return &cachedListing[T]{s: s, key: key, clients: s.newClients(key.identity), fetch: fetch}
	}
	kept := slot(sh)
	if *kept == nil {
		*kept = &cachedListing[T]{s: s, key: key, clients: sh.clients, fetch: fetch}
	}
	return *kept
}

// listedAt binds list, a listing of a region, to the identity id: the
// form find and relistIfMissing take.
func listedAt[T any](id identity, list func(context.Context, identity, time.Time) (T, error)) func(context.Context, time.Time) (T, error) {
	return func(ctx context.Context, since time.Time) (T, error) { return list(ctx, id, since) }
}

// get returns the listing's answer, listing the region again first when the
// answer has expired or, when since is not zero, was listed by a listing
// that started before since. A listing already in flight is waited for
// rather than doubled, and taken when it started late enough: one that
// started earlier may lack what the caller looks for, which is why it asks
// for a later answer. A cancelled ctx returns a transient error at once;
// the listing goes on for the callers that come next.
func (l *cachedListing[T]) get(ctx context.Context, since time.Time) (T, error) {
	fresh := func() bool { return since.IsZero() || l.err != nil || !l.taken.Before(since) }
	for {
		l.mu.Lock()
		if l.running == nil && l.s.clock.Now().Before(l.expires) && fresh() {
			v, err := l.value, l.err
			l.mu.Unlock()
			return v, err
		}
		if l.running == nil {
			if !l.s.spawn(l.list) {
				l.mu.Unlock()
				var zero T
				return zero, errClosed
			}
			// list waits for l.mu, so it sees running and started set.
			l.running, l.started = make(chan struct{}), l.s.clock.Now()
		}
		running := l.running
		l.mu.Unlock()
		select {
		case <-running:
		case <-ctx.Done():
			var zero T
			return zero, providers.Transient(ctx.Err())
		}
		// The answer of the listing waited for, whatever its lifetime (a
		// refusal is not held at all), unless it started too early.
		l.mu.Lock()
		if fresh() {
			v, err := l.value, l.err
			l.mu.Unlock()
			return v, err
		}
		l.mu.Unlock()
	}
}

// relistIfMissing returns m when found says it has what a source names;
// otherwise the answer of a listing that starts now or later, since what
// the source names may be newer than m (made a moment before the backend
// that names it, which m's listing started before), and gone is final
// until the spec changes. Sources missing at the same time share one such
// listing: those that ask while it runs, the next.
func relistIfMissing[M any](ctx context.Context, s *Session, m M, found func(M) bool,
	list func(context.Context, time.Time) (M, error)) (M, error) {
	if found(m) {
		return m, nil
	}
	return list(ctx, s.clock.Now())
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
// in the listing only: a listing the session let go of meanwhile answers the
// callers waiting and is then dropped.
func (l *cachedListing[T]) list() {
	ctx, cancel := context.WithTimeout(l.s.ctx, l.s.timeout)
	defer cancel()
	v, err := l.fetch(ctx, l.clients)
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.s.clock.Now()
	if err != nil {
		// The whole failure, ARNs and account IDs included, for the
		// platform team: a backend's status has it redacted (classify).
		l.s.log.Info("AWS listing failed", "listing", l.key.kind, "region", l.key.region, "role", l.key.role,
			"endpoint", l.key.endpoint, "error", err.Error())
		// A refusal is not held: the controller does not retry it, so only
		// a new or changed backend asks again, and it should see a policy
		// that was fixed meanwhile.
		hold := l.s.hold
		if refusal(err) != "" {
			hold = 0
		}
		var zero T
		l.value, l.err, l.expires = zero, err, now.Add(hold)
	} else {
		life := time.Duration(float64(l.s.refresh) * (1 - jitter*rand.Float64()))
		l.value, l.err, l.expires, l.taken = v, nil, now.Add(life), l.started
		l.good, l.read = v, true
	}
	close(l.running)
	l.running = nil
}
