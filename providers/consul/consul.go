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
		own:       ownConn(client, addr, token),
		waker:     waker,
		watches:   map[watchKey]*watch{},
		interests: map[interest]*watch{},
		conns:     map[connID]*conn{},
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	return p, nil
}

// Kind is providers.KindConsul.
func (*Provider) Kind() providers.Kind { return providers.KindConsul }

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
		datacenter = cmp.Or(datacenter, cc.Consul.Datacenter)
	}
	key, q := keyOf(id, datacenter, src)
	w, err := p.use(interest{types.NamespacedName{Namespace: req.Namespace, Name: req.Backend}, req.Source.Name}, key, q, req.Connection)
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
// the client of its connection cc) if needed, and stops using the watch i
// used before if that had another key. The new watch is taken before the
// old one is let go, so that a client both use is kept.
func (p *Provider) use(i interest, key watchKey, q query, cc *providers.Connection) (*watch, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, providers.Transient(errors.New("the consul provider is stopped"))
	}
	w, ok := p.watches[key]
	if !ok {
		c, err := p.connect(cc)
		if err != nil {
			return nil, err
		}
		if c.watches >= p.opts.MaxWatches {
			return nil, providers.Transient(fmt.Errorf(
				"spec.sources[%s].consul.service: %s already watches %d Consul services, its limit (--consul-max-watches); the source is retried and publishes once a watch frees up, or the controller's operators raise the limit",
				i.source, c.who, c.watches))
		}
		c.watches++
		ctx, cancel := context.WithCancel(p.ctx)
		w = &watch{key: key, query: q, conn: c, cancel: cancel, answered: make(chan struct{}), users: map[interest]struct{}{}}
		p.watches[key] = w
		p.wg.Add(1)
		go p.run(ctx, w)
	}
	if cc != nil {
		w.conn.token = tokenOf(w.conn.who, cc.Consul.Token)
	}
	if old, ok := p.interests[i]; ok && old != w {
		p.drop(i)
	}
	w.users[i] = struct{}{}
	p.interests[i] = w
	return w, nil
}

// connect returns the connection of cc (the controller's own when nil),
// making its client if no watch uses it yet. p.mu is held.
func (p *Provider) connect(cc *providers.Connection) (*conn, error) {
	if cc == nil {
		return p.own, nil
	}
	if c, ok := p.conns[connID{cc.Name, cc.Key}]; ok {
		return c, nil
	}
	c, err := newConn(cc)
	if err != nil {
		return nil, err
	}
	p.conns[c.id] = c
	return c, nil
}

// drop removes interest i, stopping its watch when nothing else uses it,
// and dropping the watch's connection with its last watch. p.mu is held.
func (p *Provider) drop(i interest) {
	w := p.interests[i]
	delete(p.interests, i)
	delete(w.users, i)
	if len(w.users) > 0 {
		return
	}
	w.cancel()
	delete(p.watches, w.key)
	c := w.conn
	if c.watches--; c.watches == 0 && c != p.own {
		delete(p.conns, c.id)
		c.closeIdle()
	}
}

// Forget drops what the provider keeps for backend's sources other than
// those named in keep, stopping watches nothing uses any more. The
// controller calls it when a backend is deleted (keep empty) and after each
// resolve with the names of the backend's sources, so that a source removed
// from the spec, or turned into another kind, stops being watched.
func (p *Provider) Forget(backend types.NamespacedName, keep ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.interests {
		if i.backend == backend && !slices.Contains(keep, i.source) {
			p.drop(i)
		}
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
	p.mu.Unlock()
	p.cancel()
	p.wg.Wait()
	for _, c := range conns {
		c.closeIdle()
	}
}

var _ providers.Provider = (*Provider)(nil)
