package wiring

import (
	"context"
	"slices"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/backendslice/backendslice/controllers"
	"github.com/backendslice/backendslice/controllers/externalbackend"
	"github.com/backendslice/backendslice/providers"
	awsprovider "github.com/backendslice/backendslice/providers/aws"
	consulprovider "github.com/backendslice/backendslice/providers/consul"
	dnsprovider "github.com/backendslice/backendslice/providers/dns"
	pluginprovider "github.com/backendslice/backendslice/providers/plugin"
	"github.com/backendslice/backendslice/providers/static"
)

// Kinds is the table of the source kinds this binary has: each kind's
// package exports its rows, and this is the one place that lists the
// packages. Flags, the registry, admission, connections, the status of
// BackendProviders and the offline commands read it. Built afresh at each
// call, so no caller can change another's table.
func Kinds() providers.Kinds {
	return slices.Concat(static.Kinds(), dnsprovider.Kinds(), consulprovider.Kinds(), awsprovider.Kinds(), pluginprovider.Kinds())
}

// Providers are the source providers of one controller, and the waker that
// carries the push providers' changes to it.
type Providers struct {
	Registry *providers.Registry
	// Waker is given to the manager (controllers.ManagerOptions.Waker):
	// Consul watches and plugin watches push changes through it.
	Waker *externalbackend.ChannelWaker
}

// NewProviders builds the provider of every kind of the table, configured
// by the flags f parsed.
func (f *ControllerFlags) NewProviders(ctx context.Context) (Providers, error) {
	waker := externalbackend.NewChannelWaker()
	env := providers.Env{Waker: waker, Log: ctrl.Log, NamespaceWatchFloor: f.namespaceWatchFloor}
	reg, err := f.kinds.Build(ctx, f.providers, env)
	if err != nil {
		return Providers{}, err
	}
	return Providers{Registry: reg, Waker: waker}, nil
}

// WithProviders returns opts running p.
func WithProviders(opts controllers.ManagerOptions, p Providers) controllers.ManagerOptions {
	opts.Providers, opts.Waker = p.Registry, p.Waker
	return opts
}
