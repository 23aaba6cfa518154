// Package wiring builds what the backendslice commands run: the table of
// source kinds (Kinds, the one place that lists the kinds' packages), the
// controller's flags and the checks on them, and the providers the flags
// configure. The controller, render, validate, import and the demo (its
// own binary) each take what they need from here, so that a flag means
// the same in all of them.
package wiring

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/controllers"
	"github.com/backendslice/backendslice/controllers/backendprovider"
	"github.com/backendslice/backendslice/controllers/externalbackend"
	"github.com/backendslice/backendslice/internal/fairshare"
	"github.com/backendslice/backendslice/internal/publish"
	"github.com/backendslice/backendslice/probe"
	"github.com/backendslice/backendslice/providers"
)

// ControllerFlags are the flags of `backendslice controller`, also taken by
// render (for the settings that change what is written) and by the demo.
type ControllerFlags struct {
	manager     controllers.ManagerOptions
	deniedCIDRs []string
	deniedNames []string
	// allowDefaultDenied are built-in denied entries an operator removed,
	// each by name (--unsafe-allow-default-denied).
	allowDefaultDenied []string
	zap                zap.Options
	// kinds is the table of source kinds whose flags are bound.
	kinds providers.Kinds
	// providers builds the providers of every kind, as the kinds' own
	// flags say.
	providers providers.Configuration
	// namespaceWatchFloor is the least share of a watch budget (Consul's
	// and the plugins') a namespace is held to; every provider that holds
	// watches is given it.
	namespaceWatchFloor int
}

// Bind registers the flags on fs.
func (f *ControllerFlags) Bind(fs *pflag.FlagSet) {
	fs.StringVar(&f.manager.MetricsBindAddress, "metrics-bind-address", ":8443", "address the Prometheus metrics endpoint binds to; 0 disables it")
	fs.BoolVar(&f.manager.MetricsSecure, "metrics-secure", true, "serve the metrics over HTTPS, each scrape authenticated (TokenReview) and authorized (SubjectAccessReview: get on the /metrics path, which the metrics-reader ClusterRole grants); false serves plain HTTP to anyone who reaches the port")
	fs.StringVar(&f.manager.MetricsCertDir, "metrics-cert-dir", "", "directory with the metrics endpoint's certificate and key (tls.crt, tls.key; reloaded when they change), for example a cert-manager Certificate's Secret mounted; empty serves a self-signed certificate")
	fs.StringVar(&f.manager.HealthProbeBindAddress, "health-probe-bind-address", ":8081", "address the /healthz and /readyz probes bind to")
	fs.BoolVar(&f.manager.LeaderElection, "leader-elect", false, "elect a leader so that only one replica reconciles at a time")
	fs.IntVar(&f.manager.Concurrency, "concurrent", controllers.DefaultConcurrency, "how many ExternalBackends are reconciled at once; one more worker is kept for a namespace that runs none")
	fs.IntVar(&f.manager.ProbeConcurrency, "probe-concurrency", probe.DefaultConcurrency, "how many probes run at once (raise it when backendslice_probe_lateness_seconds grows)")
	fs.Float32Var(&f.manager.KubeAPIQPS, "kube-api-qps", 50, "queries per second the controller may send the API server (client-side limit)")
	fs.IntVar(&f.manager.KubeAPIBurst, "kube-api-burst", 100, "burst of queries above --kube-api-qps")
	fs.StringVar(&f.manager.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader election lease (default: the controller's own)")
	fs.DurationVar(&f.manager.Lease.Duration, "leader-elect-lease-duration", controllers.DefaultLeaseDuration, "how long a standby waits for a leader that stopped renewing (a crash) before it takes over; shorter is a faster takeover and more risk of leadership changing hands when the API server is slow. A clean stop releases the lease at once whatever this says (whole seconds, at least 2s)")
	fs.DurationVar(&f.manager.Lease.RenewDeadline, "leader-elect-renew-deadline", controllers.DefaultRenewDeadline, "how long the leader keeps trying to renew its lease before it gives up leading and exits (shorter than --leader-elect-lease-duration)")
	fs.DurationVar(&f.manager.Lease.RetryPeriod, "leader-elect-retry-period", controllers.DefaultRetryPeriod, "how often the leader renews its lease and a standby looks at it: one API request each per period (at least 200ms, and at most --leader-elect-renew-deadline/1.2)")
	fs.Int32Var(&f.manager.Config.MaxEndpointsPerSlice, "max-endpoints-per-slice", 100, "endpoints per EndpointSlice where the spec sets none (1-1000)")
	fs.Int32Var(&f.manager.Config.MinEndpointsPerSlice, "min-endpoints-per-slice", 10, "floor of a slice's size whatever a spec's maxEndpointsPerSlice says (0-1000): fewer endpoints per slice means more slices, and more writes per change, taken from every other namespace's share of the API server")
	fs.IntVar(&f.manager.Config.NamespaceShare, "namespace-share", 0, "how many ExternalBackends of one namespace are reconciled at once; 0 is one less than --concurrent, so that a burst in one namespace leaves a worker to the others; a namespace alone uses every worker")
	fs.DurationVar(&f.manager.Config.DefaultDrainPeriod, "default-drain-period", 30*time.Second, "how long a vanished endpoint stays as terminating where the spec sets no drainPeriod")
	fs.StringSliceVar(&f.deniedCIDRs, "denied-cidrs", nil, fmt.Sprintf("networks no endpoint may be in, on top of the cloud metadata addresses, which are always denied (%s): add the cluster's Pod and Service ranges", strings.Join(externalbackend.DefaultDeniedCIDRs(), ",")))
	fs.StringSliceVar(&f.deniedNames, "denied-names", nil, fmt.Sprintf("DNS names no FQDN endpoint may have (*.example.com denies every name under it), on top of the metadata names, which are always denied (%s)", strings.Join(externalbackend.DefaultDeniedNames(), ",")))
	fs.StringSliceVar(&f.allowDefaultDenied, "unsafe-allow-default-denied", nil, "UNSAFE: built-in denied networks or names (of the cloud metadata services) to publish after all, each written as in the built-in list; only for a cluster where that address is a real backend")
	fs.StringVar(&f.manager.Config.ClusterDomain, "cluster-domain", publish.DefaultClusterDomain, "the cluster's DNS domain: FQDN endpoints in it, or ending in .svc or .pod, are refused (a Service must not point back into the cluster)")
	fs.BoolVar(&f.manager.Config.DenyPodCIDRs, "deny-pod-cidrs", true, "refuse endpoints in the cluster's Pod ranges, read from the Nodes' spec.podCIDRs (set it to false only where Pod addresses are real backends outside the cluster, such as a flat network shared with VMs); the Service ranges (read from the ServiceCIDRs), the Nodes' InternalIP and ExternalIP addresses and the API server's are always refused")
	fs.BoolVar(&f.manager.Config.AllowSourcesWithoutProvider, "allow-sources-without-provider", false, "let sources that name no BackendProvider publish through this controller's own connections (the --consul-*, --aws-* and --dns-* flags) from any namespace, as before BackendProviders; off, only providers the platform team admitted a namespace to can be used")
	fs.IntVar(&f.manager.Config.MaxEndpointsPerBackend, "max-endpoints-per-backend", v1alpha1.DefaultMaxEndpointsPerBackend, "most endpoints of each address family one ExternalBackend publishes, ready ones first, then by address; past it the Synced condition names the limit and how many were left out (0: no limit)")
	fs.IntVar(&f.manager.Config.MaxSlicesPerBackend, "max-slices-per-backend", 100, "most EndpointSlices of one ExternalBackend: past it slices hold more endpoints (up to 1000) than maxEndpointsPerSlice says, and the Synced condition says so (0: no limit)")
	fs.IntVar(&f.manager.Config.MaxProbeTargets, "max-probe-targets-per-backend", 1000, "most endpoints of one ExternalBackend that are probed; past it endpoints are published as their sources say and the Probed condition names the limit (0: no limit)")
	fs.StringSliceVar(&f.manager.Config.ProbeCASecrets, "probe-ca-secrets", nil, "Secrets of the controller's namespace that an HTTPS probe's caSecretRef may name (the CA of backends with a private PKI); no other Secret can be named")
	fs.StringVar(&f.manager.Config.Namespace, "controller-namespace", os.Getenv("POD_NAMESPACE"), "the controller's own namespace, the only one whose Secrets (those BackendProviders name) it reads (default $POD_NAMESPACE)")
	fs.DurationVar(&f.manager.Config.ResolveTimeout, "resolve-timeout", 10*time.Second, "longest time one provider call may take")
	fs.DurationVar(&f.manager.Config.ReconcileTimeout, "reconcile-timeout", externalbackend.DefaultReconcileTimeout, "longest time one reconcile may take, its sources resolved at once (at least --resolve-timeout)")
	fs.DurationVar(&f.manager.Config.Coalesce.Quiet, "coalesce-quiet", 0, "hold a provider change until the backend's endpoints have been quiet this long, folding a burst into one write per slice; 0 publishes every change at once")
	fs.DurationVar(&f.manager.StuckReconcileTimeout, "stuck-reconcile-timeout", 0, "when not 0, /healthz fails while this replica leads and one of its reconciles has run for longer (a worker stuck in a call that ignores its deadline), so that the kubelet restarts it; must exceed --reconcile-timeout and --provider-check-timeout plus 10s (the status write)")
	f.manager.Config.Churn = externalbackend.DefaultChurn()
	fs.DurationVar(&f.manager.Config.Churn.Window, "churn-window", f.manager.Config.Churn.Window, "an endpoint that changed 3 times within this window (its arrival counts as one) is volatile: the slice planner gathers volatile endpoints in small slices of their own, so that their flips rewrite a few endpoints instead of full slices (0: off)")
	fs.DurationVar(&f.manager.Config.Coalesce.Max, "coalesce-max", 5*time.Second, "longest a provider change is held while the endpoints keep changing (with --coalesce-quiet)")
	fs.DurationVar(&f.manager.ProviderChecks.Interval, "provider-check-interval", backendprovider.DefaultCheckInterval, "how often each BackendProvider's connection is checked (Consul's leader and token, STS GetCallerIdentity, each DNS resolver) while it passes; a failing one is checked again sooner, with backoff; Ready turns False after 3 failed checks in a row and True again after 2 passed")
	fs.DurationVar(&f.manager.ProviderChecks.Timeout, "provider-check-timeout", backendprovider.DefaultCheckTimeout, "longest time one check of a BackendProvider's connection may take (at most --provider-check-interval)")
	f.kinds = Kinds()
	f.providers = f.kinds.Configure(fs)
	fs.IntVar(&f.namespaceWatchFloor, "namespace-watch-floor", fairshare.DefaultSeatFloor, "while several namespaces hold watches of one budget (--consul-max-watches, --consul-max-watches-per-agent, --plugin-max-watches), each may hold its share: the budget divided by the namespaces holding watches, never less than this floor; a namespace alone may use the whole budget, and one under its share that finds the budget full takes a watch back from the namespace most over its share")
	gofs := flag.NewFlagSet("zap", flag.ExitOnError)
	f.zap.BindFlags(gofs)
	fs.AddGoFlagSet(gofs)
}

// OptionsFromArgs parses args as `backendslice controller` takes its flags
// and returns the manager options they describe, checked: how the tests
// read what the chart passes, and any other list of arguments, as the
// binary would.
func OptionsFromArgs(args []string) (controllers.ManagerOptions, error) {
	var f ControllerFlags
	fs := pflag.NewFlagSet("controller", pflag.ContinueOnError)
	f.Bind(fs)
	if err := fs.Parse(args); err != nil {
		return controllers.ManagerOptions{}, err
	}
	return f.ManagerOptions()
}

// ManagerOptions checks the flags and returns the manager options they
// describe, without providers: those are built by NewProviders, for the
// commands that call out.
func (f *ControllerFlags) ManagerOptions() (controllers.ManagerOptions, error) {
	opts := f.manager
	if opts.ProbeConcurrency < 1 {
		return opts, fmt.Errorf("--probe-concurrency=%d: must be at least 1", opts.ProbeConcurrency)
	}
	if opts.Concurrency < 1 {
		return opts, fmt.Errorf("--concurrent=%d: must be at least 1", opts.Concurrency)
	}
	if opts.KubeAPIQPS <= 0 || opts.KubeAPIBurst < 1 {
		return opts, fmt.Errorf("--kube-api-qps=%g --kube-api-burst=%d: both must be positive", opts.KubeAPIQPS, opts.KubeAPIBurst)
	}
	if n := opts.Config.MaxEndpointsPerSlice; n < 1 || n > 1000 {
		return opts, fmt.Errorf("--max-endpoints-per-slice=%d: must be between 1 and 1000", n)
	}
	if n := opts.Config.MinEndpointsPerSlice; n < 0 || n > opts.Config.MaxEndpointsPerSlice {
		return opts, fmt.Errorf("--min-endpoints-per-slice=%d: must be between 0 and --max-endpoints-per-slice=%d", n, opts.Config.MaxEndpointsPerSlice)
	}
	if err := checkBackendLimits(opts.Config); err != nil {
		return opts, err
	}
	if n := opts.Config.NamespaceShare; n < 0 || n > opts.Concurrency {
		return opts, fmt.Errorf("--namespace-share=%d: must be between 0 (one less than --concurrent) and --concurrent=%d", n, opts.Concurrency)
	}
	if c := opts.Config; c.ResolveTimeout <= 0 || c.ReconcileTimeout < c.ResolveTimeout {
		return opts, fmt.Errorf("--resolve-timeout=%s --reconcile-timeout=%s: both must be positive, and a reconcile at least as long as one provider call", c.ResolveTimeout, c.ReconcileTimeout)
	}
	if opts.Config.DefaultDrainPeriod < 0 {
		return opts, fmt.Errorf("--default-drain-period=%s: must not be negative", opts.Config.DefaultDrainPeriod)
	}
	if err := opts.Config.Coalesce.Validate(); err != nil {
		return opts, err
	}
	if err := checkTimings(opts); err != nil {
		return opts, err
	}
	cidrs, names, err := deniedLists(f.deniedCIDRs, f.deniedNames, f.allowDefaultDenied)
	if err != nil {
		return opts, err
	}
	if opts.Config.DeniedPrefixes, err = parseCIDRs(cidrs); err != nil {
		return opts, err
	}
	opts.Config.DeniedNames = names
	return opts, nil
}

// checkBackendLimits checks --max-endpoints-per-backend and
// --max-slices-per-backend: every endpoint the first lets through must fit
// in the slices the second allows, 1000 a slice, for each of the three
// address families, so that only more port sets than slices can leave an
// endpoint out.
func checkBackendLimits(c externalbackend.Config) error {
	eps, sl := c.MaxEndpointsPerBackend, c.MaxSlicesPerBackend
	if eps < 0 {
		return fmt.Errorf("--max-endpoints-per-backend=%d: must be 0 (no limit) or more", eps)
	}
	if sl < 0 {
		return fmt.Errorf("--max-slices-per-backend=%d: must be 0 (no limit) or more", sl)
	}
	if need := 3 * ((eps + 999) / 1000); sl > 0 && sl < need {
		return fmt.Errorf("--max-slices-per-backend=%d: must be 0 (no limit) or at least %d, the slices that --max-endpoints-per-backend=%d endpoints of each of the three address families take at 1000 a slice",
			sl, need, eps)
	}
	return nil
}

// Lease limits. client-go waits up to JitterFactor (1.2) times the retry
// period between two attempts to renew, all within the renew deadline.
const (
	minRetryPeriod   = 200 * time.Millisecond
	minLeaseDuration = 2 * time.Second
	leaseJitter      = 1.2
)

// checkLease checks the leader election lease's times, naming the flag to
// change. The relations are client-go's (it refuses to start otherwise,
// with a message naming none of our flags); the minimums keep the API
// requests of leader election bounded, and the lease in whole seconds
// because the Lease object records only those: 2.5s would be 2s for the
// standbys, and 0.5s would let them take over at once.
func checkLease(l controllers.LeaseTimings) error {
	switch {
	case l.RetryPeriod < minRetryPeriod:
		return fmt.Errorf("--leader-elect-retry-period=%s: must be at least %s (the leader writes its lease, and every standby reads it, once a period)", l.RetryPeriod, minRetryPeriod)
	case float64(l.RenewDeadline) <= leaseJitter*float64(l.RetryPeriod):
		return fmt.Errorf("--leader-elect-renew-deadline=%s: must be longer than %g times --leader-elect-retry-period=%s (the leader retries its renewal within the deadline, at jittered periods)", l.RenewDeadline, leaseJitter, l.RetryPeriod)
	case l.Duration < minLeaseDuration || l.Duration%time.Second != 0:
		return fmt.Errorf("--leader-elect-lease-duration=%s: must be whole seconds, at least %s (the Lease records whole seconds)", l.Duration, minLeaseDuration)
	case l.Duration <= l.RenewDeadline:
		return fmt.Errorf("--leader-elect-lease-duration=%s: must be longer than --leader-elect-renew-deadline=%s (a leader that cannot renew must give up before a standby may take over)", l.Duration, l.RenewDeadline)
	}
	return nil
}

// checkTimings checks the times of the provider checks, of the
// stuck-reconcile bound (which must leave room for the others) and of the
// leader election lease.
func checkTimings(opts controllers.ManagerOptions) error {
	checks, err := opts.ProviderChecks.WithDefaults()
	if err != nil {
		return err
	}
	if err := checkStuckTimeout(opts.StuckReconcileTimeout, opts.Config.ReconcileTimeout, checks.Timeout); err != nil {
		return err
	}
	return checkLease(opts.Lease)
}

// checkStuckTimeout checks --stuck-reconcile-timeout: a reconcile that
// honours its deadlines must never count as stuck, neither an
// ExternalBackend's pass (--reconcile-timeout) nor a BackendProvider's
// connection check (--provider-check-timeout), each with its status write.
func checkStuckTimeout(stuck, reconcile, check time.Duration) error {
	longest := externalbackend.LongestReconcile(max(reconcile, check))
	if stuck < 0 || stuck > 0 && stuck <= longest {
		return fmt.Errorf("--stuck-reconcile-timeout=%s: must be 0 (off) or longer than %s, the longest a reconcile that honours its deadlines takes (--reconcile-timeout=%s or --provider-check-timeout=%s, and the status write)",
			stuck, longest, reconcile, check)
	}
	return nil
}

// deniedLists are the denied networks and names in force: the built-in
// ones (cloud metadata), less those --unsafe-allow-default-denied names,
// plus --denied-cidrs and --denied-names. The built-in entries apply
// whatever the lists say: a list that replaced them (an empty one, or one
// naming only the cluster's ranges) would silently let a tenant aim a
// Service at a metadata service.
func deniedLists(extraCIDRs, extraNames, allowed []string) (cidrs, names []string, err error) {
	cidrs, names = externalbackend.DefaultDeniedCIDRs(), externalbackend.DefaultDeniedNames()
	for _, a := range allowed {
		if !slices.Contains(cidrs, a) && !slices.Contains(names, a) {
			return nil, nil, fmt.Errorf("--unsafe-allow-default-denied: %q is not a built-in denied entry (%s)", a,
				strings.Join(append(slices.Clone(cidrs), names...), ", "))
		}
	}
	keep := func(v string) bool { return !slices.Contains(allowed, v) }
	cidrs = append(slices.DeleteFunc(cidrs, func(v string) bool { return !keep(v) }), extraCIDRs...)
	names = append(slices.DeleteFunc(names, func(v string) bool { return !keep(v) }), extraNames...)
	return cidrs, names, nil
}

// parseCIDRs reads --denied-cidrs.
func parseCIDRs(cidrs []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(cidrs))
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, fmt.Errorf("--denied-cidrs: %q is not a CIDR such as 10.96.0.0/12: %w", c, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// Logger is the logger the --zap-* flags describe.
func (f *ControllerFlags) Logger() logr.Logger { return zap.New(zap.UseFlagOptions(&f.zap)) }
