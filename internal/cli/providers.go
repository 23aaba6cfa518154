package cli

import (
	"context"

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

// Providers are the source providers of one controller, and the waker that
// carries the push providers' changes to it.
type Providers struct {
	Registry *providers.Registry
	// Waker is given to the manager (controllers.ManagerOptions.Waker):
	// Consul watches and plugin watches push changes through it.
	Waker *externalbackend.ChannelWaker
}

// NewProviders builds every provider this binary has, configured by o.
func NewProviders(ctx context.Context, o ProviderOptions) (Providers, error) {
	dns, err := dnsprovider.New(o.DNS)
	if err != nil {
		return Providers{}, err
	}
	waker := externalbackend.NewChannelWaker()
	o.Consul.NamespaceWatchFloor, o.Plugin.NamespaceWatchFloor = o.NamespaceWatchFloor, o.NamespaceWatchFloor
	consul, err := consulprovider.New(o.Consul, waker)
	if err != nil {
		return Providers{}, err
	}
	// RDS, EC2, ElastiCache and MemoryDB share one session: credentials, clients and the cached
	// per-region listings every backend reads.
	awsOpts := o.AWS
	awsOpts.Log = ctrl.Log.WithName("aws")
	aws, err := awsprovider.New(ctx, awsOpts)
	if err != nil {
		return Providers{}, err
	}
	// Plugins push through the same waker as Consul's watches.
	plugin, err := pluginprovider.New(o.Plugin, waker)
	if err != nil {
		return Providers{}, err
	}
	// The table of kinds says what each kind is to the controller; here
	// are only the providers, configured by the flags its rows name.
	reg, err := providers.BuiltinKinds().NewRegistry(static.New(), dns, consul, aws.RDS(), aws.EC2(), aws.ElastiCache(), aws.MemoryDB(), plugin)
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
