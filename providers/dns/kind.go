package dns

import (
	"context"

	"github.com/spf13/pflag"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
)

// Kind is the source kind of spec.sources[].dns.
const Kind providers.Kind = "dns"

// Settings are a DNS BackendProvider's connection: the resolvers it
// asks, host:port.
type Settings struct {
	Resolvers []string
}

// Kinds are the rows of the table of source kinds this package serves:
// dns sources, through a DNS BackendProvider whose resolvers, when it
// lists any, replace the controller's own (the --dns-* flags). Built
// afresh at each call.
func Kinds() providers.Kinds {
	p := &providers.ProviderKind{
		Name:       "dns",
		Of:         func(s v1alpha1.BackendProviderSpec) bool { return s.DNS != nil },
		Connect:    connect,
		FlagPrefix: "dns-",
		Configure: func(fs *pflag.FlagSet) providers.Constructor {
			var o Options
			o.BindFlags(fs)
			return func(context.Context, providers.Env) ([]providers.Provider, error) { return providers.One(New(o)) }
		},
	}
	return providers.Kinds{{Kind: Kind, Of: func(s v1alpha1.Source) bool { return s.DNS != nil }, Provider: p}}
}

// connect asks bp's own resolvers; without any, bp only admits.
func connect(_ context.Context, bp *v1alpha1.BackendProvider, _ providers.SecretReader) (*providers.Connection, error) {
	if len(bp.Spec.DNS.Resolvers) == 0 {
		return nil, nil
	}
	conn := providers.NewConnection(bp)
	conn.Settings = &Settings{Resolvers: bp.Spec.DNS.Resolvers}
	return conn, nil
}
