package promrules_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/controllers"
	"github.com/backendslice/backendslice/controllers/externalbackend"
	"github.com/backendslice/backendslice/providers/dns"
	"github.com/backendslice/backendslice/providers/plugin"
	"github.com/backendslice/backendslice/providers/plugin/protocol"
	"github.com/backendslice/backendslice/providers/plugin/sdk"
	"github.com/backendslice/backendslice/providers/static"
	"github.com/backendslice/backendslice/test/controlplane"
	"github.com/backendslice/backendslice/test/promrules"
)

// Where the controller keeps its lease, and its ExternalBackends.
const (
	leaseNamespace   = "backendslice-system"
	backendNamespace = "shop"
)

// running is the control plane and controller the tests share, started
// by the first test that needs them and stopped by TestMain.
var running struct {
	once sync.Once
	cp   *controlplane.ControlPlane
	stop func() error
	c    client.Client
	ours *prometheus.Registry
	// plugin is the plugin backend inventory's sources ask.
	plugin *httptest.Server
	err    error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if running.stop != nil {
		if err := running.stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the controller:", err)
			code = max(code, 1)
		}
	}
	if running.plugin != nil {
		running.plugin.Close()
	}
	if running.cp != nil {
		if err := running.cp.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
			code = max(code, 1)
		}
	}
	os.Exit(code)
}

// exportedBy runs the controller as the binary does (once per test
// process), against a real API server, with leader election, until every
// series queries select is exported or 20 seconds pass, and returns what
// its /metrics endpoint serves by series name: its own registry and
// controller-runtime's (workqueue, REST client, leader election, process
// and Go runtime).
//
// What it runs makes every kind of series the chart's rules and dashboard
// read appear: backend db publishes through a static BackendProvider,
// probed every second through a dialer that refuses (its probes fail
// open); backend lookup's dns source asks the controller's resolver, a
// closed port on 127.0.0.1, so that it stays stale and its reconciles
// fail. Both are waited for, and their status read as the metrics say it.
func exportedBy(t *testing.T, queries []promrules.Query) map[string]promrules.Series {
	t.Helper()
	running.once.Do(func() { running.err = startController() })
	if running.err != nil {
		t.Fatal(running.err)
	}
	waitCondition(t, "db", v1alpha1.ConditionProbed, metav1.ConditionFalse, v1alpha1.ReasonFailOpen)
	waitCondition(t, "lookup", v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonSourceFailed)
	gatherers := prometheus.Gatherers{running.ours, ctrlmetrics.Registry}
	var exported map[string]promrules.Series
	var missing []string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var err error
		if exported, err = promrules.Exported(gatherers); err != nil {
			t.Fatal(err)
		}
		missing = promrules.Missing(queries, exported)
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(missing) > 0 {
		t.Logf("the controller does not export %v after 20s", missing)
	}
	return exported
}

// startController starts the control plane and the manager of the binary
// on it, with leader election, the static and dns providers, and the
// scenario's BackendProvider and ExternalBackends.
func startController() error {
	// Backend lookup's reconciles fail on purpose: their errors are not news.
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.DPanicLevel)))
	cp, err := controlplane.Start()
	if err != nil {
		return err
	}
	running.cp = cp
	scheme, err := controllers.NewScheme()
	if err != nil {
		return err
	}
	c, err := client.New(cp.Config, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	running.c = c
	ctx := context.Background()
	for _, ns := range []string{leaseNamespace, backendNamespace} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return err
		}
	}
	closed, err := closedPort()
	if err != nil {
		return err
	}
	d, err := dns.New(dns.Options{Resolvers: []string{closed}, QueryTimeout: 200 * time.Millisecond, MinRefresh: time.Second, MaxRefresh: time.Minute})
	if err != nil {
		return err
	}
	waker := externalbackend.NewChannelWaker()
	plugins, err := plugin.New(plugin.Options{}, waker)
	if err != nil {
		return err
	}
	reg, err := slices.Concat(static.Kinds(), dns.Kinds(), plugin.Kinds()).NewRegistry(static.New(), d, plugins)
	if err != nil {
		return err
	}
	inventory := httptest.NewServer(inventoryPlugin())
	running.plugin = inventory
	running.ours = prometheus.NewRegistry()
	mgr, err := controllers.NewManager(cp.Config, controllers.ManagerOptions{
		MetricsBindAddress:      "0",
		HealthProbeBindAddress:  "0",
		LeaderElection:          true,
		LeaderElectionNamespace: leaseNamespace,
		// No probe leaves the process: every connection is refused here.
		ProbeDial: func(context.Context, string, string) (net.Conn, error) {
			return nil, errors.New("the test opens no connection")
		},
		Config: externalbackend.Config{
			Namespace:            leaseNamespace,
			MaxEndpointsPerSlice: 100,
			DefaultDrainPeriod:   30 * time.Second,
			ResolveTimeout:       2 * time.Second,
			// Backend lookup's source names no BackendProvider.
			AllowSourcesWithoutProvider: true,
		},
		Providers:       reg,
		Waker:           waker,
		MetricsRegistry: running.ours,
		// -count=2 runs a second controller in this process.
		SkipNameValidation: true,
	})
	if err != nil {
		return err
	}
	mctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	running.stop = func() error { cancel(); return <-done }
	return createScenario(ctx, c, inventory.URL)
}

// inventoryPlugin is a plugin that pushes group web, answers group broken
// with {} (no endpoints field: a broken answer) and refuses every other
// group (its consent rules): the plugin metrics then have a long-poll
// held, requests of each operation, a broken answer and a refused source.
func inventoryPlugin() http.Handler {
	h := (&sdk.Plugin{Name: "inventory", Push: true,
		Admit: func(_ context.Context, r sdk.Request) error {
			if r.Parameters["group"] != "web" {
				return sdk.Forbidden("group %q is not published to namespace %s", r.Parameters["group"], r.Namespace)
			}
			return nil
		},
		Resolve: func(context.Context, sdk.Request) (sdk.Answer, error) {
			return sdk.Answer{Endpoints: []sdk.Endpoint{{Address: "192.0.2.20", Serving: true}}}, nil
		}}).Handler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		var req protocol.ResolveRequest
		if json.Unmarshal(body, &req) == nil && req.Parameters["group"] == "broken" {
			_, _ = w.Write([]byte(`{}`))
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		h.ServeHTTP(w, r)
	})
}

// createScenario creates the BackendProviders and the three
// ExternalBackends: db (static, probed), lookup (dns, failing) and
// inventory (the plugin at pluginURL: one source pushed, one refused, one
// answered broken).
func createScenario(ctx context.Context, c client.Client, pluginURL string) error {
	port := []v1alpha1.ServicePort{{Name: "pg", Port: 5432}}
	objs := []client.Object{
		&v1alpha1.BackendProvider{ObjectMeta: metav1.ObjectMeta{Name: "fixed"}, Spec: v1alpha1.BackendProviderSpec{
			Static: &v1alpha1.StaticProvider{}, Namespaces: v1alpha1.NamespaceSelection{Names: []string{backendNamespace}},
			AllowedCIDRs: []string{"192.0.2.0/24"},
		}},
		&v1alpha1.ExternalBackend{ObjectMeta: metav1.ObjectMeta{Namespace: backendNamespace, Name: "db"}, Spec: v1alpha1.ExternalBackendSpec{
			Service: v1alpha1.ServiceSpec{Ports: port},
			Sources: []v1alpha1.Source{{Name: "fixed", ProviderRef: &v1alpha1.ProviderReference{Name: "fixed"},
				Static: &v1alpha1.StaticSource{Endpoints: []v1alpha1.StaticEndpoint{
					{Address: "192.0.2.10"}, {Address: "192.0.2.11", Health: v1alpha1.HealthUnhealthy},
				}}}},
			// Probed every second through the refusing dialer: the probe
			// metrics have series, and the probes fail open.
			Probe: &v1alpha1.Probe{TCP: &v1alpha1.TCPProbe{}, Period: &metav1.Duration{Duration: time.Second},
				Timeout: &metav1.Duration{Duration: 100 * time.Millisecond}},
		}},
		&v1alpha1.ExternalBackend{ObjectMeta: metav1.ObjectMeta{Namespace: backendNamespace, Name: "lookup"}, Spec: v1alpha1.ExternalBackendSpec{
			Service: v1alpha1.ServiceSpec{Ports: port},
			Sources: []v1alpha1.Source{{Name: "lookup", DNS: &v1alpha1.DNSSource{Name: "db.example.test"}}},
		}},
		&v1alpha1.BackendProvider{ObjectMeta: metav1.ObjectMeta{Name: "inventory"}, Spec: v1alpha1.BackendProviderSpec{
			Plugin: &v1alpha1.PluginProvider{URL: pluginURL}, Namespaces: v1alpha1.NamespaceSelection{Names: []string{backendNamespace}},
		}},
		&v1alpha1.ExternalBackend{ObjectMeta: metav1.ObjectMeta{Namespace: backendNamespace, Name: "inventory"}, Spec: v1alpha1.ExternalBackendSpec{
			Service: v1alpha1.ServiceSpec{Ports: port},
			Sources: []v1alpha1.Source{
				{Name: "web", ProviderRef: &v1alpha1.ProviderReference{Name: "inventory"},
					Plugin: &v1alpha1.PluginSource{Parameters: map[string]string{"group": "web"}}},
				{Name: "secret", ProviderRef: &v1alpha1.ProviderReference{Name: "inventory"},
					Plugin: &v1alpha1.PluginSource{Parameters: map[string]string{"group": "secret"}}},
				{Name: "broken", ProviderRef: &v1alpha1.ProviderReference{Name: "inventory"},
					Plugin: &v1alpha1.PluginSource{Parameters: map[string]string{"group": "broken"}}},
			},
		}},
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %s: %w", o.GetName(), err)
		}
	}
	return nil
}

// closedPort is a UDP address on 127.0.0.1 that nothing listens on: a
// query to it is refused at once.
func closedPort() (string, error) {
	l, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.LocalAddr().String()
	return addr, l.Close()
}

// waitCondition waits until backend name's condition typ has status and
// reason for its generation, failing the test after 20 seconds.
func waitCondition(t *testing.T, name, typ string, status metav1.ConditionStatus, reason string) {
	t.Helper()
	var got *metav1.Condition
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		xb := &v1alpha1.ExternalBackend{}
		if err := running.c.Get(context.Background(), types.NamespacedName{Namespace: backendNamespace, Name: name}, xb); err != nil {
			t.Fatal(err)
		}
		got = meta.FindStatusCondition(xb.Status.Conditions, typ)
		if got != nil && got.Status == status && got.Reason == reason && got.ObservedGeneration == xb.Generation {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("backend %s: %s is %+v after 20s, want %s/%s", name, typ, got, status, reason)
		}
	}
}
