package controllers

import (
	"cmp"
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/probe"
	"github.com/backendslice/backendslice/providers"
)

// ManagerOptions configure the manager that runs the controller.
type ManagerOptions struct {
	MetricsBindAddress     string
	HealthProbeBindAddress string
	LeaderElection         bool
	// LeaderElectionNamespace is where the lease lives; empty means the
	// namespace the controller runs in.
	LeaderElectionNamespace string
	// Config is the reconciler's configuration.
	Config Config
	// Providers resolve sources.
	Providers *providers.Registry
	// Waker carries push providers' wake-ups to the controller; nil when no
	// provider pushes.
	Waker *ChannelWaker
	// SkipNameValidation lets several managers run the controller in one
	// process (tests of two instances); the binary leaves it false.
	SkipNameValidation bool
	// MetricsRegistry takes our metrics; nil means controller-runtime's.
	MetricsRegistry ctrlmetrics.RegistererGatherer
	// Concurrency is how many backends are reconciled at once; zero means
	// DefaultConcurrency.
	Concurrency int
	// ProbeDial opens the probes' connections; nil dials from the
	// controller's own network (tests dial from a network namespace).
	ProbeDial probe.Dialer
	// ProbeConcurrency bounds the probes in flight; zero means
	// probe.DefaultConcurrency.
	ProbeConcurrency int
	// KubeAPIQPS and KubeAPIBurst limit the controller's requests to the
	// API server; zero keeps the rest config's own limits.
	KubeAPIQPS   float32
	KubeAPIBurst int
}

// DefaultConcurrency is how many backends are reconciled at once unless
// told otherwise. A reconcile mostly waits: on providers, and on the API
// server's consistent reads before it places endpoints.
const DefaultConcurrency = 4

// NewScheme is the scheme of every object the controller reads or writes.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// NewManager builds a manager running the ExternalBackend controller. The
// binary, the demo and the end-to-end tests all run this same wiring.
func NewManager(cfg *rest.Config, opts ManagerOptions) (ctrl.Manager, error) {
	scheme, err := NewScheme()
	if err != nil {
		return nil, err
	}
	cacheOpts, err := CacheOptions(opts.Config.Namespace)
	if err != nil {
		return nil, err
	}
	if opts.KubeAPIQPS != 0 || opts.KubeAPIBurst != 0 {
		cfg = rest.CopyConfig(cfg)
		cfg.QPS = cmp.Or(opts.KubeAPIQPS, cfg.QPS)
		cfg.Burst = cmp.Or(opts.KubeAPIBurst, cfg.Burst)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: opts.MetricsBindAddress},
		HealthProbeBindAddress:  opts.HealthProbeBindAddress,
		LeaderElection:          opts.LeaderElection,
		LeaderElectionID:        "backendslice-controller.backendslice.io",
		LeaderElectionNamespace: opts.LeaderElectionNamespace,
		// Leaving at once on shutdown lets the next leader start sooner.
		LeaderElectionReleaseOnCancel: true,
		Controller:                    config.Controller{SkipNameValidation: ptr.To(opts.SkipNameValidation)},
		Cache:                         cacheOpts,
	})
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	reg := opts.MetricsRegistry
	if reg == nil {
		reg = ctrlmetrics.Registry
	}
	metrics, err := NewMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("registering metrics: %w", err)
	}
	// The prober wakes backends whose verdicts change, whether or not a
	// provider pushes.
	waker := opts.Waker
	if waker == nil {
		waker = NewChannelWaker()
	}
	probeMetrics, err := probe.NewMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("registering probe metrics: %w", err)
	}
	prober := probe.New(probe.Options{Dial: opts.ProbeDial, Concurrency: opts.ProbeConcurrency, Waker: waker, Metrics: probeMetrics})
	if err := mgr.Add(prober); err != nil {
		return nil, err
	}
	rcfg := withDefaults(opts.Config)
	// Leader election makes this process the one writer of our slices.
	rcfg.SoleWriter = rcfg.SoleWriter || opts.LeaderElection
	r := &Reconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Events:    mgr.GetEventRecorder("backendslice"),
		Providers: opts.Providers,
		Config:    rcfg,
		Metrics:   metrics,
		waker:     waker,
		prober:    prober,
		workers:   cmp.Or(opts.Concurrency, DefaultConcurrency),
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up controller: %w", err)
	}
	if err := r.setupProviderStatus(mgr); err != nil {
		return nil, fmt.Errorf("setting up the BackendProvider status controller: %w", err)
	}
	if err := mgr.Add(stopProviders(opts.Providers, waker)); err != nil {
		return nil, err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return nil, err
	}
	return mgr, nil
}

// CacheOptions narrow and trim what the manager's cache holds: Services
// and slices that carry our label (a cluster's others are none of our
// business and could be many), Secrets of the controller's own namespace
// only (the one namespace whose Secrets its Role lets it read), and of
// each object only what the controller reads (trim.go). The scale
// benchmarks build caches from them too.
func CacheOptions(namespace string) (cache.Options, error) {
	ours, err := labels.NewRequirement(BackendLabel, selection.Exists, nil)
	if err != nil {
		return cache.Options{}, err
	}
	ourObjects := cache.ByObject{Label: labels.NewSelector().Add(*ours), Transform: trimManagedFields}
	by := map[client.Object]cache.ByObject{
		&corev1.Service{}:            ourObjects,
		&discoveryv1.EndpointSlice{}: ourObjects,
		&v1alpha1.ExternalBackend{}:  {Transform: trimBackend},
		// Only read with --deny-pod-cidrs; then only their Pod ranges.
		&corev1.Node{}: {Transform: podRangesOnly},
	}
	if namespace != "" {
		by[&corev1.Secret{}] = cache.ByObject{Namespaces: map[string]cache.Config{namespace: {}}}
	}
	return cache.Options{ByObject: by}, nil
}

// familiesOfCluster picks how the controller learns which IP families the
// cluster serves: from its ServiceCIDRs, watched, where the API server has
// them (Kubernetes 1.33 and later); else both families are assumed, as
// before ServiceCIDRs existed. The bool says whether ServiceCIDRs are watched.
func familiesOfCluster(mgr ctrl.Manager, reader client.Reader) (clusterNetworks, bool, error) {
	gvk := networkingv1.SchemeGroupVersion.WithKind("ServiceCIDR")
	_, err := mgr.GetRESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	switch {
	case err == nil:
		return serviceCIDRFamilies{reader}, true, nil
	case meta.IsNoMatchError(err):
		ctrl.Log.Info("the API server has no ServiceCIDRs (Kubernetes before 1.33): assuming it serves both IP families")
		return fixedFamilies{corev1.IPv4Protocol, corev1.IPv6Protocol}, false, nil
	}
	return nil, false, fmt.Errorf("looking up the ServiceCIDR API: %w", err)
}

// stopProviders stops the providers' watches and listings when the manager
// stops. The waker stops first: a watch waiting to wake a backend would
// otherwise wait for a controller that no longer takes wake-ups.
func stopProviders(reg *providers.Registry, waker *ChannelWaker) manager.Runnable {
	return manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		if waker != nil {
			waker.Stop()
		}
		reg.Close()
		return nil
	})
}

// withDefaults fills the settings a caller may leave zero.
func withDefaults(c Config) Config {
	c.ReconcileTimeout = cmp.Or(c.ReconcileTimeout, DefaultReconcileTimeout)
	c.ClusterDomain = cmp.Or(c.ClusterDomain, "cluster.local")
	return c
}
