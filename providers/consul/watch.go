package consul

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"time"

	"github.com/hashicorp/consul/api"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/providers/backoff"
)

// queryGrace is how long past its wait time (plus Consul's jitter of up to
// a sixteenth of it) a blocking query may take before it counts as failed:
// it catches a connection that died without a reset.
const queryGrace = 15 * time.Second

// watchKey identifies a shared watch: everything that changes what Consul
// answers, the connection asked first. How instances are mapped to
// endpoints (onlyPassing, zoneMetaKey) is applied per source on the shared
// answer, so it is not part of the key.
type watchKey struct {
	conn                                      connID
	datacenter, service, namespace, partition string
}

// query is a watch's blocking query, without the index.
type query struct {
	service string
	opts    api.QueryOptions
}

// keyOf returns the watch key of a source read through connection conn in
// datacenter (the source's, else the connection's) and the query that watch
// runs. Tags and node meta are not part of either: one watch per service
// and connection serves every filter, and each source filters the answer
// on our side (selection). Otherwise sources that differ only in their
// filters would each hold a long-poll open, and a tenant could exhaust the
// agent's connections per client (200 by default), making the agent refuse
// every other namespace's new source.
func keyOf(conn connID, datacenter string, src *v1alpha1.ConsulSource) (watchKey, query) {
	q := query{service: src.Service, opts: api.QueryOptions{
		Datacenter: datacenter,
		Namespace:  src.Namespace,
		Partition:  src.Partition,
	}}
	return watchKey{
		conn:       conn,
		datacenter: datacenter,
		service:    src.Service,
		namespace:  src.Namespace,
		partition:  src.Partition,
	}, q
}

// selection is what a source keeps of its watch's instances: those that
// carry every one of its tags and whose node has every one of its node meta
// pairs, as Consul's tag and node-meta query parameters select.
type selection struct {
	tags     []string
	nodeMeta map[string]string
}

// selects tells whether the source keeps in.
func (s selection) selects(in instance) bool {
	for _, t := range s.tags {
		if !slices.Contains(in.Tags, t) {
			return false
		}
	}
	for k, v := range s.nodeMeta {
		if got, ok := in.NodeMeta[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// filter is the instances s keeps, in their order.
func (s selection) filter(ins []instance) []instance {
	if len(s.tags) == 0 && len(s.nodeMeta) == 0 {
		return ins
	}
	out := make([]instance, 0, len(ins))
	for _, in := range ins {
		if s.selects(in) {
			out = append(out, in)
		}
	}
	return out
}

// interest is one source of one ExternalBackend that uses a watch.
type interest = providers.SourceKey

// watch is one blocking-query loop shared by every source with its key.
// Its fields other than key, query, conn, cancel and answered are guarded by
// the provider's mutex.
type watch struct {
	key   watchKey
	query query
	// conn is the connection queried through.
	conn   *conn
	cancel context.CancelFunc
	// answered is closed when the first answer (or failure) is in.
	answered chan struct{}

	users map[interest]struct{}
	// holder is the namespace the watch is charged to (budget.go), and
	// started its rank among the watches started.
	holder  string
	started uint64
	// done is true once answered is closed.
	done bool
	// instances is the latest answer; it is replaced, never changed.
	instances []instance
	// err is the latest failure, nil after a success.
	err error
}

// nextIndex applies Consul's rules for the index of the next blocking query
// (https://developer.hashicorp.com/consul/api-docs/features/blocking): an
// index that went backwards (a restored snapshot, a new cluster) is reset to
// 0, so that the next query answers at once with the current state; an index
// of 0 is a Consul bug that would make every query answer at once, so it
// becomes 1.
func nextIndex(prev, got uint64) uint64 {
	switch {
	case got < prev:
		return 0
	case got == 0:
		return 1
	}
	return got
}

// run is a watch's loop: query, publish, repeat, until ctx is done.
func (p *Provider) run(ctx context.Context, w *watch) {
	defer p.wg.Done()
	defer p.abandon(w)
	limiter := flowcontrol.NewTokenBucketRateLimiter(queryRate, queryBurst)
	defer limiter.Stop()
	var index uint64
	failures := 0
	for {
		if limiter.Wait(ctx) != nil {
			return
		}
		ins, got, err := p.query(ctx, w, index)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			p.publish(w, nil, err)
			// Ask for the current state, not for a change, once Consul
			// answers again: it may have restarted with other indexes.
			index = 0
			failures++
			if !backoff.Sleep(ctx, backoff.Delay(failures, p.opts.RetryDelay, p.opts.MaxRetryDelay)) {
				return
			}
			continue
		}
		failures = 0
		index = nextIndex(index, got)
		p.publish(w, ins, nil)
	}
}

// query runs one blocking query of w and returns the instances and
// Consul's index. The token is read for every query, so that a rotated one
// is used from the next query on.
func (p *Provider) query(ctx context.Context, w *watch, index uint64) ([]instance, uint64, error) {
	opts := w.query.opts
	opts.WaitIndex = index
	opts.WaitTime = p.opts.WaitTime
	p.mu.Lock()
	token := w.conn.token
	p.mu.Unlock()
	if token != nil {
		t, err := token()
		if err != nil {
			return nil, 0, err
		}
		opts.Token = t
	}
	ctx, cancel := context.WithTimeout(ctx, p.opts.WaitTime+p.opts.WaitTime/16+queryGrace)
	defer cancel()
	entries, meta, err := w.conn.client.Health().Service(w.query.service, "", false, opts.WithContext(ctx))
	if err != nil {
		return nil, 0, err
	}
	return instancesOf(entries), meta.LastIndex, nil
}

// publish stores a watch's latest answer or failure and wakes the backends
// that use it when what they would resolve changed: other instances, or a
// failure starting or ending (which changes their status).
func (p *Provider) publish(w *watch, ins []instance, err error) {
	p.mu.Lock()
	changed := !w.done || (err == nil) != (w.err == nil) || (err == nil && !reflect.DeepEqual(ins, w.instances))
	w.err = err
	if err == nil {
		w.instances = ins
	}
	if !w.done {
		w.done = true
		close(w.answered)
	}
	var wake []types.NamespacedName
	if changed {
		seen := map[types.NamespacedName]bool{}
		for u := range w.users {
			if !seen[u.Backend] {
				seen[u.Backend] = true
				wake = append(wake, u.Backend)
			}
		}
	}
	p.mu.Unlock()
	// Outside the lock: Wake may wait for the controller, which may be
	// resolving, which takes the lock.
	for _, b := range wake {
		p.waker.Wake(b)
	}
}

// abandon answers a watch that stopped (its last user left, or Close)
// before Consul answered it, so that a Resolve waiting for the first answer
// returns at once rather than at its deadline.
func (p *Provider) abandon(w *watch) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !w.done {
		w.done = true
		w.err = errors.New("the watch stopped before Consul answered")
		close(w.answered)
	}
}
