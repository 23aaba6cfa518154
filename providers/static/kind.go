package static

import (
	"context"

	"github.com/spf13/pflag"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
)

// Kind is the source kind of spec.sources[].static.
const Kind providers.Kind = "static"

// Kinds are the rows of the table of source kinds this package serves:
// static sources, through a static BackendProvider (one that only admits:
// its allowedCIDRs bound the addresses a namespace may write). Built
// afresh at each call.
func Kinds() providers.Kinds {
	p := &providers.ProviderKind{
		Name: "static",
		Of:   func(s v1alpha1.BackendProviderSpec) bool { return s.Static != nil },
		Configure: func(*pflag.FlagSet) providers.Constructor {
			return func(context.Context, providers.Env) ([]providers.Provider, error) {
				return []providers.Provider{New()}, nil
			}
		},
	}
	return providers.Kinds{{Kind: Kind, Of: func(s v1alpha1.Source) bool { return s.Static != nil }, Provider: p}}
}
