// Package consul resolves consul sources: the instances of a Consul service
// and the health their checks give, kept current by blocking queries.
//
// Watches are shared: every source with the same datacenter, service, tags,
// namespace, partition and node-meta filter uses one blocking-query loop,
// however many ExternalBackends refer to it. Resolve registers the source as
// a user of its watch and answers from the watch's latest answer; when that
// answer changes, the watch wakes exactly the backends that use it through
// the controller's providers.Waker. A watch stops when no source uses it any
// more (see Forget), and every watch stops on Close.
package consul

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"

	"github.com/hashicorp/consul/api"
	"k8s.io/apimachinery/pkg/types"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
)

// Provider resolves consul sources through shared blocking-query watches.
type Provider struct {
	opts   Options
	client *api.Client
	// token is nil when the token comes from the environment.
	token *tokenFile
	waker providers.Waker

	// ctx ends every watch on Close.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	closed    bool
	watches   map[watchKey]*watch
	interests map[interest]*watch
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
	client, err := opts.newClient()
	if err != nil {
		return nil, err
	}
	p := &Provider{
		opts:      opts,
		client:    client,
		waker:     waker,
		watches:   map[watchKey]*watch{},
		interests: map[interest]*watch{},
	}
	if opts.TokenFile != "" {
		if p.token, err = newTokenFile(opts.TokenFile); err != nil {
			return nil, err
		}
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
// as malformed (a namespace on Consul CE), which is the spec's to fix.
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
	}
	key, q := keyOf(src)
	w, err := p.use(interest{types.NamespacedName{Namespace: req.Namespace, Name: req.Backend}, req.Source.Name}, key, q)
	if err != nil {
		return providers.Result{}, providers.Transient(err)
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
		return providers.Result{}, failure(req.Source.Name, src.Service, err)
	}
	return providers.Result{Endpoints: endpointsOf(ins, src.OnlyPassing, src.ZoneMetaKey)}, nil
}

// failure classifies a watch's failure for a source.
func failure(source, service string, err error) error {
	var se api.StatusError
	if errors.As(err, &se) && se.Code == http.StatusBadRequest {
		return providers.Terminalf(v1alpha1.ReasonInvalidSpec,
			"spec.sources[%s].consul: Consul refused the query for service %q: %s; fix the source (namespace and partition need Consul Enterprise)",
			source, service, se.Body)
	}
	return providers.Transient(fmt.Errorf("spec.sources[%s].consul: querying service %q: %w", source, service, err))
}

// use makes i a user of the watch of key, starting that watch if needed,
// and stops using the watch i used before if that had another key.
func (p *Provider) use(i interest, key watchKey, q query) (*watch, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errors.New("the consul provider is stopped")
	}
	if w, ok := p.interests[i]; ok {
		if w.key == key {
			return w, nil
		}
		p.drop(i)
	}
	w, ok := p.watches[key]
	if !ok {
		ctx, cancel := context.WithCancel(p.ctx)
		w = &watch{key: key, query: q, cancel: cancel, answered: make(chan struct{}), users: map[interest]struct{}{}}
		p.watches[key] = w
		p.wg.Add(1)
		go p.run(ctx, w)
	}
	w.users[i] = struct{}{}
	p.interests[i] = w
	return w, nil
}

// drop removes interest i, stopping its watch when nothing else uses it.
// p.mu is held.
func (p *Provider) drop(i interest) {
	w := p.interests[i]
	delete(p.interests, i)
	delete(w.users, i)
	if len(w.users) == 0 {
		w.cancel()
		delete(p.watches, w.key)
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

// Close stops every watch and waits for them to end; Resolve fails after
// it. A watch may be waiting in the waker, so the waker's consumer (the
// controller) must still run while Close waits.
func (p *Provider) Close() {
	p.mu.Lock()
	p.closed = true
	clear(p.watches)
	clear(p.interests)
	p.mu.Unlock()
	p.cancel()
	p.wg.Wait()
}

var _ providers.Provider = (*Provider)(nil)
