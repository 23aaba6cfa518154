// Package plugin resolves plugin sources: it asks a provider plugin, a
// process of its own that speaks the plugin protocol (package protocol,
// openapi.yaml), over HTTP or HTTPS at the url of the source's
// BackendProvider.
//
// Every source has a watch: a loop in the background that asks the plugin
// and keeps its latest answer. A plugin that pushes (its answers carry an
// index) is long-polled, as Consul's blocking queries are; one that does
// not is asked again when its answer says. Resolve answers from the watch,
// and the watch wakes the backend through the controller's
// providers.Waker when the answer changes, so that a reconcile never waits
// on a plugin but for a new source's first answer, and then no longer than
// the provider's timeout. A watch stops when its source goes (Forget), and
// every watch on Close.
//
// What a plugin can do to the controller is bounded by its BackendProvider:
// requests in flight (maxConcurrentRequests, long-polls aside), the time
// one takes (timeout), the size of an answer and its endpoints
// (maxEndpoints); redirects are never followed. An answer past a bound, a
// body that is not the protocol's, a plugin that stops answering or
// restarts: each is a transient failure, and the source keeps what it
// published.
package plugin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/fairshare"
	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/providers/backoff"
	"github.com/backendslice/backendslice/providers/plugin/protocol"
)

// Defaults of the options a zero value leaves unset.
const (
	// DefaultWait is how long a long-poll may be held: a change is pushed
	// at once whatever it is; the wait only bounds how often an idle
	// watch asks again.
	DefaultWait = time.Minute
	// DefaultRetryDelay is the first pause after a failed request, and
	// DefaultMaxRetryDelay the longest.
	DefaultRetryDelay    = 500 * time.Millisecond
	DefaultMaxRetryDelay = 30 * time.Second
	// DefaultMaxWatches bounds the watches through one BackendProvider.
	DefaultMaxWatches = 10000
	// DefaultRefusedDelay is how long a source the plugin refused
	// (forbidden) waits before it is asked again, and
	// DefaultMaxRefusedDelay the longest, doubling at each refusal in a
	// row: the plugin's consent rules change by its team's hand, not from
	// one second to the next, and a refused source holds no watch.
	DefaultRefusedDelay    = 2 * time.Minute
	DefaultMaxRefusedDelay = 16 * time.Minute
	// requestRate and requestBurst rate-limit each watch's loop: a plugin
	// that answers every long-poll at once with a new index would
	// otherwise spin it.
	requestRate  = 10
	requestBurst = 10
)

// Options configure the provider; a zero field takes its default.
type Options struct {
	// Wait is how long a long-poll may be held (waitSeconds), kept
	// between protocol.MinWaitSeconds and MaxWaitSeconds.
	Wait time.Duration
	// RetryDelay is the first pause after a failed request; it doubles,
	// with jitter, at each failure in a row up to MaxRetryDelay.
	RetryDelay, MaxRetryDelay time.Duration
	// MaxWatches bounds the watches of one BackendProvider: past it a new
	// source fails, transiently, naming the limit. While several
	// namespaces hold watches of one, each may hold its share (see
	// fairshare.Seats).
	MaxWatches int
	// NamespaceWatchFloor is the least share of a BackendProvider's
	// watches a namespace is held to (fairshare.DefaultSeatFloor).
	NamespaceWatchFloor int
	// RefusedDelay is how long a source the plugin refused waits before
	// it is asked again; it doubles, with jitter, at each refusal in a row
	// up to MaxRefusedDelay.
	RefusedDelay, MaxRefusedDelay time.Duration
}

func (o Options) withDefaults() Options {
	if o.Wait <= 0 {
		o.Wait = DefaultWait
	}
	// waitSeconds is whole seconds, within the protocol's bounds.
	o.Wait = min(max(o.Wait, protocol.MinWaitSeconds*time.Second), protocol.MaxWaitSeconds*time.Second)
	if o.RetryDelay <= 0 {
		o.RetryDelay = DefaultRetryDelay
	}
	if o.MaxRetryDelay <= 0 {
		o.MaxRetryDelay = DefaultMaxRetryDelay
	}
	if o.MaxWatches <= 0 {
		o.MaxWatches = DefaultMaxWatches
	}
	if o.NamespaceWatchFloor <= 0 {
		o.NamespaceWatchFloor = fairshare.DefaultSeatFloor
	}
	if o.RefusedDelay <= 0 {
		o.RefusedDelay = DefaultRefusedDelay
	}
	if o.MaxRefusedDelay <= 0 {
		o.MaxRefusedDelay = DefaultMaxRefusedDelay
	}
	o.MaxRefusedDelay = max(o.MaxRefusedDelay, o.RefusedDelay)
	return o
}

// Provider resolves plugin sources through one watch each.
type Provider struct {
	opts  Options
	waker providers.Waker

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// requests counts the requests sent to every plugin.
	requests atomic.Uint64
	// metrics are the provider's Prometheus metrics (Describe, Collect).
	metrics *metrics

	mu      sync.Mutex
	closed  bool
	watches map[interest]*watch
	conns   map[connID]*conn
	// seats are each connection's watches by namespace, kept with the
	// connection.
	seats map[connID]*fairshare.Seats
	// refused are the sources the plugin refused, which hold no watch
	// until their time to be asked again (refusal).
	refused map[interest]*refusal
	// started counts the watches started, to tell the newest.
	started uint64
}

// refusal is a source the plugin refused (forbidden): it is not asked
// again before until, unless what it asks changes (key: its spec, or its
// BackendProvider's); times counts the refusals in a row.
type refusal struct {
	// provider names the BackendProvider, for the metrics.
	provider string
	key      string
	err      error
	until    time.Time
	times    int
}

// interest is one source of one ExternalBackend.
type interest = providers.SourceKey

// watch is the loop that keeps one source's answer. Its fields but key,
// conn, req, cancel and answered are guarded by the provider's mutex.
type watch struct {
	// key changes with anything that changes what the plugin is asked.
	key      string
	conn     *conn
	req      protocol.ResolveRequest
	cancel   context.CancelFunc
	answered chan struct{}

	done      bool
	endpoints []providers.Endpoint
	// note names what the controller ignored in the answer (answer.note).
	note string
	err  error
	// seen is set once a Resolve returned the current answer. A failure
	// that comes before an answer was seen waits in pending until it is:
	// a plugin that pushes a change and dies at once has its change
	// published, and held, rather than the answer before it.
	seen    bool
	pending error
	// started is the watch's rank among those started.
	started uint64
}

// New returns a provider that wakes the controller through waker when an
// answer changes. It connects to nothing until the first Resolve.
func New(opts Options, waker providers.Waker) (*Provider, error) {
	if waker == nil {
		return nil, errors.New("plugin provider: a waker is required, since watches push changes")
	}
	p := &Provider{opts: opts.withDefaults(), waker: waker, metrics: newMetrics(), watches: map[interest]*watch{}, conns: map[connID]*conn{},
		seats: map[connID]*fairshare.Seats{}, refused: map[interest]*refusal{}}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	return p, nil
}

// Kind is the plugin kind.
func (*Provider) Kind() providers.Kind { return Kind }

// Resolve returns the latest answer of the source's watch, starting the
// watch on the first call. It waits for a new watch's first answer at
// most the provider's timeout (and ctx), and not at all while the plugin
// is not answering: a slow plugin holds no reconcile longer than that. The
// answer holds until the watch wakes the backend: RefreshAfter is zero.
func (p *Provider) Resolve(ctx context.Context, req providers.Request) (providers.Result, error) {
	field := fmt.Sprintf("spec.sources[%s].plugin", req.Source.Name)
	src, cc := req.Source.Plugin, req.Connection
	switch {
	case src == nil:
		return providers.Result{}, providers.Terminalf(v1alpha1.ReasonInvalidSpec, "spec.sources[%s]: not a plugin source", req.Source.Name)
	case settingsOf(cc) == nil || cc.Key == "":
		return providers.Result{}, providers.Terminalf(v1alpha1.ReasonProviderNotAvailable,
			"spec.sources[%s].providerRef: a plugin source is resolved through a BackendProvider of kind plugin only; name one", req.Source.Name)
	}
	preq := protocol.ResolveRequest{Namespace: req.Namespace, Backend: req.Backend, Source: req.Source.Name,
		Parameters: maps.Clone(src.Parameters), AddressTypes: addressTypes(req.AddressTypes)}
	if preq.Parameters == nil {
		preq.Parameters = map[string]string{}
	}
	w, err := p.use(providers.SourceKeyOf(req), cc, preq)
	if err != nil {
		return providers.Result{}, within(field, err)
	}
	if err := p.firstAnswer(ctx, w); err != nil {
		return providers.Result{}, within(field, err)
	}
	eps, note, err := p.take(req.Namespace, req.Backend, w)
	if err != nil {
		return providers.Result{}, within(field, err)
	}
	res := providers.Result{Endpoints: eps}
	if note != "" {
		res.Limit = field + ": " + note
	}
	return res, nil
}

// take returns w's current answer (and its note) and marks it seen; a
// failure that waited for it becomes current, and wakes the backend again.
func (p *Provider) take(namespace, backend string, w *watch) ([]providers.Endpoint, string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	eps, note, err := slices.Clone(w.endpoints), w.note, w.err
	w.seen = true
	if w.pending != nil {
		w.err, w.pending = w.pending, nil
		// Not from here: Wake may wait for the controller, which is
		// running this reconcile.
		go p.waker.Wake(types.NamespacedName{Namespace: namespace, Name: backend})
	}
	return eps, note, err
}

// firstAnswer waits for w's first answer, at most the plugin's timeout
// and ctx, and not at all while its plugin is failing. An answer in hand
// is returned even if ctx is done: it is whole.
func (p *Provider) firstAnswer(ctx context.Context, w *watch) error {
	select {
	case <-w.answered:
		return nil
	default:
	}
	if err := w.conn.failure(); err != nil {
		return providers.Transient(fmt.Errorf("no answer yet; %w; the plugin is asked again in the background", err))
	}
	t := time.NewTimer(w.conn.timeout)
	defer t.Stop()
	select {
	case <-w.answered:
		return nil
	case <-ctx.Done():
		return providers.Transient(fmt.Errorf("no answer yet from %s: %w", w.conn.who, ctx.Err()))
	case <-t.C:
		return providers.Transient(fmt.Errorf("no answer yet from %s within spec.plugin.timeout (%s); the plugin is asked again in the background",
			w.conn.who, w.conn.timeout))
	}
}

// within names the source's field in err's message, keeping its kind.
func within(field string, err error) error {
	pe := providers.AsError(err)
	return &providers.Error{Terminal: pe.Terminal, Gone: pe.Gone, Reason: pe.Reason, Err: fmt.Errorf("%s: %w", field, pe.Err)}
}

// addressTypes are the families as the protocol names them.
func addressTypes(ts []v1alpha1.AddressType) []string {
	out := make([]string, 0, len(ts))
	for _, t := range ts {
		out = append(out, string(t))
	}
	return out
}

// keyOf identifies what a watch asks: the connection and the request.
func keyOf(id connID, req protocol.ResolveRequest) string {
	b, _ := json.Marshal(struct {
		ID  connID
		Req protocol.ResolveRequest
	}{id, req})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// use returns the watch of i for request req through cc, starting it (and
// making the client of cc) when i has none or one that asks otherwise. A
// source the plugin refused gets its refusal back, and no watch, until its
// time to be asked again. A new watch needs a seat of its
// BackendProvider's watches, within its namespace's share (seat); the
// backends whose watch was stopped to seat it are woken to say so.
func (p *Provider) use(i interest, cc *providers.Connection, req protocol.ResolveRequest) (*watch, error) {
	id := connID{cc.Name, cc.Key}
	key := keyOf(id, req)
	p.mu.Lock()
	w, stopped, err := p.useLocked(i, id, key, cc, req)
	p.mu.Unlock()
	for _, b := range stopped {
		// Not from here: Wake may wait for the controller, which is
		// running this reconcile.
		go p.waker.Wake(b)
	}
	return w, err
}

// useLocked is use with p.mu held; it returns the backends whose watch it
// stopped.
func (p *Provider) useLocked(i interest, id connID, key string, cc *providers.Connection, req protocol.ResolveRequest) (*watch, []types.NamespacedName, error) {
	if p.closed {
		return nil, nil, providers.Transient(errors.New("the plugin provider is stopped"))
	}
	old, ok := p.watches[i]
	if ok && old.key == key {
		return old, nil, nil
	}
	if r, ok := p.refused[i]; ok {
		switch {
		case r.key != key:
			delete(p.refused, i)
		case time.Now().Before(r.until):
			return nil, nil, r.err
		}
	}
	c, ok := p.conns[id]
	if !ok {
		var err error
		if c, err = newConn(cc, &p.requests, p.metrics); err != nil {
			return nil, nil, err
		}
		p.conns[id] = c
		p.seats[id] = fairshare.NewSeats(p.opts.MaxWatches, p.opts.NamespaceWatchFloor)
	}
	var stopped []types.NamespacedName
	// A source that changes what it asks through the same plugin keeps its
	// seat.
	if old == nil || old.conn != c {
		var err error
		if stopped, err = p.seat(i, c); err != nil {
			p.release(c)
			return nil, stopped, err
		}
	}
	// The new watch's connection is counted before the old one is let go,
	// so that a client both use is kept.
	c.watches++
	p.seats[id].Take(i.Backend.Namespace)
	if old != nil {
		p.drop(i)
	}
	ctx, cancel := context.WithCancel(p.ctx)
	p.started++
	w := &watch{key: key, conn: c, req: req, cancel: cancel, answered: make(chan struct{}), started: p.started}
	p.watches[i] = w
	p.wg.Add(1)
	go p.run(ctx, i, w)
	return w, stopped, nil
}

// seat makes room for a new watch of source i through c within its
// namespace's share, stopping the newest watch of the namespace most over
// its share when the budget is full; it returns the backend whose watch
// it stopped. p.mu is held.
func (p *Provider) seat(i interest, c *conn) ([]types.NamespacedName, error) {
	seats := p.seats[c.id]
	a := seats.Ask(i.Backend.Namespace)
	var stopped []types.NamespacedName
	if a.Verdict == fairshare.Reclaim {
		var newest *interest
		for j, w := range p.watches {
			if w.conn == c && j.Backend.Namespace == a.From && (newest == nil || w.started > p.watches[*newest].started) {
				newest = &j
			}
		}
		p.drop(*newest)
		stopped = append(stopped, newest.Backend)
		a = seats.Ask(i.Backend.Namespace)
	}
	switch {
	case a.Verdict == fairshare.Granted:
		return stopped, nil
	case a.Verdict == fairshare.OverShare && a.Holders > 1:
		return stopped, providers.Transient(fmt.Errorf(
			"namespace %s holds %d of the %d sources %s may have, and its share is %d while %d namespaces hold sources there; the source is retried and publishes once the namespace holds fewer",
			i.Backend.Namespace, a.Held, seats.Limit(), c.who, a.Share, a.Holders))
	}
	return stopped, providers.Transient(fmt.Errorf(
		"%s already has %d sources, the controller's limit for one plugin; the source is retried and publishes once one frees up",
		c.who, seats.Total()))
}

// drop stops the watch of i, and drops its connection's client with the
// connection's last watch. p.mu is held.
func (p *Provider) drop(i interest) {
	w := p.watches[i]
	delete(p.watches, i)
	w.cancel()
	c := w.conn
	c.watches--
	p.seats[c.id].Release(i.Backend.Namespace)
	p.release(c)
}

// release drops the client of c once no watch uses it. p.mu is held.
func (p *Provider) release(c *conn) {
	if c.watches == 0 && p.conns[c.id] == c {
		delete(p.conns, c.id)
		delete(p.seats, c.id)
		c.closeIdle()
	}
}

// refuse ends the watch of source i, which the plugin refused with err:
// the source holds no watch until it is asked again, after a delay that
// doubles at each refusal in a row. It returns err saying when. p.mu is
// not held.
func (p *Provider) refuse(i interest, w *watch, err error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.refused[i]
	if !ok || r.key != w.key {
		r = &refusal{key: w.key, provider: w.conn.id.name}
	}
	r.times++
	r.until = time.Now().Add(backoff.Delay(r.times, p.opts.RefusedDelay, p.opts.MaxRefusedDelay))
	// The message names the wait before its jitter, so that sources
	// refused together read alike and the status changes once a round.
	within := p.opts.RefusedDelay
	for i := 1; i < r.times && within < p.opts.MaxRefusedDelay; i++ {
		within *= 2
	}
	pe := providers.AsError(err)
	r.err = &providers.Error{Terminal: pe.Terminal, Gone: pe.Gone, Reason: pe.Reason, Err: fmt.Errorf(
		"%w; it holds no watch and is asked again within %s (doubling up to %s while refused; an edit of the source or its BackendProvider asks at once)",
		pe.Err, min(within, p.opts.MaxRefusedDelay), p.opts.MaxRefusedDelay)}
	if p.watches[i] == w {
		p.refused[i] = r
		p.drop(i)
	}
	return r.err
}

// forgive forgets that the plugin refused source i, once it answered the
// watch w of i otherwise. p.mu is not held.
func (p *Provider) forgive(i interest, w *watch) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r, ok := p.refused[i]; ok && r.key == w.key {
		delete(p.refused, i)
	}
}

// run is a watch's loop: ask, keep the answer, wake the backend when it
// changed, and ask again: at once with the answer's index (a long-poll),
// after the answer's refresh without one, with backoff after a failure.
//
// A refusal of the plugin's consent rules (forbidden) ends the loop: the
// source holds no watch, and is asked again only after a long wait
// (refuse), not at the pace of failures.
func (p *Provider) run(ctx context.Context, i interest, w *watch) {
	defer p.wg.Done()
	defer p.abandon(w)
	limiter := flowcontrol.NewTokenBucketRateLimiter(requestRate, requestBurst)
	defer limiter.Stop()
	req, failures, refusedBefore := w.req, 0, true
	for {
		if limiter.Wait(ctx) != nil {
			return
		}
		ans, err := p.ask(ctx, w.conn, req)
		if ctx.Err() != nil {
			return
		}
		var refused forbidden
		switch {
		case errors.As(err, &refused):
			p.publish(i.Backend, w, answer{}, p.refuse(i, w, err))
			return
		case refusedBefore:
			refusedBefore = false
			p.forgive(i, w)
		}
		p.publish(i.Backend, w, ans, err)
		var pause time.Duration
		switch {
		case err != nil:
			// Ask for the current state, not for a change, once the
			// plugin answers again: it may have restarted with other indexes.
			req.Index, req.WaitSeconds = "", 0
			failures++
			pause = backoff.Delay(failures, p.opts.RetryDelay, p.opts.MaxRetryDelay)
		case ans.index != "":
			// Only a long-poll that answered ends a run of failures: the
			// answer to the request after a failure does not, or a plugin
			// whose long-polls fail (endless headers, say) and whose
			// other answers do not would be asked in a tight loop.
			if req.Index != "" {
				failures = 0
			}
			req.Index, req.WaitSeconds = ans.index, int(p.opts.Wait/time.Second)
		default:
			failures = 0
			req.Index, req.WaitSeconds = "", 0
			// Less up to a tenth, so that sources started together do
			// not keep asking together.
			pause = ans.refresh - rand.N(ans.refresh/10+1)
		}
		if pause > 0 && !backoff.Sleep(ctx, pause) {
			return
		}
	}
}

// ask negotiates the protocol version if needed, then resolves.
func (p *Provider) ask(ctx context.Context, c *conn, req protocol.ResolveRequest) (answer, error) {
	if err := c.negotiate(ctx); err != nil {
		if pe := providers.AsError(err); pe.Reason == v1alpha1.ReasonUnsupportedProtocol {
			// For the source, the plugin cannot be used: its
			// BackendProvider's Ready condition says why.
			return answer{}, providers.Terminal(v1alpha1.ReasonProviderNotAvailable, pe.Err)
		}
		return answer{}, err
	}
	return c.resolve(ctx, req)
}

// publish keeps a watch's latest answer or failure and wakes the backend
// when what it would resolve changed.
func (p *Provider) publish(backend types.NamespacedName, w *watch, ans answer, err error) {
	p.mu.Lock()
	if err != nil && w.done && w.err == nil && !w.seen {
		// The answer before is not seen yet: its wake-up is on its way.
		w.pending = err
		p.mu.Unlock()
		return
	}
	changed := !w.done || !sameError(w.err, err) || (err == nil && (!sameEndpoints(w.endpoints, ans.endpoints) || w.note != ans.note))
	w.err, w.pending = err, nil
	if err == nil {
		w.endpoints, w.note = ans.endpoints, ans.note
	}
	if changed {
		w.seen = false
	}
	if !w.done {
		w.done = true
		close(w.answered)
	}
	p.mu.Unlock()
	// Outside the lock: Wake may wait for the controller, which may be
	// resolving, which takes the lock.
	if changed {
		p.waker.Wake(backend)
	}
}

// sameError tells whether two failures (or successes) read alike on status.
func sameError(a, b error) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	ea, eb := providers.AsError(a), providers.AsError(b)
	return ea.Terminal == eb.Terminal && ea.Gone == eb.Gone && ea.Reason == eb.Reason && a.Error() == b.Error()
}

// sameEndpoints compares two answers as sets.
func sameEndpoints(a, b []providers.Endpoint) bool {
	if len(a) != len(b) {
		return false
	}
	count := make(map[providers.Endpoint]int, len(a))
	for _, e := range a {
		count[e]++
	}
	for _, e := range b {
		if count[e]--; count[e] < 0 {
			return false
		}
	}
	return true
}

// abandon answers a watch that stopped before the plugin answered it, so
// that a Resolve waiting for the first answer returns at once.
func (p *Provider) abandon(w *watch) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !w.done {
		w.done, w.err = true, providers.Transient(errNoAnswer)
		close(w.answered)
	}
}

// Forget stops the watches of backend's sources other than those named
// in keep.
func (p *Provider) Forget(backend types.NamespacedName, keep ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range providers.Forgotten(p.watches, backend, keep) {
		p.drop(i)
	}
	for i := range providers.Forgotten(p.refused, backend, keep) {
		delete(p.refused, i)
	}
}

// Stats are counts for benchmarks and tests.
type Stats struct {
	// Watches running, and Connections (BackendProviders) they use.
	Watches, Connections int
	// Requests sent to plugins for sources since the provider started
	// (connection checks aside).
	Requests uint64
}

// Stats says how many watches run and how many requests were sent.
func (p *Provider) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Stats{Watches: len(p.watches), Connections: len(p.conns), Requests: p.requests.Load()}
}

// Close stops every watch and waits for them to end; Resolve fails after
// it. A watch may be waiting in the waker, so the waker's consumer (the
// controller) must still run, or be stopped, while Close waits.
func (p *Provider) Close() {
	p.mu.Lock()
	p.closed = true
	conns := slices.Collect(maps.Values(p.conns))
	clear(p.watches)
	clear(p.conns)
	clear(p.seats)
	clear(p.refused)
	p.mu.Unlock()
	p.cancel()
	p.wg.Wait()
	for _, c := range conns {
		c.closeIdle()
	}
}

// CheckConnection asks the plugin of cc for its info, with the
// provider's CA, server name and token, and refuses one that speaks no
// version of the protocol this controller speaks (terminal,
// UnsupportedProtocol: the BackendProvider says so at once). The client
// is made for the check and closed after it.
func (p *Provider) CheckConnection(ctx context.Context, cc *providers.Connection) error {
	if settingsOf(cc) == nil {
		return errors.New("a plugin BackendProvider names its plugin's url; there is no connection of the controller's own to check")
	}
	// The check's request is not one of the sources' (Stats).
	c, err := newConn(cc, new(atomic.Uint64), nil)
	if err != nil {
		return err
	}
	defer c.closeIdle()
	return c.info(ctx)
}

var (
	_ providers.Provider  = (*Provider)(nil)
	_ providers.Checker   = (*Provider)(nil)
	_ providers.Forgetter = (*Provider)(nil)
	_ providers.Closer    = (*Provider)(nil)
)
