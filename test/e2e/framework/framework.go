// Package framework runs the controller, wired as the binary wires it,
// against a real kube-apiserver and etcd, and gives end-to-end tests the
// waits and reads they share.
package framework

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/cmd/backendslice/wiring"
	"github.com/backendslice/backendslice/controllers"
	"github.com/backendslice/backendslice/controllers/backendprovider"
	"github.com/backendslice/backendslice/controllers/externalbackend"
	"github.com/backendslice/backendslice/probe"
	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/test/controlplane"
)

// Timeout bounds every wait for the controller.
const Timeout = 20 * time.Second

// TestDenied is denied on top of the default denied CIDRs, standing in for a
// cluster's own Pod range.
const TestDenied = "203.0.113.128/25"

// Options configure the environment.
type Options struct {
	// Providers builds the providers under test; the waker is for push providers.
	Providers func(w providers.Waker) ([]providers.Provider, error)
	// Config changes the controller configuration from TestConfig.
	Config func(*externalbackend.Config)
	// ControllerNamespace, if set, runs the controller as the chart
	// installs it: in this namespace (made before the tests), reading the
	// Secrets BackendProviders name there, and every source must name a
	// BackendProvider.
	ControllerNamespace string
	// Started, if set, is called with the environment before the tests run;
	// an error stops the run before any test.
	Started func(*Env) error
	// Stopping, if set, is called after the tests, before the controller
	// and the control plane stop: clients of the API server that the
	// environment does not own (kube-proxy, CoreDNS) end here, or the API
	// server waits for their watches.
	Stopping func()
	// ServiceCIDRs are the API server's Service ranges; empty means the
	// ranges controlplane.StackEnv chooses.
	ServiceCIDRs string
	// ControlPlaneOnly starts the control plane without the controller, for
	// tests that run the controller themselves (for example in another
	// process, under the identity a Helm chart grants). Providers and Config
	// are then unused.
	ControlPlaneOnly bool
	// WrapTransport, if set, wraps the transport of the controller's own
	// client, for benchmarks that count the controller's API requests.
	WrapTransport func(http.RoundTripper) http.RoundTripper
	// Concurrency is the controller's workers; zero means its default.
	Concurrency int
	// KubeAPIQPS and KubeAPIBurst are the controller's client-side limit
	// on API requests (the binary's --kube-api-qps and --kube-api-burst);
	// zero keeps envtest's, which is high enough never to hold a request.
	KubeAPIQPS   float32
	KubeAPIBurst int
	// ProbeDial opens the controller's probe connections; nil dials from
	// the test process's network (a data-path test dials from a lab).
	ProbeDial probe.Dialer
	// ProviderChecks configure the checks of BackendProviders'
	// connections; zero fields take the controller's defaults.
	ProviderChecks backendprovider.CheckOptions
}

// TestConfig is the controller configuration of the tests: the defaults
// (the Nodes' Pod ranges denied, as --deny-pod-cidrs is by default) plus
// TestDenied. The suites written before BackendProviders publish through
// the controller's own connections (AllowSourcesWithoutProvider); the
// tenancy suite turns it off, as the chart does.
func TestConfig() externalbackend.Config {
	var denied []netip.Prefix
	for _, c := range append(externalbackend.DefaultDeniedCIDRs(), TestDenied) {
		denied = append(denied, netip.MustParsePrefix(c))
	}
	return externalbackend.Config{
		MaxEndpointsPerSlice: 100,
		DefaultDrainPeriod:   30 * time.Second,
		DeniedPrefixes:       denied,
		DeniedNames:          externalbackend.DefaultDeniedNames(),
		ResolveTimeout:       5 * time.Second,
		ReconcileTimeout:     externalbackend.DefaultReconcileTimeout,
		Churn:                externalbackend.DefaultChurn(),
		DenyPodCIDRs:         true,
		// The suites written before BackendProviders.
		AllowSourcesWithoutProvider: true,
	}
}

// Env is a running control plane and, unless ControlPlaneOnly, the controller.
type Env struct {
	// Client talks to the API server directly, as an administrator; it
	// is a client.WithWatch, for tests that watch what happens.
	Client  client.Client
	metrics *prometheus.Registry
	cp      *controlplane.ControlPlane
	cancel  context.CancelFunc
	done    chan error
	ns      atomic.Int32
	// opts started the controller; RestartController starts it again with them.
	opts Options
}

// Start starts the control plane and, unless ControlPlaneOnly, the controller.
func Start(opts Options) (*Env, error) {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(logLevel())))
	cidrs := opts.ServiceCIDRs
	if cidrs == "" {
		cidrs = controlplane.ServiceCIDRs()
	}
	cp, err := controlplane.StartWith(cidrs)
	if err != nil {
		return nil, err
	}
	env := &Env{cp: cp, metrics: prometheus.NewRegistry(), done: make(chan error, 1)}
	if err := env.start(opts); err != nil {
		return nil, errors.Join(err, cp.Stop())
	}
	return env, nil
}

// start makes the administrator's client and, unless the options say
// otherwise, starts the controller.
func (e *Env) start(opts Options) error {
	scheme, err := controllers.NewScheme()
	if err != nil {
		return err
	}
	if e.Client, err = client.NewWithWatch(e.cp.Config, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	if opts.ControlPlaneOnly {
		return nil
	}
	e.opts = opts
	return e.startController(opts)
}

func (e *Env) startController(opts Options) error {
	waker := externalbackend.NewChannelWaker()
	ps, err := opts.Providers(waker)
	if err != nil {
		return err
	}
	reg, err := wiring.Kinds().NewRegistry(ps...)
	if err != nil {
		return err
	}
	cfg := TestConfig()
	// One instance runs, as under the chart's leader election.
	cfg.SoleWriter = true
	if opts.ControllerNamespace != "" {
		cfg.AllowSourcesWithoutProvider = false
		cfg.Namespace = opts.ControllerNamespace
	}
	if opts.Config != nil {
		opts.Config(&cfg)
	}
	restCfg := e.cp.Config
	if opts.WrapTransport != nil {
		restCfg = rest.CopyConfig(restCfg)
		restCfg.Wrap(opts.WrapTransport)
	}
	mgr, err := controllers.NewManager(restCfg, controllers.ManagerOptions{
		MetricsBindAddress:     "0",
		HealthProbeBindAddress: "0",
		Providers:              reg,
		Waker:                  waker,
		MetricsRegistry:        e.metrics,
		Config:                 cfg,
		Concurrency:            opts.Concurrency,
		KubeAPIQPS:             opts.KubeAPIQPS,
		KubeAPIBurst:           opts.KubeAPIBurst,
		ProbeDial:              opts.ProbeDial,
		ProviderChecks:         opts.ProviderChecks,
		// RestartController runs a second controller in this process.
		SkipNameValidation: true,
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	go func() { e.done <- mgr.Start(ctx) }()
	return nil
}

// RestartController stops the controller and starts a new one, as a
// restart of its process would: new providers, no memory of earlier
// answers, caches filled again from the API server, metrics from zero.
func RestartController(t *testing.T) {
	t.Helper()
	current.restart(t, current.opts, func() {})
}

// Stop stops the controller, if it runs, and the control plane.
func (e *Env) Stop() error {
	var err error
	if e.cancel != nil {
		e.cancel()
		err = <-e.done
	}
	return errors.Join(err, e.cp.Stop())
}

// Config reaches the API server as an administrator, for clients the
// helpers here do not cover (Helm, impersonation).
func (e *Env) Config() *rest.Config { return e.cp.Config }

// Run is a TestMain body: start, run the tests, stop.
func Run(m *testing.M, opts Options) int {
	env, err := Start(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	current = env
	code := 0
	if err := env.createNamespace(opts.ControllerNamespace); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if code == 0 && opts.Started != nil {
		if err := opts.Started(env); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	if code == 0 {
		code = m.Run()
	}
	if opts.Stopping != nil {
		opts.Stopping()
	}
	return max(code, stop(env))
}

// stop stops env and says 1 if that failed.
func stop(env *Env) int {
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping:", err)
		return 1
	}
	return 0
}

// current is the environment Run started, for the helpers below. A test
// binary runs one environment.
var current *Env

// E is the environment Run started.
func E() *Env { return current }

func logLevel() zapcore.Level {
	if os.Getenv("E2E_VERBOSE") != "" {
		return zapcore.DebugLevel
	}
	return zapcore.ErrorLevel
}

// Namespace creates a namespace of its own for one test.
func Namespace(t *testing.T) string {
	t.Helper()
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	name = fmt.Sprintf("%s-%d", name[max(0, len(name)-50):], current.ns.Add(1))
	name = strings.TrimLeft(name, "-")
	if err := current.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	return name
}

// Eventually retries check until it returns nil, failing the test after timeout.
func Eventually(t *testing.T, timeout time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = check(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: still failing after %s: %v", what, timeout, err)
}

// Backend is an ExternalBackend named name in ns with a TCP port 5432
// named pg and the sources.
func Backend(ns, name string, sources ...v1alpha1.Source) *v1alpha1.ExternalBackend {
	return &v1alpha1.ExternalBackend{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.ExternalBackendSpec{
			Service: v1alpha1.ServiceSpec{Ports: []v1alpha1.ServicePort{{Name: "pg", Port: 5432}}},
			Sources: sources,
		},
	}
}

// Create creates obj or fails the test.
func Create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := current.Client.Create(context.Background(), obj); err != nil {
		t.Fatalf("creating %s: %v", obj.GetName(), err)
	}
}

// Get reads the current state of an ExternalBackend.
func Get(t *testing.T, xb *v1alpha1.ExternalBackend) *v1alpha1.ExternalBackend {
	t.Helper()
	cur := &v1alpha1.ExternalBackend{}
	if err := current.Client.Get(context.Background(), client.ObjectKeyFromObject(xb), cur); err != nil {
		t.Fatalf("reading %s: %v", xb.Name, err)
	}
	return cur
}

// Edit reads obj, applies change and writes it back, retrying on
// conflicts: it stands for a person or another tool editing an object.
func Edit[T client.Object](t *testing.T, obj T, change func(T)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := current.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		change(obj)
		return current.Client.Update(context.Background(), obj)
	})
	if err != nil {
		t.Fatalf("editing %s: %v", obj.GetName(), err)
	}
}

// Update reads the ExternalBackend, applies change and writes it back,
// retrying on conflicts with the controller's status writes.
func Update(t *testing.T, xb *v1alpha1.ExternalBackend, change func(*v1alpha1.ExternalBackend)) error {
	t.Helper()
	var err error
	for range 10 {
		cur := Get(t, xb)
		change(cur)
		if err = current.Client.Update(context.Background(), cur); err == nil {
			*xb = *cur
			return nil
		}
		if !apierrors.IsConflict(err) {
			return err
		}
	}
	return err
}

// WaitCondition waits until condition typ has status and reason for the
// current generation, and returns the backend as it was then.
func WaitCondition(t *testing.T, xb *v1alpha1.ExternalBackend, typ string, status metav1.ConditionStatus, reason string) *v1alpha1.ExternalBackend {
	t.Helper()
	var cur *v1alpha1.ExternalBackend
	Eventually(t, Timeout, fmt.Sprintf("%s %s=%s/%s", xb.Name, typ, status, reason), func() error {
		cur = Get(t, xb)
		c := meta.FindStatusCondition(cur.Status.Conditions, typ)
		switch {
		case c == nil:
			return fmt.Errorf("no %s condition yet (conditions: %v)", typ, cur.Status.Conditions)
		case c.Status != status || c.Reason != reason || c.ObservedGeneration != cur.Generation:
			return fmt.Errorf("%s is %s/%s (generation %d of %d): %s", typ, c.Status, c.Reason, c.ObservedGeneration, cur.Generation, c.Message)
		}
		return nil
	})
	return cur
}

// WaitReady waits until the backend is Ready with its generation observed.
func WaitReady(t *testing.T, xb *v1alpha1.ExternalBackend) *v1alpha1.ExternalBackend {
	t.Helper()
	cur := WaitCondition(t, xb, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
	if cur.Status.ObservedGeneration != cur.Generation {
		t.Fatalf("Ready but observedGeneration %d != generation %d", cur.Status.ObservedGeneration, cur.Generation)
	}
	return cur
}

// Slices lists the slices the controller manages for a Service, by name.
func Slices(t *testing.T, ns, svc string) []discoveryv1.EndpointSlice {
	t.Helper()
	var list discoveryv1.EndpointSliceList
	if err := current.Client.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{
		discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: v1alpha1.ManagedByValue,
	}); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(list.Items, func(a, b discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	return list.Items
}

// Published maps each address in the slices to its endpoint, failing on an
// address published twice or an endpoint with other than one address.
func Published(sl []discoveryv1.EndpointSlice) (map[string]discoveryv1.Endpoint, error) {
	out := map[string]discoveryv1.Endpoint{}
	for _, s := range sl {
		for _, e := range s.Endpoints {
			if len(e.Addresses) != 1 {
				return nil, fmt.Errorf("slice %s: endpoint with %d addresses", s.Name, len(e.Addresses))
			}
			if _, dup := out[e.Addresses[0]]; dup {
				return nil, fmt.Errorf("address %s published twice", e.Addresses[0])
			}
			out[e.Addresses[0]] = e
		}
	}
	return out, nil
}

// WaitAddresses waits until our slices of svc publish exactly addrs.
func WaitAddresses(t *testing.T, ns, svc string, addrs ...string) []discoveryv1.EndpointSlice {
	t.Helper()
	var sl []discoveryv1.EndpointSlice
	Eventually(t, Timeout, "slices of "+svc, func() error {
		sl = Slices(t, ns, svc)
		got, err := Published(sl)
		if err != nil {
			return err
		}
		if len(got) != len(addrs) {
			return fmt.Errorf("%d addresses published, want %d: %v", len(got), len(addrs), keys(got))
		}
		for _, a := range addrs {
			if _, ok := got[a]; !ok {
				return fmt.Errorf("%s not published (have %v)", a, keys(got))
			}
		}
		return nil
	})
	return sl
}

func keys(m map[string]discoveryv1.Endpoint) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Writes is how many API writes of kind (Service or EndpointSlice) the
// controller has made.
func Writes(t *testing.T, kind string) float64 {
	t.Helper()
	n, _ := MetricValue(t, "backendslice_writes_total", map[string]string{"kind": kind})
	return n
}

// MetricValue sums the counters and gauges of the named controller metric
// whose labels include every pair of match, and says how many series matched.
func MetricValue(t *testing.T, name string, match map[string]string) (sum float64, series int) {
	t.Helper()
	fams, err := current.metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if !containsAll(labels, match) {
				continue
			}
			series++
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum, series
}

// containsAll tells whether every pair of sub is in m.
func containsAll(m, sub map[string]string) bool {
	for k, v := range sub {
		if got, ok := m[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// DualStack tells whether the API server gives Services both IP families
// (controlplane.StackEnv chooses).
func DualStack() bool { return controlplane.ServiceCIDRs() == controlplane.DualStackServiceCIDRs }

// Served keeps the addresses of the families the API server serves: all on
// a dual-stack one, the IPv4 ones on a single-stack one, where the
// controller leaves the others out.
func Served(addrs ...string) []string {
	if DualStack() {
		return addrs
	}
	var out []string
	for _, a := range addrs {
		if !strings.Contains(a, ":") {
			out = append(out, a)
		}
	}
	return out
}

// ServedTypes are the slice address types of the IP families the API
// server serves, in order.
func ServedTypes() []discoveryv1.AddressType {
	if DualStack() {
		return []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6}
	}
	return []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4}
}

// States are the published endpoints' conditions by address, each as
// "ready/serving/terminating".
func States(sl []discoveryv1.EndpointSlice) (map[string]string, error) {
	eps, err := Published(sl)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(eps))
	for a, e := range eps {
		c := e.Conditions
		out[a] = fmt.Sprintf("%t/%t/%t", ptr.Deref(c.Ready, false), ptr.Deref(c.Serving, false), ptr.Deref(c.Terminating, false))
	}
	return out, nil
}

// WaitStates waits until the slices of svc in ns publish exactly want (see
// States), and returns them.
func WaitStates(t *testing.T, ns, svc string, want map[string]string) []discoveryv1.EndpointSlice {
	t.Helper()
	var sl []discoveryv1.EndpointSlice
	Eventually(t, Timeout, fmt.Sprintf("%s publishes %v", svc, want), func() error {
		sl = Slices(t, ns, svc)
		got, err := States(sl)
		if err != nil {
			return err
		}
		if !maps.Equal(got, want) {
			return fmt.Errorf("published %v", got)
		}
		return nil
	})
	return sl
}

// ServedOf keeps the entries of want, keyed by address, whose family the
// API server serves (see Served).
func ServedOf[V any](want map[string]V) map[string]V {
	out := make(map[string]V, len(want))
	for _, a := range Served(slices.Collect(maps.Keys(want))...) {
		out[a] = want[a]
	}
	return out
}

// APIServerAddress is the first address of the API server's own slice,
// which it writes for Service default/kubernetes: an address the
// controller must never publish.
func APIServerAddress(t *testing.T) string {
	t.Helper()
	var addr string
	Eventually(t, Timeout, "the API server's own EndpointSlice", func() error {
		var list discoveryv1.EndpointSliceList
		if err := current.Client.List(context.Background(), &list, client.InNamespace(metav1.NamespaceDefault),
			client.MatchingLabels{discoveryv1.LabelServiceName: "kubernetes"}); err != nil {
			return err
		}
		for _, s := range list.Items {
			if len(s.Endpoints) > 0 {
				addr = s.Endpoints[0].Addresses[0]
				return nil
			}
		}
		return fmt.Errorf("no endpoint in %d slices", len(list.Items))
	})
	// A loopback address would prove nothing: the API server refuses it in
	// any other slice (the test control plane advertises another).
	if a, err := netip.ParseAddr(addr); err != nil || a.IsLoopback() {
		t.Fatalf("the API server's address %q is not an IP a backend could publish", addr)
	}
	return addr
}

// createNamespace makes the controller's namespace ns, if one is set.
func (e *Env) createNamespace(ns string) error {
	if ns == "" {
		return nil
	}
	err := e.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the controller's namespace: %w", err)
	}
	return nil
}
