package providers

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/types"

	"github.com/backendslice/backendslice/api/v1alpha1"
)

// Registry maps source kinds to the providers built into this controller,
// through its table of kinds. It is built once in main and injected; it
// holds no mutable state (an observer, when it has one, counts calls).
type Registry struct {
	kinds  Kinds
	byKind map[Kind]Provider
	// observer hears of every call passed to a provider; nil for none.
	observer CallObserver
}

// Call is one call the registry passed to a provider, as a CallObserver
// hears of it.
type Call struct {
	// Provider is the BackendProvider the call went through: the one a
	// source names in providerRef, or the one checked; "" for a source
	// without providerRef (the controller's own connection).
	Provider string
	// Kind is the BackendProvider kind of the provider called (static,
	// dns, consul, aws).
	Kind string
	// Op is what was asked: CallResolve or CallCheck.
	Op string
}

// What a Call asked.
const (
	// CallResolve resolved a source.
	CallResolve = "resolve"
	// CallCheck checked a BackendProvider's connection.
	CallCheck = "check"
)

// CallObserver hears of every call a registry passes to a provider, with
// the error it returned (nil for a success). It must not block: it is
// called on the reconcile's goroutines.
type CallObserver interface {
	Called(c Call, err error)
}

// Observed returns a registry of the same providers and kinds that tells o
// of every call it passes to a provider.
func (r *Registry) Observed(o CallObserver) *Registry {
	c := *r
	c.observer = o
	return &c
}

// observe tells the observer, if there is one, of a call through the
// BackendProvider named provider (of kind p) and its outcome.
func (r *Registry) observe(provider string, p *ProviderKind, op string, err error) {
	if r.observer == nil {
		return
	}
	c := Call{Provider: provider, Op: op}
	if p != nil {
		c.Kind = p.Name
	}
	r.observer.Called(c, err)
}

// NewRegistry returns a registry of the given providers for the kinds of
// ks. Two providers of the same kind, or a provider of a kind ks does not
// have, are programming errors.
func (ks Kinds) NewRegistry(ps ...Provider) (*Registry, error) {
	r := &Registry{kinds: ks, byKind: make(map[Kind]Provider, len(ps))}
	for _, p := range ps {
		if _, dup := r.byKind[p.Kind()]; dup {
			return nil, fmt.Errorf("two providers registered for source kind %q", p.Kind())
		}
		if !slices.ContainsFunc(ks, func(k SourceKind) bool { return k.Kind == p.Kind() }) {
			return nil, fmt.Errorf("a provider registered for source kind %q, which the table of kinds does not have", p.Kind())
		}
		r.byKind[p.Kind()] = p
	}
	return r, nil
}

// Kinds is the registry's table of kinds: what admission, connections and
// the controller's checks read about each kind.
func (r *Registry) Kinds() Kinds { return r.kinds }

// Resolve resolves one source with the provider of its kind. A kind without a
// provider is a terminal ProviderNotAvailable error naming the field.
func (r *Registry) Resolve(ctx context.Context, req Request) (Result, error) {
	kind := r.kinds.KindOf(req.Source)
	p, ok := r.byKind[kind]
	if !ok {
		return Result{}, Terminalf(v1alpha1.ReasonProviderNotAvailable,
			"spec.sources[%s].%s: this controller has no %s provider yet; use a static source meanwhile",
			req.Source.Name, kind, kind)
	}
	res, err := p.Resolve(ctx, req)
	provider := ""
	if ref := req.Source.ProviderRef; ref != nil {
		provider = ref.Name
	}
	r.observe(provider, r.kinds.Of(req.Source).Provider, CallResolve, err)
	return res, err
}

// Forgetter is implemented by providers that keep state per backend (shared
// watches): Forget drops the backend's sources except those named in keep,
// and all of them when keep is empty.
type Forgetter interface {
	Forget(backend types.NamespacedName, keep ...string)
}

// Forget tells every provider that keeps state per backend which of the
// backend's sources it still serves: each provider hears the names of the
// sources of its own kind in keep, so a source turned into another kind is
// forgotten by its former provider. Without keep (the backend is deleted,
// suspended or invalid) every provider forgets the backend.
func (r *Registry) Forget(backend types.NamespacedName, keep ...v1alpha1.Source) {
	for kind, p := range r.byKind {
		f, ok := p.(Forgetter)
		if !ok {
			continue
		}
		var names []string
		for _, s := range keep {
			if r.kinds.KindOf(s) == kind {
				names = append(names, s.Name)
			}
		}
		f.Forget(backend, names...)
	}
}

// Closer is implemented by providers that run goroutines or hold
// connections (watches, listings): Close stops them.
type Closer interface {
	Close()
}

// Close stops every provider that runs something, when the controller stops.
func (r *Registry) Close() {
	for _, p := range r.byKind {
		if c, ok := p.(Closer); ok {
			c.Close()
		}
	}
}

// Providers are the providers of the registry (one a kind), in the order
// of its kinds.
func (r *Registry) Providers() []Provider {
	var out []Provider
	for _, k := range r.kinds {
		if p, ok := r.byKind[k.Kind]; ok {
			out = append(out, p)
		}
	}
	return out
}

// CheckConnection checks the connection conn of BackendProvider bp with
// the provider of its kind. checked is false when no provider of bp's kind
// checks connections (static, a kind of a plugin without a check): then
// there is nothing to tell beyond the provider's settings.
func (r *Registry) CheckConnection(ctx context.Context, bp *v1alpha1.BackendProvider, conn *Connection) (checked bool, err error) {
	pk := r.kinds.ProviderOf(bp.Spec)
	for _, kind := range r.kinds.SourceKindsOf(pk) {
		// Source kinds of one provider kind share its connection (awsRDS
		// and awsEC2: aws), so one check tells for all of them.
		if c, ok := r.byKind[kind].(Checker); ok {
			err := c.CheckConnection(ctx, conn)
			r.observe(bp.Name, pk, CallCheck, err)
			return true, err
		}
	}
	return false, nil
}
