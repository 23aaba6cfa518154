package health

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/cmd/backendslice/wiring"
	"github.com/backendslice/backendslice/controllers"
	"github.com/backendslice/backendslice/providers"
	consulprovider "github.com/backendslice/backendslice/providers/consul"
	dnsprovider "github.com/backendslice/backendslice/providers/dns"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// The child's bounds: a provider call may take 1 s, a reconcile 2 s, and a
// reconcile still running 13 s after it started (the least the flag
// allows: 2 s and the status write's 10 s, and a second) is stuck.
const (
	childResolveTimeout   = time.Second
	childReconcileTimeout = 2 * time.Second
	childStuckAfter       = 13 * time.Second
)

// TestLivenessFailsOnlyWhenTheLeaderIsStuck runs two replicas of the
// controller (this test binary again, wired by controllers.NewManager) with
// the stuck-reconcile check at 13 s:
//
//   - a dns source whose resolver never answers is not stuck: each
//     reconcile ends at its deadline, and /healthz passes for twice the
//     bound;
//   - a consul source whose provider ignores its deadline (as a provider
//     bug would: no provider of the binary does) holds its worker: the
//     leader's /healthz fails within the bound and a little, naming the
//     backend, while its /readyz and the standby's /healthz and /readyz
//     keep passing.
func TestLivenessFailsOnlyWhenTheLeaderIsStuck(t *testing.T) {
	ns := framework.Namespace(t)
	silent := silentResolver(t)
	cfg := childConfig{Kubeconfig: env.kubeconfig, LeaseNamespace: ns, Resolver: silent}
	leader := startChild(t, "leader", cfg)
	leader.eventually(time.Minute, "it leads", func() error {
		if !leader.leads() {
			return fmt.Errorf("not leading")
		}
		return nil
	})
	standby := startChild(t, "standby", cfg)
	standby.eventually(time.Minute, "the standby is Ready", func() error { return standby.wantStatus("/readyz", http.StatusOK) })

	quiet := framework.Backend(ns, "silent", v1alpha1.Source{Name: "name", DNS: &v1alpha1.DNSSource{Name: "db.example.test"}})
	create(t, quiet)
	framework.Eventually(t, time.Minute, "the silent source is reconciled", func() error {
		if c := framework.Get(t, quiet).Status.Conditions; len(c) == 0 {
			return fmt.Errorf("no conditions yet")
		}
		return nil
	})
	for end := time.Now().Add(2 * childStuckAfter); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		if err := leader.wantStatus("/healthz", http.StatusOK); err != nil {
			t.Fatalf("a source that never answers: %v", err)
		}
	}

	stuck := framework.Backend(ns, "stuck", v1alpha1.Source{Name: "svc", Consul: &v1alpha1.ConsulSource{Service: "payments"}})
	created := time.Now()
	create(t, stuck)
	leader.eventually(childStuckAfter+15*time.Second, "/healthz fails on the stuck leader", func() error {
		for _, c := range []*controller{standby, leader} {
			if err := c.wantStatus("/readyz", http.StatusOK); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
		}
		if err := standby.wantStatus("/healthz", http.StatusOK); err != nil {
			t.Fatalf("standby: %v", err)
		}
		if leader.wantStatus("/healthz", http.StatusOK) == nil {
			return fmt.Errorf("/healthz still passes")
		}
		return nil
	})
	failed := time.Since(created)
	if failed < childStuckAfter {
		t.Errorf("/healthz failed %s after the stuck backend was created, before the %s bound", failed, childStuckAfter)
	}
	t.Logf("/healthz failed %s after the stuck backend was created (bound %s)", failed.Round(100*time.Millisecond), childStuckAfter)
	// The probe's answer says what failed; the log says which backend.
	_, body := leader.probe("/healthz/reconcile-loop")
	if !strings.Contains(body, "externalbackend: a reconcile has run for longer than --stuck-reconcile-timeout=13s") || strings.Contains(body, ns) {
		t.Errorf("/healthz/reconcile-loop says %q; want the check and no backend named", body)
	}
	if log := tail(leader.log, 1<<20); !strings.Contains(log, "the externalbackend reconcile of "+ns+"/stuck has run for") || strings.Contains(log, "reconcile of "+ns+"/silent") {
		t.Errorf("the leader's log does not name %s/stuck alone as stuck:\n%s", ns, tail(leader.log, 3000))
	}
}

// create creates xb and deletes it when the test ends: every controller
// these tests start watches every namespace, and a backend left behind
// (one whose provider never answers) would be the next test's.
func create(t *testing.T, xb *v1alpha1.ExternalBackend) {
	t.Helper()
	framework.Create(t, xb)
	t.Cleanup(func() { _ = framework.E().Client.Delete(ctx, xb) })
}

// silentResolver is a UDP address on 127.0.0.1 that takes DNS queries and
// never answers, until the test ends.
func silentResolver(t *testing.T) string {
	t.Helper()
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = udp.Close() })
	return udp.LocalAddr().String()
}

// deafProvider serves consul sources and never returns: a provider that
// ignores its context, as one with a bug would.
type deafProvider struct{}

func (deafProvider) Kind() providers.Kind { return consulprovider.Kind }

func (deafProvider) Resolve(context.Context, providers.Request) (providers.Result, error) {
	select {}
}

// runChild runs the controller with the settings cfg (JSON) carries, the
// real dns provider and deafProvider, until the parent kills it.
func runChild(cfg string) int {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	if err := child(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "controller:", err)
		return 1
	}
	return 0
}

func child(raw string) error {
	var c childConfig
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		return err
	}
	restCfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return err
	}
	dns, err := dnsprovider.New(dnsprovider.Options{Resolvers: []string{c.Resolver}, QueryTimeout: 500 * time.Millisecond,
		MinRefresh: time.Second, MaxRefresh: time.Minute})
	if err != nil {
		return err
	}
	reg, err := wiring.Kinds().NewRegistry(dns, deafProvider{})
	if err != nil {
		return err
	}
	rc := framework.TestConfig()
	rc.ResolveTimeout, rc.ReconcileTimeout = childResolveTimeout, childReconcileTimeout
	mgr, err := controllers.NewManager(restCfg, controllers.ManagerOptions{
		MetricsBindAddress:      c.MetricsAddr,
		HealthProbeBindAddress:  c.HealthAddr,
		LeaderElection:          true,
		LeaderElectionNamespace: c.LeaseNamespace,
		Config:                  rc,
		Providers:               reg,
		StuckReconcileTimeout:   childStuckAfter,
	})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return controllers.Run(ctx, mgr)
}
