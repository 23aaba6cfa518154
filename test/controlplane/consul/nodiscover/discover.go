// Package discover is the part of go-discover's API that Consul's agent
// calls (retry_join and auto_config "provider=..." addresses), with no
// providers of its own: a test agent given such an address gets an error
// naming the provider, and logs it as Consul does any failed discovery.
package discover

import (
	"fmt"
	"log"
	"sort"
	"strings"
)

// Provider looks up addresses from a provider's key=value arguments.
type Provider interface {
	Addrs(args map[string]string, l *log.Logger) ([]string, error)
	Help() string
}

// Providers is the built-in set, empty here: the cloud providers are what
// this module leaves out.
var Providers = map[string]Provider{}

// Discover resolves "provider=NAME key=value ..." with its providers.
type Discover struct {
	providers map[string]Provider
}

// Option configures a Discover.
type Option func(*Discover) error

// New returns a Discover with opts applied.
func New(opts ...Option) (*Discover, error) {
	d := &Discover{providers: Providers}
	for _, opt := range opts {
		if err := opt(d); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// WithUserAgent is accepted and unused: none of the providers Consul
// gives this Discover sends requests that carry one.
func WithUserAgent(string) Option {
	return func(*Discover) error { return nil }
}

// WithProviders replaces the set of providers.
func WithProviders(m map[string]Provider) Option {
	return func(d *Discover) error { d.providers = m; return nil }
}

// Names lists the providers' names, sorted (Consul logs them).
func (d *Discover) Names() []string {
	names := make([]string, 0, len(d.providers))
	for name := range d.providers {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// Addrs parses cfg ("provider=NAME key=value ...", values without spaces)
// and asks the named provider.
func (d *Discover) Addrs(cfg string, l *log.Logger) ([]string, error) {
	args := map[string]string{}
	for _, field := range strings.Fields(cfg) {
		key, value, ok := strings.Cut(field, "=")
		if !ok {
			return nil, fmt.Errorf("discover: %q is not key=value", field)
		}
		args[key] = value
	}
	name := args["provider"]
	p, ok := d.providers[name]
	if !ok {
		return nil, fmt.Errorf("discover: provider %q is not built into this test agent (it has: %s)", name, strings.Join(d.Names(), ", "))
	}
	return p.Addrs(args, l)
}
