// Package upgrade_test upgrades the controller as the chart's rolling
// update does, two replicas of the previous release's binary (-previous)
// replaced by two of this checkout's, while a Consul check flips and a
// client on a cluster node connects to the flipped backend's cluster IP
// through the real kube-proxy (nftables mode, in a network namespace of
// test/netlab). The replicas are child processes (test/replica), against
// a real kube-apiserver and etcd, a real Consul agent and the in-process
// DNS server.
//
// It checks, at every write a watch of the namespace sees, that no
// endpoint leaves, doubles or turns not ready; that the slices and
// Services get no write but the flips' own; that every flip reaches the
// slices; that no connection fails; and that each stopped leader released
// its lease. The times (flip to slice, lease takeover) are reported, not
// asserted.
//
// `go test ./test/e2e/upgrade` is the short form `make test` runs (one
// rolling restart of this checkout's binary, few backends); `make
// bench-upgrade` is the long form from 0.2.0 that rewrites the upgrade
// section of docs/benchmarks.md. It is a package of its own so that it
// runs beside test/chaos and the other data-path suites.
package upgrade_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backendslice/backendslice/test/consultest"
	"github.com/backendslice/backendslice/test/dnstest"
	"github.com/backendslice/backendslice/test/e2e/framework"
	"github.com/backendslice/backendslice/test/netlab"
	"github.com/backendslice/backendslice/test/replica"
)

// Flags of the long form; the defaults are the short form `make test` runs.
var (
	previous        = flag.String("previous", "", "git revision (commit or tag) whose controller runs before the upgrade to this checkout's; empty: this checkout's too (a rolling restart)")
	baseline        = flag.String("baseline", "", "git revision whose controller each upgrade also goes to, right after the one to this checkout's: the two compared in one run (the behaviour before a change)")
	upgrades        = flag.Int("upgrades", 1, "rolling upgrades, stopping the old leader first and then an old standby first, in turn")
	upgradeBackends = flag.Int("backends", 20, "static ExternalBackends besides the flipped one and the DNS one")
	flipPeriod      = flag.Duration("flip-period", time.Second, "how often a Consul check flips")
	report          = flag.String("report", "", "write the figures as the upgrade section of this Markdown file (docs/benchmarks.md)")
)

// Fixed names of the environment the child controllers run in.
const (
	// dnsZone is the zone the in-process DNS server answers for.
	dnsZone = "upgrade.test."
	// nodeName is the node kube-proxy runs as.
	nodeName = "node-u"
	// appPort is the hosts' name-and-echo port: the target port of the
	// backends' "app" port (80).
	appPort = 8080
	// flipInstances is how many Consul instances, each a host of the
	// lab, the flipped backend has.
	flipInstances = 4
)

// env is what every test shares.
var env struct {
	// bin is this checkout's controller, built says from what.
	bin, built string
	kubeconfig string
	dns        *dnstest.Server
	consul     *consultest.Agent
	lab        *netlab.Lab
	// hosts serve appPort; the flipped backend's instances are theirs.
	hosts []*netlab.Host
}

func TestMain(m *testing.M) { os.Exit(run(m)) }

// run builds the binary, starts the sources, the control plane and the
// lab with kube-proxy, runs the tests and tears everything down, also when
// a step fails.
func run(m *testing.M) (code int) {
	flag.Parse()
	tmp, err := os.MkdirTemp("", "backendslice-upgrade-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	if env.bin, env.built, err = replica.BuildCheckout(tmp); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if env.dns, err = dnstest.New(dnsZone); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = env.dns.Stop() }()
	if env.consul, err = consultest.Start(consultest.Config{Node: "upgrade"}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := env.consul.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the Consul agent:", err)
			code = max(code, 1)
		}
	}()
	return framework.RunWithLab(m, framework.Options{ControlPlaneOnly: true}, func(e *framework.Env, lab *netlab.Lab, logs string) error {
		return setUp(e, lab, logs, tmp)
	})
}

// setUp writes the controllers' kubeconfig, adds the hosts to the lab and
// starts kube-proxy in its node.
func setUp(e *framework.Env, lab *netlab.Lab, logs, tmp string) error {
	kc, err := e.ControlPlane().Kubeconfig("backendslice-upgrade")
	if err != nil {
		return err
	}
	env.kubeconfig = filepath.Join(tmp, "kubeconfig")
	if err := os.WriteFile(env.kubeconfig, kc, 0o600); err != nil {
		return err
	}
	env.lab = lab
	for i := range flipInstances {
		h, err := lab.AddHost(fmt.Sprintf("u%d", i+1))
		if err != nil {
			return err
		}
		if err := h.ServeTCP(appPort); err != nil {
			return fmt.Errorf("host %s: %w", h.Name, err)
		}
		env.hosts = append(env.hosts, h)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = framework.StartKubeProxy(ctx, e, lab, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}, logs)
	return err
}

// requireSetUp fails a test whose environment could not be set up.
func requireSetUp(t *testing.T) {
	t.Helper()
	if env.kubeconfig == "" || len(env.hosts) < flipInstances {
		t.Fatal("the upgrade environment was not set up (see the output of TestMain)")
	}
}

// controllerFlags are the flags every replica runs with: the test's API
// server and sources, with short refresh intervals so that changes show
// within seconds. The previous release takes them too.
func controllerFlags() []string {
	return []string{
		"controller",
		"--kubeconfig", env.kubeconfig,
		"--dns-resolvers", env.dns.Addr,
		"--dns-query-timeout", "500ms",
		"--dns-min-refresh", "1s",
		"--dns-max-refresh", "2s",
		"--consul-address", env.consul.Addr,
		"--consul-wait-time", "30s",
		"--resolve-timeout", "3s",
		"--zap-log-level", "info",
		// The backends here name no BackendProvider.
		"--allow-sources-without-provider",
	}
}

// agentChecks set the checks on the Consul agent itself.
type agentChecks struct{ a *consultest.Agent }

func (c agentChecks) Register(service, id, address, status string) error {
	if err := c.a.Register(consultest.Service{ID: id, Name: service, Address: address, Status: status}); err != nil {
		return fmt.Errorf("registering Consul instance %s of %s: %w", id, service, err)
	}
	return nil
}

func (c agentChecks) SetCheck(_, id, status string) error {
	if err := c.a.SetCheck(id, status); err != nil {
		return fmt.Errorf("setting the check of Consul instance %s to %s: %w", id, status, err)
	}
	return nil
}
