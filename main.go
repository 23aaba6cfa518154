// Command backendslice publishes backends that live outside a Kubernetes
// cluster as selectorless Services and EndpointSlices.
//
//	backendslice controller   run the controller
//	backendslice demo         run it on a local control plane with samples
//	backendslice render       print, offline, what it would write for a file
package main

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/backendslice/backendslice/controllers"
	"github.com/backendslice/backendslice/providers"
	awsprovider "github.com/backendslice/backendslice/providers/aws"
	consulprovider "github.com/backendslice/backendslice/providers/consul"
	dnsprovider "github.com/backendslice/backendslice/providers/dns"
	"github.com/backendslice/backendslice/providers/static"
)

func main() {
	if err := rootCommand().Execute(); err != nil {
		os.Exit(1)
	}
}

func rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "backendslice",
		Short:         "Publish outside backends as Kubernetes Services and EndpointSlices",
		SilenceUsage:  true,
		SilenceErrors: false,
	}
	root.AddCommand(controllerCommand(), demoCommand(), renderCommand())
	return root
}

// controllerFlags are the flags of the controller, shared by the demo.
type controllerFlags struct {
	manager     controllers.ManagerOptions
	deniedCIDRs []string
	zap         zap.Options
	dns         dnsprovider.Options
	consul      consulprovider.Options
	aws         awsprovider.Options
}

func (f *controllerFlags) bind(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.manager.MetricsBindAddress, "metrics-bind-address", ":8080", "address the Prometheus metrics endpoint binds to; 0 disables it")
	fs.StringVar(&f.manager.HealthProbeBindAddress, "health-probe-bind-address", ":8081", "address the /healthz and /readyz probes bind to")
	fs.BoolVar(&f.manager.LeaderElection, "leader-elect", false, "elect a leader so that only one replica reconciles at a time")
	fs.IntVar(&f.manager.Concurrency, "concurrent", controllers.DefaultConcurrency, "how many ExternalBackends are reconciled at once")
	fs.Float32Var(&f.manager.KubeAPIQPS, "kube-api-qps", 50, "queries per second the controller may send the API server (client-side limit)")
	fs.IntVar(&f.manager.KubeAPIBurst, "kube-api-burst", 100, "burst of queries above --kube-api-qps")
	fs.StringVar(&f.manager.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader election lease (default: the controller's own)")
	fs.Int32Var(&f.manager.Config.MaxEndpointsPerSlice, "max-endpoints-per-slice", 100, "endpoints per EndpointSlice where the spec sets none (1-1000)")
	fs.DurationVar(&f.manager.Config.DefaultDrainPeriod, "default-drain-period", 30*time.Second, "how long a vanished endpoint stays as terminating where the spec sets no drainPeriod")
	fs.StringSliceVar(&f.deniedCIDRs, "denied-cidrs", controllers.DefaultDeniedCIDRs(), "networks no endpoint may be in: cloud metadata addresses, and add the cluster's Pod and Service ranges")
	fs.StringSliceVar(&f.manager.Config.DeniedNames, "denied-names", controllers.DefaultDeniedNames(), "DNS names no FQDN endpoint may have (*.example.com denies every name under it)")
	fs.DurationVar(&f.manager.Config.ResolveTimeout, "resolve-timeout", 10*time.Second, "longest time one provider call may take")
	fs.DurationVar(&f.manager.Config.ReconcileTimeout, "reconcile-timeout", controllers.DefaultReconcileTimeout, "longest time one reconcile may take, its sources resolved at once (at least --resolve-timeout)")
	fs.DurationVar(&f.manager.Config.Coalesce.Quiet, "coalesce-quiet", 0, "hold a provider change until the backend's endpoints have been quiet this long, folding a burst into one write per slice; 0 publishes every change at once")
	fs.DurationVar(&f.manager.Config.Coalesce.Max, "coalesce-max", 5*time.Second, "longest a provider change is held while the endpoints keep changing (with --coalesce-quiet)")
	f.dns.BindFlags(fs)
	f.consul.BindFlags(fs)
	f.aws.BindFlags(fs)
	gofs := flag.NewFlagSet("zap", flag.ExitOnError)
	f.zap.BindFlags(gofs)
	fs.AddGoFlagSet(gofs)
}

// complete checks the flags and builds what they describe.
func (f *controllerFlags) complete() error {
	if f.manager.Concurrency < 1 {
		return fmt.Errorf("--concurrent=%d: must be at least 1", f.manager.Concurrency)
	}
	if f.manager.KubeAPIQPS <= 0 || f.manager.KubeAPIBurst < 1 {
		return fmt.Errorf("--kube-api-qps=%g --kube-api-burst=%d: both must be positive", f.manager.KubeAPIQPS, f.manager.KubeAPIBurst)
	}
	if n := f.manager.Config.MaxEndpointsPerSlice; n < 1 || n > 1000 {
		return fmt.Errorf("--max-endpoints-per-slice=%d: must be between 1 and 1000", n)
	}
	if c := f.manager.Config; c.ResolveTimeout <= 0 || c.ReconcileTimeout < c.ResolveTimeout {
		return fmt.Errorf("--resolve-timeout=%s --reconcile-timeout=%s: both must be positive, and a reconcile at least as long as one provider call", c.ResolveTimeout, c.ReconcileTimeout)
	}
	if f.manager.Config.DefaultDrainPeriod < 0 {
		return fmt.Errorf("--default-drain-period=%s: must not be negative", f.manager.Config.DefaultDrainPeriod)
	}
	if err := f.manager.Config.Coalesce.Validate(); err != nil {
		return err
	}
	f.manager.Config.DeniedPrefixes = nil
	for _, c := range f.deniedCIDRs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return fmt.Errorf("--denied-cidrs: %q is not a CIDR such as 10.96.0.0/12: %w", c, err)
		}
		f.manager.Config.DeniedPrefixes = append(f.manager.Config.DeniedPrefixes, p.Masked())
	}
	reg, err := newProviderRegistry(f)
	if err != nil {
		return err
	}
	f.manager.Providers = reg
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&f.zap)))
	return nil
}

// newProviderRegistry builds the providers this binary has, configured by f.
func newProviderRegistry(f *controllerFlags) (*providers.Registry, error) {
	dns, err := dnsprovider.New(f.dns)
	if err != nil {
		return nil, err
	}
	// Consul watches push changes: they wake the controller through the waker.
	waker := controllers.NewChannelWaker()
	consul, err := consulprovider.New(f.consul, waker)
	if err != nil {
		return nil, err
	}
	f.manager.Waker = waker
	// RDS and EC2 share one session: credentials, clients and the cached
	// per-region listings every backend reads.
	aws, err := awsprovider.New(context.Background(), f.aws)
	if err != nil {
		return nil, err
	}
	return providers.NewRegistry(static.New(), dns, consul, aws.RDS(), aws.EC2())
}

func controllerCommand() *cobra.Command {
	var f controllerFlags
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run the ExternalBackend controller against the cluster of --kubeconfig (or in-cluster)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.complete(); err != nil {
				return err
			}
			cfg, err := ctrl.GetConfig()
			if err != nil {
				return fmt.Errorf("finding the cluster: %w", err)
			}
			mgr, err := controllers.NewManager(cfg, f.manager)
			if err != nil {
				return err
			}
			ctrl.Log.Info("starting backendslice controller")
			return mgr.Start(ctrl.SetupSignalHandler())
		},
	}
	f.bind(cmd)
	// controller-runtime registers --kubeconfig on the standard flag set.
	cmd.Flags().AddGoFlagSet(flag.CommandLine)
	return cmd
}
