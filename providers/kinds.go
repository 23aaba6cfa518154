package providers

import (
	"context"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"slices"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"

	"github.com/backendslice/backendslice/api/v1alpha1"
)

// SourceKind is one row of the table of source kinds: everything the
// controller knows about a kind outside its Provider. Each kind's package
// exports its rows (providers/<kind>.Kinds); the binary assembles the
// table, and every reader (the registry, admission, connections, the
// status of BackendProviders, the controller's spec checks, the flags)
// reads the table it is given.
type SourceKind struct {
	// Kind is the kind's name: the field of spec.sources[] it is set in.
	Kind Kind
	// Of tells whether a source is of this kind. The first row that claims
	// a source has it, so a row may narrow a field another row has.
	Of func(v1alpha1.Source) bool
	// Provider is the BackendProvider kind that serves sources of this
	// kind; several source kinds may share one (awsRDS and awsEC2: aws).
	Provider *ProviderKind
	// Admit holds the kind's own admission rules, checked after the
	// namespace and kind rules every kind has (so p is of Provider's kind):
	// why p may not serve src, or nil. Nil Admit: no rule of its own.
	Admit func(p *v1alpha1.BackendProvider, src v1alpha1.Source) *Denial
	// Check holds the controller's own checks of a source this row claims,
	// for what admission cannot refuse (objects stored before a rule
	// existed): a message naming the field and the fix, or "". Nil Check:
	// none.
	Check func(src v1alpha1.Source) string
}

// ProviderKind is one kind of BackendProvider: a connection the platform
// team sets up, named by spec.<kind> and reported as status.kind.
type ProviderKind struct {
	// Name is the kind as status.kind reports it and refusals name it.
	Name string
	// Of tells whether a BackendProvider's spec is of this kind.
	Of func(v1alpha1.BackendProviderSpec) bool
	// Connect builds the connection sources get through bp, a provider
	// this kind's Of claims, reading the Secrets it names through secrets;
	// it returns nil when bp only admits (the provider then uses the
	// controller's own connection). Nil Connect: the kind never has a
	// connection of its own.
	Connect func(ctx context.Context, bp *v1alpha1.BackendProvider, secrets SecretReader) (*Connection, error)
	// Secrets names the Secrets of the controller's namespace that bp (of
	// this kind) reads, so that a changed Secret wakes what uses it. Nil:
	// none.
	Secrets func(bp *v1alpha1.BackendProvider) []string
	// FlagPrefix starts the name of every flag Configure binds
	// (--<FlagPrefix>*): the settings of the controller's own connection
	// of this kind and of its providers; "" when it binds none.
	FlagPrefix string
	// Configure binds the kind's flags into fs and returns how its
	// providers are built from the values fs parses into, one for each
	// source kind this provider kind serves.
	Configure func(fs *pflag.FlagSet) Constructor
}

// Constructor builds the providers of one provider kind, when the
// controller starts.
type Constructor func(ctx context.Context, env Env) ([]Provider, error)

// Env is what the controller gives every provider it builds.
type Env struct {
	// Waker carries the changes push providers (watches) see to the
	// controller.
	Waker Waker
	// Log is the controller's logger; a provider names itself under it.
	Log logr.Logger
	// NamespaceWatchFloor is the least share of a watch budget a
	// namespace is held to, for the kinds whose providers hold watches.
	NamespaceWatchFloor int
}

// One is the providers of a kind that builds one: p, or err.
func One(p Provider, err error) ([]Provider, error) {
	if err != nil {
		return nil, err
	}
	return []Provider{p}, nil
}

// Watching is the Configure of a kind whose one provider holds watches
// (Consul, plugin): the kind's flags bound into fresh options, the
// controller's namespace floor set on them (floor points at the options'
// own), and the provider built from them.
func Watching[O any, P Provider](bind func(*O, *pflag.FlagSet), floor func(*O) *int, build func(O, Waker) (P, error)) func(*pflag.FlagSet) Constructor {
	return func(fs *pflag.FlagSet) Constructor {
		var o O
		bind(&o, fs)
		return func(_ context.Context, env Env) ([]Provider, error) {
			*floor(&o) = env.NamespaceWatchFloor
			return One(build(o, env.Waker))
		}
	}
}

// SecretReader reads one key of a Secret the platform team named in a
// BackendProvider; user names what refers to it, for the messages.
type SecretReader interface {
	SecretValue(ctx context.Context, user string, ref v1alpha1.SecretKeyReference) ([]byte, error)
}

// Denial is a kind's own reason to refuse a source through a
// BackendProvider; admission adds the provider's name.
type Denial struct {
	// Rule names the rule, as status and events show it.
	Rule string
	// Message names the field, the provider and the fix.
	Message string
}

// Kinds is a table of source kinds, in the order their Of functions are asked.
type Kinds []SourceKind

// Of is the row of src's kind, nil when no row claims it.
func (ks Kinds) Of(src v1alpha1.Source) *SourceKind {
	for i := range ks {
		if ks[i].Of(src) {
			return &ks[i]
		}
	}
	return nil
}

// KindOf is src's kind, "" when no row claims it.
func (ks Kinds) KindOf(src v1alpha1.Source) Kind {
	if k := ks.Of(src); k != nil {
		return k.Kind
	}
	return ""
}

// ProviderOf is the kind of a BackendProvider spec, nil when no row's
// provider claims it.
func (ks Kinds) ProviderOf(spec v1alpha1.BackendProviderSpec) *ProviderKind {
	for _, k := range ks {
		if k.Provider.Of(spec) {
			return k.Provider
		}
	}
	return nil
}

// ProviderKinds are the provider kinds of the table, each once, in the
// order of their first row.
func (ks Kinds) ProviderKinds() []*ProviderKind {
	var out []*ProviderKind
	for _, k := range ks {
		if !slices.Contains(out, k.Provider) {
			out = append(out, k.Provider)
		}
	}
	return out
}

// SourceKindsOf are the source kinds the BackendProvider kind p serves,
// in the table's order; none for nil.
func (ks Kinds) SourceKindsOf(p *ProviderKind) []Kind {
	var out []Kind
	for _, k := range ks {
		if p != nil && k.Provider == p {
			out = append(out, k.Kind)
		}
	}
	return out
}

// ProviderKindOf is bp's kind as status.kind reports it, "" when no row
// claims it.
func (ks Kinds) ProviderKindOf(bp *v1alpha1.BackendProvider) string {
	if p := ks.ProviderOf(bp.Spec); p != nil {
		return p.Name
	}
	return ""
}

// Connect is the providers' view of bp: its kind's connection, nil for a
// provider that only admits (static, or dns without resolvers of its own,
// which asks the controller's).
func (ks Kinds) Connect(ctx context.Context, bp *v1alpha1.BackendProvider, secrets SecretReader) (*Connection, error) {
	p := ks.ProviderOf(bp.Spec)
	if p == nil || p.Connect == nil {
		return nil, nil
	}
	return p.Connect(ctx, bp, secrets)
}

// SecretsOf are the names of the Secrets bp reads.
func (ks Kinds) SecretsOf(bp *v1alpha1.BackendProvider) []string {
	p := ks.ProviderOf(bp.Spec)
	if p == nil || p.Secrets == nil {
		return nil
	}
	return p.Secrets(bp)
}

// Check is the controller's own check of src's kind: a message naming the
// field and the fix, or "".
func (ks Kinds) Check(src v1alpha1.Source) string {
	if k := ks.Of(src); k != nil && k.Check != nil {
		return k.Check(src)
	}
	return ""
}

// Configuration is what the flags of a table's provider kinds configure:
// the constructor of each provider kind, in the table's order.
type Configuration []Constructor

// Configure binds the flags of every provider kind of the table into fs
// (each kind's own, named by its FlagPrefix) and returns how the
// providers are built from what fs parses.
func (ks Kinds) Configure(fs *pflag.FlagSet) Configuration {
	var out Configuration
	for _, p := range ks.ProviderKinds() {
		if p.Configure != nil {
			out = append(out, p.Configure(fs))
		}
	}
	return out
}

// Build builds the providers of every kind as c says, and returns a
// registry of them for the kinds of ks. A provider that fails to build
// stops the ones built before it.
func (ks Kinds) Build(ctx context.Context, c Configuration, env Env) (*Registry, error) {
	var ps []Provider
	for _, build := range c {
		built, err := build(ctx, env)
		if err != nil {
			closeAll(ps)
			return nil, err
		}
		ps = append(ps, built...)
	}
	r, err := ks.NewRegistry(ps...)
	if err != nil {
		closeAll(ps)
	}
	return r, err
}

// closeAll stops the providers of ps that run something.
func closeAll(ps []Provider) {
	for _, p := range ps {
		if c, ok := p.(Closer); ok {
			c.Close()
		}
	}
}

// NewConnection starts the connection of bp: its name, and a key that
// changes with bp's identity and generation and with whatever else the
// connection depends on (also: a CA read from a Secret).
func NewConnection(bp *v1alpha1.BackendProvider, also ...[]byte) *Connection {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d", bp.UID, bp.Generation)
	for _, b := range also {
		_, _ = h.Write(b)
	}
	return &Connection{Name: bp.Name, Key: hex.EncodeToString(h.Sum(nil))}
}
