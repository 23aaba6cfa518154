// Package consul resolves consul sources: the instances of a Consul service
// and the health their checks give, kept current by blocking queries.
//
// Watches are shared: every source with the same connection, datacenter,
// service, tags, namespace, partition and node-meta filter uses one
// blocking-query loop, however many ExternalBackends refer to it. Resolve
// registers the source as a user of its watch and answers from the watch's
// latest answer; when that answer changes, the watch wakes exactly the
// backends that use it through the controller's providers.Waker. A watch stops when no source uses it any
// more (see Forget), and every watch stops on Close.
//
// A source reaches Consul through the controller's own connection (its
// --consul-* flags), or through the BackendProvider it names, which the
// controller passes in providers.Request.Connection. Each BackendProvider
// has a client of its own (address, CA, server name), made for the first
// watch through it and dropped with the last; its token is asked before
// every query. Connections never share a watch, so one never sees another's
// answer, nor fails with another's token.
package consul

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"unicode"

	"github.com/hashicorp/consul/api"
	"k8s.io/apimachinery/pkg/types"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/fairshare"
	"github.com/backendslice/backendslice/providers"
)

// Provider resolves consul sources through shared blocking-query watches.
type Provider struct {
	opts Options
	// own is the controller's connection, kept for the provider's lifetime.
	own   *conn
	waker providers.Waker

	// ctx ends every watch on Close.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	closed    bool
	watches   map[watchKey]*watch
	interests map[interest]*watch
	// conns are the BackendProviders' connections some watch uses.
	conns map[connID]*conn
	// agents are the agent addresses some connection reaches (budget.go).
	agents map[string]*agent
	// started counts the watches started, to tell the newest.
	started uint64
}

// New returns a provider that reaches Consul as opts say and wakes the
// controller through waker when a watched service changes. It does not
// connect: watches start at the first Resolve of their key.
func New(opts Options, waker providers.Waker) (*Provider, error) {
	if waker == nil {
		return nil, errors.New("consul provider: a waker is required, since watches push changes")
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	client, addr, err := opts.newClient()
	if err != nil {
		return nil, err
	}
	var token *tokenFile
	if opts.TokenFile != "" {
		if token, err = newTokenFile(opts.TokenFile); err != nil {
			return nil, err
		}
	}
	p := &Provider{
		opts:      opts,
		own:       ownConn(client, addr, token, opts.MaxWatches, opts.NamespaceWatchFloor),
		waker:     waker,
		watches:   map[watchKey]*watch{},
		interests: map[interest]*watch{},
		conns:     map[connID]*conn{},
		agents:    map[string]*agent{},
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	return p, nil
}

// Kind is the consul kind.
func (*Provider) Kind() providers.Kind { return Kind }

// Resolve returns the instances of the source's Consul service as endpoints.
// It registers the source as a user of its watch (leaving the watch it used
// before, if the source's key changed), waits for the watch's first answer
// as long as ctx allows, and returns the latest answer. While the watch
// fails, Resolve fails with the watch's last error: transient, so that the
// controller keeps the endpoints it knows, except for a query Consul refuses
// as malformed (a namespace on Consul CE), which is the spec's to fix, and
// a token Consul refuses, which is the configuration's (see failure).
// The answer holds until the watch wakes the backend: RefreshAfter is zero.
func (p *Provider) Resolve(ctx context.Context, req providers.Request) (providers.Result, error) {
	src := req.Source.Consul
	switch {
	case src == nil:
		return providers.Result{}, providers.Terminalf(v1alpha1.ReasonInvalidSpec,
			"spec.sources[%s]: not a consul source", req.Source.Name)
	case src.Service == "":
		return providers.Result{}, providers.Terminalf(v1alpha1.ReasonInvalidSpec,
			"spec.sources[%s].consul.service: empty; name the Consul service to publish", req.Source.Name)
	case !safeService(src.Service):
		return providers.Result{}, providers.Terminalf(v1alpha1.ReasonInvalidSpec,
			"spec.sources[%s].consul.service: %q is not a Consul service name: it may not hold '/', '..', '?', '#', '%%', spaces or control characters",
			req.Source.Name, src.Service)
	}
	var id connID
	datacenter := src.Datacenter
	if cc := req.Connection; cc != nil {
		if err := checkConnection(cc); err != nil {
			return providers.Result{}, err
		}
		id = connID{cc.Name, cc.Key}
		datacenter = cmp.Or(datacenter, settingsOf(cc).Datacenter)
	}
	key, q := keyOf(id, datacenter, src)
	w, err := p.use(providers.SourceKeyOf(req), key, q, req.Connection,
		p.agentOf(ctx, id, req.Connection))
	if err != nil {
		return providers.Result{}, err
	}
	// An answer in hand is returned even if ctx is already done: it is whole.
	select {
	case <-w.answered:
	default:
		select {
		case <-w.answered:
		case <-ctx.Done():
			return providers.Result{}, providers.Transient(fmt.Errorf(
				"spec.sources[%s].consul: no answer from Consul yet for service %q: %w", req.Source.Name, src.Service, ctx.Err()))
		}
	}
	p.mu.Lock()
	ins, err := w.instances, w.err
	p.mu.Unlock()
	if err != nil {
		return providers.Result{}, failure(req.Source.Name, src.Service, w.conn.who, err)
	}
	sel := selection{tags: src.Tags, nodeMeta: src.NodeMeta}
	return providers.Result{Endpoints: endpointsOf(sel.filter(ins), src.OnlyPassing, src.ZoneMetaKey)}, nil
}

// safeService tells whether a service name can go into the path of
// /v1/health/service/<name>. The API client does not escape '/' there, and
// the agent's router cleans "..": a name holding them would query another
// endpoint of the agent with the controller's token. '?', '#' and '%' would
// end or re-encode the path, and spaces and control characters are no
// part of a service name.
func safeService(name string) bool {
	return !strings.ContainsAny(name, "/?#%") && !strings.Contains(name, "..") &&
		!strings.ContainsFunc(name, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) })
}

// maxBody bounds how much of an error body Consul sent goes into a message:
// enough for Consul's own one-line errors, and no room for whatever else
// answered at that address to fill the status with.
const maxBody = 200

// failure classifies a watch's failure for a source; who names the
// connection the watch queried through.
func failure(source, service, who string, err error) error {
	field := fmt.Sprintf("spec.sources[%s].consul", source)
	var se api.StatusError
	if !errors.As(err, &se) {
		return providers.Transient(fmt.Errorf("%s: querying service %q: %w", field, service, err))
	}
	answer := fmt.Sprintf("%d %s", se.Code, providers.Printable(se.Body, maxBody))
	switch se.Code {
	case http.StatusBadRequest:
		return providers.Terminalf(v1alpha1.ReasonInvalidSpec,
			"%s: Consul refused the query for service %q: %s; fix the source (namespace and partition need Consul Enterprise)",
			field, service, answer)
	case http.StatusUnauthorized, http.StatusForbidden:
		// The watch keeps asking, with the token read again each time: the
		// backend is woken once a fixed token is let in.
		return providers.Terminalf(v1alpha1.ReasonAccessDenied,
			"%s: Consul refused the ACL token of %s for service %q: %s; give it a token whose policy reads the service and its nodes",
			field, who, service, answer)
	}
	return providers.Transient(fmt.Errorf("%s: querying service %q: Consul answered %s", field, service, answer))
}

// use makes i a user of the watch of key, starting that watch (and making
// the client of its connection cc, which reaches the agent at agentAddr)
// if needed, and stops using the watch i used before if that had another
// key. The new watch is taken before the old one is let go, so that a
// client both use is kept. A new watch needs a seat of its connection's
// budget and of its agent's (admit); the backends whose watch was stopped
// to seat it are woken, to say so on their status.
func (p *Provider) use(i interest, key watchKey, q query, cc *providers.Connection, agentAddr string) (*watch, error) {
	p.mu.Lock()
	w, stopped, err := p.useLocked(i, key, q, cc, agentAddr)
	p.mu.Unlock()
	for _, b := range backendsOf(stopped) {
		// Not from here: Wake may wait for the controller, which is
		// running this reconcile.
		go p.waker.Wake(b)
	}
	return w, err
}

// useLocked is use with p.mu held; it returns the interests whose watch it
// stopped.
func (p *Provider) useLocked(i interest, key watchKey, q query, cc *providers.Connection, agentAddr string) (*watch, []interest, error) {
	if p.closed {
		return nil, nil, providers.Transient(errors.New("the consul provider is stopped"))
	}
	var stopped []interest
	w, ok := p.watches[key]
	if !ok {
		c, err := p.connect(cc, agentAddr)
		if err != nil {
			return nil, nil, err
		}
		stopped, err = p.admit(i, c)
		if err != nil {
			p.release(c)
			return nil, stopped, err
		}
		ns := i.Backend.Namespace
		c.seats.Take(ns)
		c.agent.seats.Take(ns)
		p.started++
		ctx, cancel := context.WithCancel(p.ctx)
		w = &watch{key: key, query: q, conn: c, cancel: cancel, answered: make(chan struct{}), users: map[interest]struct{}{},
			holder: ns, started: p.started}
		p.watches[key] = w
		p.wg.Add(1)
		go p.run(ctx, w)
	}
	if cc != nil {
		w.conn.token = tokenOf(w.conn.who, settingsOf(cc).Token)
	}
	if old, ok := p.interests[i]; ok && old != w {
		p.drop(i)
	}
	w.users[i] = struct{}{}
	p.interests[i] = w
	return w, stopped, nil
}

// agentOf is the agent address of connection id (cc, or the controller's
// own when nil), resolved only for a connection that has none yet: once
// per connection, outside the provider's lock.
func (p *Provider) agentOf(ctx context.Context, id connID, cc *providers.Connection) string {
	p.mu.Lock()
	c, ok := p.conns[id]
	if cc == nil {
		c, ok = p.own, true
	}
	known := ok && c.agent != nil
	p.mu.Unlock()
	switch {
	case known:
		return ""
	case cc == nil:
		return agentAddress(ctx, p.own.addr, p.opts.CAFile != "" || p.opts.TLSServerName != "")
	}
	s := settingsOf(cc)
	return agentAddress(ctx, s.Address, len(s.CAPEM) > 0 || s.ServerName != "")
}

// connect returns the connection of cc (the controller's own when nil),
// making its client if no watch uses it yet, and counting it on the agent
// at agentAddr if it is not yet. p.mu is held.
func (p *Provider) connect(cc *providers.Connection, agentAddr string) (*conn, error) {
	c := p.own
	if cc != nil {
		var ok bool
		if c, ok = p.conns[connID{cc.Name, cc.Key}]; !ok {
			var err error
			if c, err = newConn(cc); err != nil {
				return nil, err
			}
			c.seats = fairshare.NewSeats(p.opts.MaxWatches, p.opts.NamespaceWatchFloor)
			p.conns[c.id] = c
		}
	}
	if c.agent == nil {
		a, ok := p.agents[agentAddr]
		if !ok {
			a = &agent{addr: agentAddr, seats: fairshare.NewSeats(p.opts.MaxWatchesPerAgent, p.opts.NamespaceWatchFloor)}
			p.agents[agentAddr] = a
		}
		a.conns++
		c.agent = a
	}
	return c, nil
}

// release forgets a BackendProvider's connection once no watch uses it,
// and its agent with the agent's last connection. p.mu is held.
func (p *Provider) release(c *conn) {
	if c == p.own || c.seats.Total() > 0 {
		return
	}
	delete(p.conns, c.id)
	c.closeIdle()
	if a := c.agent; a != nil {
		if a.conns--; a.conns == 0 {
			delete(p.agents, a.addr)
		}
	}
}

// drop removes interest i, stopping its watch when nothing else uses it.
// A watch that other namespaces' sources still use is charged to one of
// them once the last source of its holder leaves. p.mu is held.
func (p *Provider) drop(i interest) {
	w := p.interests[i]
	delete(p.interests, i)
	delete(w.users, i)
	switch {
	case len(w.users) == 0:
		p.stop(w, nil)
	case w.holder == i.Backend.Namespace && !usedBy(w, w.holder):
		next := nextHolder(w)
		for _, s := range []*fairshare.Seats{w.conn.seats, w.conn.agent.seats} {
			s.Take(next)
			s.Release(w.holder)
		}
		w.holder = next
	}
}

// stop ends watch w, gives back its seats, drops its connection's client
// with the connection's last watch (unless that is keep, about to take a
// watch), and returns the interests that used it, which no longer do.
// p.mu is held.
func (p *Provider) stop(w *watch, keep *conn) []interest {
	users := slices.Collect(maps.Keys(w.users))
	for _, u := range users {
		delete(p.interests, u)
	}
	clear(w.users)
	w.cancel()
	delete(p.watches, w.key)
	c := w.conn
	c.seats.Release(w.holder)
	c.agent.seats.Release(w.holder)
	if c != keep {
		p.release(c)
	}
	return users
}

// usedBy tells whether a source of namespace ns uses w.
func usedBy(w *watch, ns string) bool {
	for u := range w.users {
		if u.Backend.Namespace == ns {
			return true
		}
	}
	return false
}

// backendsOf are the backends of is, each once.
func backendsOf(is []interest) []types.NamespacedName {
	seen := map[types.NamespacedName]bool{}
	var out []types.NamespacedName
	for _, i := range is {
		if !seen[i.Backend] {
			seen[i.Backend] = true
			out = append(out, i.Backend)
		}
	}
	return out
}

// Forget drops what the provider keeps for backend's sources other than
// those named in keep, stopping watches nothing uses any more. The
// controller calls it when a backend is deleted (keep empty) and after each
// resolve with the names of the backend's sources, so that a source removed
// from the spec, or turned into another kind, stops being watched.
func (p *Provider) Forget(backend types.NamespacedName, keep ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range providers.Forgotten(p.interests, backend, keep) {
		p.drop(i)
	}
}

// Watches is the number of watches running: one per distinct key in use,
// whatever the number of sources sharing it.
func (p *Provider) Watches() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.watches)
}

// Connections is the number of BackendProvider connections with a client:
// those some watch uses. The controller's own connection is not counted.
func (p *Provider) Connections() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Close stops every watch and waits for them to end; Resolve fails after
// it. A watch may be waiting in the waker, so the waker's consumer (the
// controller) must still run while Close waits.
func (p *Provider) Close() {
	p.mu.Lock()
	p.closed = true
	clear(p.watches)
	clear(p.interests)
	conns := slices.Collect(maps.Values(p.conns))
	clear(p.conns)
	clear(p.agents)
	p.mu.Unlock()
	p.cancel()
	p.wg.Wait()
	for _, c := range conns {
		c.closeIdle()
	}
}

var _ providers.Provider = (*Provider)(nil)
