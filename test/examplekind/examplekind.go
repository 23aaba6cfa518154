// Package examplekind is the made-up example kind (v1alpha1.ExampleSource
// and ExampleProvider), built as every kind's package is: it exports its
// rows of the table of source kinds and its provider, and touches nothing
// else. The tests add it to the binary's table (wiring.Kinds) to show a
// kind end to end; no release has it, and the shipped CRDs refuse its
// fields.
//
// An example catalog is a map, in memory, of each item's addresses; a
// BackendProvider of the kind names a catalog and the items its
// namespaces may read.
package examplekind

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
)

// Kind is the source kind of spec.sources[].example.
const Kind providers.Kind = "example"

// RuleAllowedItems is the kind's own admission rule: a source reads only
// an item its provider's spec.example.allowedItems lists.
const RuleAllowedItems = "AllowedItems"

// Settings are an example BackendProvider's connection: its catalog.
type Settings struct {
	Catalog string
}

// Kinds are the rows of the table of source kinds this package serves:
// example sources, always through an example BackendProvider. The kind
// binds no flags and has no constructor of the binary's: tests build its
// provider with New.
func Kinds() providers.Kinds {
	p := &providers.ProviderKind{
		Name:    "example",
		Of:      func(s v1alpha1.BackendProviderSpec) bool { return s.Example != nil },
		Connect: connect,
	}
	return providers.Kinds{{Kind: Kind, Of: func(s v1alpha1.Source) bool { return s.Example != nil }, Provider: p, Admit: admit}}
}

// connect is bp's catalog; the kind reads no Secret.
func connect(_ context.Context, bp *v1alpha1.BackendProvider, _ providers.SecretReader) (*providers.Connection, error) {
	conn := providers.NewConnection(bp)
	conn.Settings = &Settings{Catalog: bp.Spec.Example.Catalog}
	return conn, nil
}

// admit refuses an item the provider does not list.
func admit(p *v1alpha1.BackendProvider, src v1alpha1.Source) *providers.Denial {
	allowed := p.Spec.Example.AllowedItems
	if len(allowed) == 0 || slices.Contains(allowed, src.Example.Item) {
		return nil
	}
	return &providers.Denial{Rule: RuleAllowedItems, Message: fmt.Sprintf(
		"spec.sources[%s].example.item: %q is not among the items BackendProvider %q serves (spec.example.allowedItems %v)",
		src.Name, src.Example.Item, p.Name, allowed)}
}

// Catalogs are the example catalogs, by name: each item's addresses.
// Safe for concurrent use.
type Catalogs struct {
	mu    sync.Mutex
	items map[string]map[string][]string
	// asked counts the requests answered, by namespace.
	asked map[string]int
}

// NewCatalogs returns empty catalogs.
func NewCatalogs() *Catalogs {
	return &Catalogs{items: map[string]map[string][]string{}, asked: map[string]int{}}
}

// Set lists the addresses of item in catalog.
func (c *Catalogs) Set(catalog, item string, addrs ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.items[catalog] == nil {
		c.items[catalog] = map[string][]string{}
	}
	c.items[catalog][item] = slices.Clone(addrs)
}

// Asked is how many requests of namespace ns the provider answered.
func (c *Catalogs) Asked(ns string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.asked[ns]
}

// lookup records a request of ns and returns item's addresses in catalog.
func (c *Catalogs) lookup(ns, catalog, item string) ([]string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.asked[ns]++
	addrs, ok := c.items[catalog][item]
	return slices.Clone(addrs), ok
}

// Provider resolves example sources from catalogs.
type Provider struct{ catalogs *Catalogs }

// New returns a provider reading c.
func New(c *Catalogs) *Provider { return &Provider{catalogs: c} }

// Kind is the example kind.
func (*Provider) Kind() providers.Kind { return Kind }

// RefreshAfter is how soon a source is resolved again: a changed catalog
// shows within a test.
const RefreshAfter = time.Second

// Resolve answers with the item's addresses in the catalog of the
// source's BackendProvider; an item the catalog lacks is gone.
func (p *Provider) Resolve(_ context.Context, req providers.Request) (providers.Result, error) {
	src := req.Source.Example
	settings, ok := providers.SettingsOf[*Settings](req.Connection)
	switch {
	case src == nil:
		return providers.Result{}, providers.Terminalf(v1alpha1.ReasonInvalidSpec, "spec.sources[%s]: not an example source", req.Source.Name)
	case !ok:
		return providers.Result{}, providers.Terminalf(v1alpha1.ReasonProviderNotAvailable,
			"spec.sources[%s].providerRef: an example source is resolved through a BackendProvider of kind example only; name one", req.Source.Name)
	}
	addrs, found := p.catalogs.lookup(req.Namespace, settings.Catalog, src.Item)
	if !found {
		return providers.Result{}, providers.Gone(v1alpha1.ReasonBackendNotFound,
			fmt.Errorf("spec.sources[%s].example.item: catalog %q has no item %q", req.Source.Name, settings.Catalog, src.Item))
	}
	res := providers.Result{RefreshAfter: RefreshAfter}
	for _, a := range addrs {
		res.Endpoints = append(res.Endpoints, providers.Endpoint{Address: a, Serving: true})
	}
	return res, nil
}
