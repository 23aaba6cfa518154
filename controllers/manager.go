// Package controllers wires the two controllers, externalbackend and
// backendprovider, into one manager with the prober and the providers. The
// binary, the demo and the end-to-end tests all run this same wiring.
package controllers

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/controllers/backendprovider"
	"github.com/backendslice/backendslice/controllers/externalbackend"
	"github.com/backendslice/backendslice/internal/eventbudget"
	"github.com/backendslice/backendslice/internal/fairshare"
	"github.com/backendslice/backendslice/internal/watchdog"
	"github.com/backendslice/backendslice/probe"
	"github.com/backendslice/backendslice/providers"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// ManagerOptions configure the manager that runs the controller.
type ManagerOptions struct {
	MetricsBindAddress string
	// MetricsSecure serves the metrics over HTTPS, each scrape
	// authenticated and authorized by the API server (metricsServer).
	MetricsSecure bool
	// MetricsCertDir holds the metrics endpoint's certificate (tls.crt,
	// tls.key), reloaded when they change; empty, or without them, the
	// endpoint serves a self-signed certificate of its own.
	MetricsCertDir         string
	HealthProbeBindAddress string
	LeaderElection         bool
	// LeaderElectionNamespace is where the lease lives; empty means the
	// namespace the controller runs in.
	LeaderElectionNamespace string
	// Lease times how leadership is held and taken over; its zero fields
	// mean the defaults (DefaultLeaseDuration and the others).
	Lease LeaseTimings
	// Config is the reconciler's configuration.
	Config externalbackend.Config
	// Providers resolve sources.
	Providers *providers.Registry
	// Waker carries push providers' wake-ups to the controller; nil when no
	// provider pushes.
	Waker *externalbackend.ChannelWaker
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
	// ProviderChecks configure the checks of BackendProviders'
	// connections; zero fields take their defaults.
	ProviderChecks backendprovider.CheckOptions
	// StuckReconcileTimeout, when not zero, adds a liveness check (on
	// /healthz) that fails while this replica leads and one of its
	// reconciles has run for longer: a worker that ignores its deadline
	// (see internal/watchdog). It must exceed the reconcile's own bound.
	StuckReconcileTimeout time.Duration
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

// NewManager builds a manager running the ExternalBackend controller and
// the BackendProvider status controller. The binary, the demo and the
// end-to-end tests all run this same wiring, in steps: the client's fair
// limiter, the manager, the parts both controllers share, then each
// controller.
func NewManager(cfg *rest.Config, opts ManagerOptions) (ctrl.Manager, error) {
	cfg, clientLimiter := withFairLimiter(cfg, opts)
	mgr, err := newControllerManager(cfg, opts)
	if err != nil {
		return nil, err
	}
	w, err := addSharedParts(mgr, cfg, opts)
	if err != nil {
		return nil, err
	}
	rcfg := reconcilerConfig(opts, cfg.QPS)
	if err := w.addExternalBackendController(rcfg, cmp.Or(opts.Concurrency, DefaultConcurrency), clientLimiter); err != nil {
		return nil, err
	}
	if err := w.addBackendProviderController(rcfg.Namespace, opts.ProviderChecks); err != nil {
		return nil, err
	}
	if err := mgr.Add(stopProviders(opts.Providers, w.waker)); err != nil {
		return nil, err
	}
	return mgr, nil
}

// withFairLimiter is cfg with the request limits of opts, when they set
// any, and the fair limiter it then takes them from (the work queue tells
// it who waits); else cfg as it is, and no limiter.
func withFairLimiter(cfg *rest.Config, opts ManagerOptions) (*rest.Config, *fairshare.RateLimiter) {
	if opts.KubeAPIQPS == 0 && opts.KubeAPIBurst == 0 {
		return cfg, nil
	}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS = cmp.Or(opts.KubeAPIQPS, cfg.QPS)
	cfg.Burst = cmp.Or(opts.KubeAPIBurst, cfg.Burst)
	// One limiter for every client made from cfg (the cache's and the
	// client's; the lease and Events have their own), shared between
	// namespaces in turn so that one tenant's writes do not queue
	// everyone else's.
	limiter := fairshare.NewRateLimiter(cfg.QPS, cfg.Burst)
	cfg.RateLimiter = limiter
	return cfg, limiter
}

// newControllerManager is controller-runtime's manager for opts: the
// scheme, the cache, the metrics and probe servers, and leader election.
func newControllerManager(cfg *rest.Config, opts ManagerOptions) (ctrl.Manager, error) {
	scheme, err := NewScheme()
	if err != nil {
		return nil, err
	}
	cacheOpts, err := externalbackend.CacheOptions(opts.Config.Namespace)
	if err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsServer(opts),
		HealthProbeBindAddress: opts.HealthProbeBindAddress,
		LeaderElection:         opts.LeaderElection,
		// The lease has a client and a limiter of its own, never queued
		// behind the tenants' requests (lease.go).
		LeaderElectionConfig:    leaseConfigFor(cfg, opts),
		LeaderElectionID:        "backendslice-controller.backendslice.io",
		LeaderElectionNamespace: opts.LeaderElectionNamespace,
		// Leaving at once on shutdown lets the next leader start sooner:
		// the lease is released once every reconcile has stopped, so a
		// clean stop hands over without waiting for the lease to expire.
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 nonZero(opts.Lease.Duration),
		RenewDeadline:                 nonZero(opts.Lease.RenewDeadline),
		RetryPeriod:                   nonZero(opts.Lease.RetryPeriod),
		GracefulShutdownTimeout:       ptr.To(ShutdownTimeout),
		Controller:                    config.Controller{SkipNameValidation: ptr.To(opts.SkipNameValidation)},
		Cache:                         cacheOpts,
	})
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	return mgr, nil
}

// sharedParts are what both controllers are built with: the manager, the
// registry their metrics go to, the providers (their calls counted), the
// prober and the waker it and push providers wake backends through, the
// stuck-reconcile watchdog and the Event recorder.
type sharedParts struct {
	mgr       ctrl.Manager
	reg       prometheus.Registerer
	providers *providers.Registry
	prober    *probe.Prober
	waker     *externalbackend.ChannelWaker
	watchdog  *watchdog.Watchdog
	events    events.EventRecorder
}

// addSharedParts adds to mgr the runnables both controllers rely on (the
// prober, the health checks, the sending of Events) and returns them.
func addSharedParts(mgr ctrl.Manager, cfg *rest.Config, opts ManagerOptions) (*sharedParts, error) {
	w := &sharedParts{mgr: mgr, reg: opts.MetricsRegistry}
	if opts.MetricsRegistry == nil {
		w.reg = ctrlmetrics.Registry
	}
	var err error
	if w.providers, err = observedProviders(w.reg, opts.Providers); err != nil {
		return nil, err
	}
	if w.prober, w.waker, err = addProber(mgr, opts, w.reg); err != nil {
		return nil, err
	}
	if w.watchdog, err = addHealthChecks(mgr, opts.StuckReconcileTimeout); err != nil {
		return nil, err
	}
	if w.events, err = addEventRecorder(mgr, cfg, mgr.GetScheme(), w.reg); err != nil {
		return nil, err
	}
	return w, nil
}

// reconcilerConfig is the ExternalBackend reconciler's configuration of
// opts, its defaults filled, for a client of qps requests a second.
func reconcilerConfig(opts ManagerOptions, qps float32) externalbackend.Config {
	rcfg := withDefaults(opts.Config)
	if rcfg.StatusCatchUpRate == 0 && qps > 0 {
		// Status catch-ups take at most half the client's rate: the other
		// half, and the burst, stay free for changes.
		rcfg.StatusCatchUpRate = float64(qps) / 2
	}
	// Leader election makes this process the one writer of our slices.
	rcfg.SoleWriter = rcfg.SoleWriter || opts.LeaderElection
	return rcfg
}

// addExternalBackendController sets up the ExternalBackend controller on
// w's manager with rcfg and workers, its requests told to clientLimiter
// (nil when the client has another limiter).
func (w *sharedParts) addExternalBackendController(rcfg externalbackend.Config, workers int, clientLimiter *fairshare.RateLimiter) error {
	metrics, err := newMetrics(w.reg)
	if err != nil {
		return err
	}
	r := &externalbackend.Reconciler{
		Client:        w.mgr.GetClient(),
		APIReader:     w.mgr.GetAPIReader(),
		Events:        w.events,
		Providers:     w.providers,
		Config:        rcfg,
		Metrics:       metrics,
		Waker:         w.waker,
		Prober:        w.prober,
		Workers:       workers,
		ClientLimiter: clientLimiter,
		Watchdog:      w.watchdog,
	}
	if err := r.SetupWithManager(w.mgr); err != nil {
		return fmt.Errorf("setting up controller: %w", err)
	}
	return nil
}

// addBackendProviderController sets up the BackendProvider status
// controller on w's manager: it reads Secrets in namespace, and checks
// connections as checks say.
func (w *sharedParts) addBackendProviderController(namespace string, checks backendprovider.CheckOptions) error {
	metrics, err := backendprovider.NewMetrics(w.reg)
	if err != nil {
		return fmt.Errorf("registering the BackendProvider metrics: %w", err)
	}
	checks, err = checks.WithDefaults()
	if err != nil {
		return err
	}
	bp := &backendprovider.Reconciler{Client: w.mgr.GetClient(), Namespace: namespace, Kinds: w.providers.Kinds(),
		Checker: w.providers, Checks: checks, Watchdog: w.watchdog, Metrics: metrics}
	if err := bp.SetupWithManager(w.mgr); err != nil {
		return fmt.Errorf("setting up the BackendProvider status controller: %w", err)
	}
	return nil
}

// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// metricsServer is the metrics endpoint of opts. Secure, it is served as
// kubebuilder v4 serves it: over HTTPS, and each scrape's bearer token is
// checked with a TokenReview and its access to the path with a
// SubjectAccessReview (the metrics-reader ClusterRole grants get on
// /metrics); anything else is refused with a 401 or a 403. HTTP/2 is off:
// its rapid-reset attacks (CVE-2023-44487) need no credentials.
func metricsServer(opts ManagerOptions) metricsserver.Options {
	o := metricsserver.Options{BindAddress: opts.MetricsBindAddress}
	if opts.MetricsSecure {
		o.SecureServing = true
		o.FilterProvider = filters.WithAuthenticationAndAuthorization
		o.CertDir = opts.MetricsCertDir
		o.TLSOpts = []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}
	}
	return o
}

// addProber adds the prober to mgr, and returns it with the waker it wakes
// backends through: opts's, or a new one. The prober wakes backends whose
// verdicts change, whether or not a provider pushes.
func addProber(mgr ctrl.Manager, opts ManagerOptions, reg prometheus.Registerer) (*probe.Prober, *externalbackend.ChannelWaker, error) {
	waker := opts.Waker
	if waker == nil {
		waker = externalbackend.NewChannelWaker()
	}
	probeMetrics, err := probe.NewMetrics(reg)
	if err != nil {
		return nil, nil, fmt.Errorf("registering probe metrics: %w", err)
	}
	prober := probe.New(probe.Options{Dial: opts.ProbeDial, Concurrency: opts.ProbeConcurrency, Waker: waker, Metrics: probeMetrics})
	if err := mgr.Add(prober); err != nil {
		return nil, nil, err
	}
	return prober, waker, nil
}

// addEventRecorder adds to mgr the sending of Events, on a budget and a
// client of their own (events.go), and returns their recorder.
func addEventRecorder(mgr ctrl.Manager, cfg *rest.Config, scheme *runtime.Scheme, reg prometheus.Registerer) (events.EventRecorder, error) {
	recorder, sending, err := newEventRecorder(cfg, scheme, reg, eventbudget.DefaultLimits())
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(sending); err != nil {
		return nil, err
	}
	return recorder, nil
}

// stopProviders stops the providers' watches and listings when the manager
// stops. The waker stops first: a watch waiting to wake a backend would
// otherwise wait for a controller that no longer takes wake-ups.
func stopProviders(reg *providers.Registry, waker *externalbackend.ChannelWaker) manager.Runnable {
	return manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		if waker != nil {
			waker.Stop()
		}
		reg.Close()
		return nil
	})
}

// LeaseTimings are the leader election lease's times (client-go's
// LeaseDuration, RenewDeadline and RetryPeriod).
type LeaseTimings struct {
	// Duration is how long a standby waits, after it last saw the lease
	// renewed, before it takes the lease of a leader that stopped without
	// releasing it (a crash, a kill, a lost node).
	Duration time.Duration
	// RenewDeadline is how long the leader keeps trying to renew before
	// it gives up leadership (and exits).
	RenewDeadline time.Duration
	// RetryPeriod is how often the leader renews and a standby looks at
	// the lease.
	RetryPeriod time.Duration
}

// The default lease times. The lease duration and renew deadline are
// controller-runtime's (and kube-controller-manager's): a standby takes
// over a crashed leader about 15 s after it last saw the lease renewed.
//
// The retry period is shorter than their 2 s. A leader that stops cleanly
// releases its lease, and a standby takes it at its next attempt:
// client-go's elector (tools/leaderelection, acquire) tries every
// RetryPeriod stretched by a random jitter of up to JitterFactor (1.2)
// times it, so 2 to 4.4 s after a release at 2 s, which left health
// changes unpublished that long in a rolling upgrade; at 500ms it is 0.5
// to 1.1 s. Nothing can wake the elector sooner: controller-runtime owns
// it, and its only hook, the resource lock, is called only on that timer.
// The cost is the leader's renewals, one Lease write every period: 2 a
// second, what 20 kubelets' node Lease heartbeats (one each 10 s) write.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 500 * time.Millisecond
)

// nonZero is d as the manager's options take it: nil for its default.
func nonZero(d time.Duration) *time.Duration {
	if d == 0 {
		return nil
	}
	return &d
}

// withDefaults fills the settings a caller may leave zero.
func withDefaults(c externalbackend.Config) externalbackend.Config {
	c.ReconcileTimeout = cmp.Or(c.ReconcileTimeout, externalbackend.DefaultReconcileTimeout)
	c.ClusterDomain = cmp.Or(c.ClusterDomain, "cluster.local")
	return c
}

// ShutdownTimeout bounds how long the controller takes to stop once told
// to: the manager's graceful shutdown, and Run's wait for it. It is under
// the 30 s a Pod gets by default between SIGTERM and SIGKILL.
const ShutdownTimeout = 15 * time.Second

// Run runs mgr until ctx ends, and returns at most ShutdownTimeout after
// that, with an error when the manager had not stopped by then.
// controller-runtime's manager waits without end for a cache that can never
// sync (a role without list on a kind it watches: it starts the informers
// of indexed kinds before any controller) and keeps waiting when told to
// stop; a controller that ignores SIGTERM holds its Pod (and a rolling
// upgrade) for the whole grace period.
func Run(ctx context.Context, mgr ctrl.Manager) error {
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	select {
	case err := <-done:
		return err
	case <-time.After(ShutdownTimeout):
		return fmt.Errorf("the manager did not stop within %s of being told to; a cache that never synced is the usual cause (check the controller's RBAC: list and watch on every kind it reads)", ShutdownTimeout)
	}
}

// observedProviders is provs with every call to a provider, a source's
// or a connection check, counted, and the metrics of each provider that
// has some (a prometheus.Collector, such as the plugin provider's)
// registered. A provider of a manager started again in the same process
// (tests, a restart) replaces the one before it.
func observedProviders(reg prometheus.Registerer, provs *providers.Registry) (*providers.Registry, error) {
	calls, err := newProviderCalls(reg)
	if err != nil {
		return nil, fmt.Errorf("registering the provider call metrics: %w", err)
	}
	for _, p := range provs.Providers() {
		c, ok := p.(prometheus.Collector)
		if !ok {
			continue
		}
		err := reg.Register(c)
		var already prometheus.AlreadyRegisteredError
		if errors.As(err, &already) {
			reg.Unregister(already.ExistingCollector)
			err = reg.Register(c)
		}
		if err != nil {
			return nil, fmt.Errorf("registering the metrics of the %s provider: %w", p.Kind(), err)
		}
	}
	return provs.Observed(calls), nil
}
