// Package e2e runs the controller, wired as the binary wires it, against a
// real kube-apiserver and etcd.
package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/backendslice/backendslice/controllers"
	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/providers/static"
	"github.com/backendslice/backendslice/test/controlplane"
)

var (
	// k8s is an administrator's client that talks to the API server directly.
	k8s client.Client
	// metricsReg holds the controller's metrics, to count its writes.
	metricsReg *prometheus.Registry
	nsCounter  atomic.Int32
)

// testDenied is denied on top of the defaults, standing in for a cluster's
// own Pod range.
const testDenied = "203.0.113.128/25"

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(false), zap.Level(zapLevel())))
	cp, err := controlplane.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = cp.Stop() }()
	scheme, err := controllers.NewScheme()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	k8s, err = client.New(cp.Config, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	reg, err := providers.NewRegistry(static.New())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var denied []netip.Prefix
	for _, c := range append(controllers.DefaultDeniedCIDRs(), testDenied) {
		denied = append(denied, netip.MustParsePrefix(c))
	}
	metricsReg = prometheus.NewRegistry()
	mgr, err := controllers.NewManager(cp.Config, controllers.ManagerOptions{
		MetricsBindAddress:     "0",
		HealthProbeBindAddress: "0",
		Providers:              reg,
		MetricsRegistry:        metricsReg,
		Config: controllers.Config{
			MaxEndpointsPerSlice: 100,
			DefaultDrainPeriod:   30 * time.Second,
			DeniedPrefixes:       denied,
			DeniedNames:          controllers.DefaultDeniedNames(),
			ResolveTimeout:       5 * time.Second,
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	code := m.Run()
	cancel()
	if err := <-done; err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
		return 1
	}
	return code
}

// zapLevel is quiet unless E2E_VERBOSE is set.
func zapLevel() zapcore.Level {
	if os.Getenv("E2E_VERBOSE") != "" {
		return zapcore.DebugLevel
	}
	return zapcore.ErrorLevel
}

// newNamespace creates a namespace of its own for one test.
func newNamespace(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("%s-%d", strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())), nsCounter.Add(1))
	if len(name) > 63 {
		name = name[len(name)-63:]
		name = strings.TrimLeft(name, "-")
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	return name
}

// eventually retries check until it returns nil or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, check func() error) {
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

// writes is how many API writes of kind (Service or EndpointSlice) the controller has made.
func writes(t *testing.T, kind string) float64 {
	t.Helper()
	n, _ := metricValue(t, "backendslice_writes_total", map[string]string{"kind": kind})
	return n
}

// reconciles is how many reconciles the controller has finished with result
// ("success" or "error"), or with any result when result is "".
func reconciles(t *testing.T, result string) float64 {
	t.Helper()
	match := map[string]string{}
	if result != "" {
		match["result"] = result
	}
	n, _ := metricValue(t, "backendslice_reconciles_total", match)
	return n
}

// metricValue sums the counters and gauges of the named metric whose labels
// include every pair of match, and says how many series matched.
func metricValue(t *testing.T, name string, match map[string]string) (sum float64, series int) {
	t.Helper()
	fams, err := metricsReg.Gather()
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
