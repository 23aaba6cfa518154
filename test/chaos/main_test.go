// Package chaos_test proves the controller under faults. It runs the real
// backendslice binary, built from this checkout, as a child process against
// a real kube-apiserver and etcd (envtest), a real Consul agent, the
// in-process DNS server and the AWS wire fake, and then:
//
//   - kills it with SIGKILL at random points while every kind of source
//     keeps changing, and checks the invariants after each restart
//     (TestKillsUnderChurn);
//   - takes every provider down across a restart and checks that nothing
//     published moves while it is down, then that it follows again
//     (TestProvidersDownAcrossRestart);
//   - stops and starts kube-apiserver while 200 backends converge
//     (TestAPIServerRestartMidSync);
//   - runs two replicas with leader election and stops the leader
//     mid-sync, with SIGKILL and with SIGTERM (TestLeaderHandover);
//   - edits, relabels and deletes what the controller wrote, and plants
//     slices with its labels that are not its own (TestTampering).
//
// The rolling upgrade from the previous release, under traffic through
// kube-proxy, is test/e2e/upgrade's; both run their replicas with
// test/replica.
//
// The invariants are one function, (*world).check, shared by every test.
//
// `go test ./test/chaos` is the short form (a few kills, every fault once,
// short quiet windows) that `make test` runs; the long form takes flags:
//
//	go test ./test/chaos -count=1 -timeout 60m -args -kills=50 -quiet=30s -report=$PWD/docs/reliability.md
//
// Every random choice comes from -seed, which a run logs, so that a failure
// can be replayed with the same order of kills and changes (timings still
// differ: the controller runs on its own).
package chaos_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/backendslice/backendslice/test/awstest"
	"github.com/backendslice/backendslice/test/consultest"
	"github.com/backendslice/backendslice/test/dnstest"
	"github.com/backendslice/backendslice/test/e2e/framework"
	"github.com/backendslice/backendslice/test/replica"
)

// Flags of the long form; the defaults are the short form `make test` runs.
var (
	kills     = flag.Int("kills", 3, "SIGKILLs of the controller in TestKillsUnderChurn")
	quiet     = flag.Duration("quiet", 10*time.Second, "quiet window over which reconciles and writes are counted after tampering")
	backends  = flag.Int("backends", 200, "ExternalBackends converging while kube-apiserver restarts")
	handovers = flag.Int("handovers", 1, "leader kills in TestLeaderHandover, and as many leader SIGTERMs")
	downFor   = flag.Duration("down", 8*time.Second, "how long each provider stays down (longer than the drain period of its backends)")
	seedFlag  = flag.Int64("seed", 0, "seed of every random choice; 0 picks one from the clock (the run logs it)")
	binary    = flag.String("binary", "", "controller binary to run instead of building one from this checkout")
	report    = flag.String("report", "", "write the figures of the run as Markdown to this file (docs/reliability.md)")
)

// Fixed names of the environment the child controllers run in.
const (
	// dnsZone is the zone the in-process DNS server answers for.
	dnsZone = "chaos.test."
	// awsRegion is the region of every AWS source: the one in the
	// replicas' environment.
	awsRegion = replica.AWSRegion
	// awsRefresh is the controller's --aws-refresh-interval: short, so
	// that AWS changes show within a second or two.
	awsRefresh = time.Second
	// dnsMaxRefresh is the controller's --dns-max-refresh: a DNS change
	// shows within it.
	dnsMaxRefresh = 2 * time.Second
	// convergeTimeout bounds each wait for the invariants to hold. It is a
	// safety bound for a stuck controller, not a measurement: the
	// measured times go to the report.
	convergeTimeout = 90 * time.Second
)

// env is what every test shares: the sources, the binary and the model.
var env struct {
	seed int64
	bin  string
	// built says where the controller under test comes from, for the report.
	built      string
	kubeconfig string
	certDir    string
	dns        *dnstest.Server
	consul     *consultest.Agent
	aws        *awstest.Server
	proxy      *awsProxy
	world      *world
	ledger     *ledger
}

func TestMain(m *testing.M) { os.Exit(run(m)) }

// run sets up the sources, builds the binary, starts the control plane,
// runs the tests and tears everything down, also when a step fails.
func run(m *testing.M) (code int) {
	flag.Parse()
	env.seed = *seedFlag
	if env.seed == 0 {
		env.seed = time.Now().UnixNano()
	}
	fmt.Fprintf(os.Stderr, "chaos: seed %d (replay with -args -seed=%d)\n", env.seed, env.seed)
	env.ledger = newLedger()

	tmp, err := os.MkdirTemp("", "backendslice-chaos-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := os.RemoveAll(tmp); err != nil {
			fmt.Fprintln(os.Stderr, "removing", tmp+":", err)
		}
	}()
	if env.bin, err = buildBinary(tmp); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	env.certDir = filepath.Join(tmp, "apiserver-certs")
	if err := os.Mkdir(env.certDir, 0o700); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if env.dns, err = dnstest.New(dnsZone); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = env.dns.Stop() }()
	env.aws = awstest.New()
	defer env.aws.Close()
	env.proxy = newAWSProxy(env.aws.URL)
	defer env.proxy.Close()
	if env.consul, err = consultest.Start(consultest.Config{Node: "chaos"}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := env.consul.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the Consul agent:", err)
			code = max(code, 1)
		}
	}()

	code = framework.Run(m, framework.Options{ControlPlaneOnly: true, Started: func(e *framework.Env) error {
		if err := setUp(e, tmp); err != nil {
			return fmt.Errorf("chaos setup: %w", err)
		}
		return nil
	}})
	if *report != "" {
		if err := env.ledger.write(*report, code == 0); err != nil {
			fmt.Fprintln(os.Stderr, "writing the report:", err)
			code = max(code, 1)
		}
	}
	return code
}

// setUp writes the controller's kubeconfig and builds the model once the
// control plane runs.
func setUp(e *framework.Env, tmp string) error {
	kc, err := e.ControlPlane().Kubeconfig("backendslice-chaos")
	if err != nil {
		return err
	}
	env.kubeconfig = filepath.Join(tmp, "kubeconfig")
	if err := os.WriteFile(env.kubeconfig, kc, 0o600); err != nil {
		return err
	}
	served, err := servedFamilies(e)
	if err != nil {
		return err
	}
	env.world = newWorld(served)
	return nil
}

// requireSetUp fails a test whose environment could not be set up.
func requireSetUp(t *testing.T) {
	t.Helper()
	if env.world == nil || env.kubeconfig == "" {
		t.Fatal("the chaos environment was not set up (see the output of TestMain)")
	}
}

// servedFamilies are the IP families the cluster gives Services addresses
// of, as its ServiceCIDRs say: a dual-stack API server serves both, a
// single-stack one (BACKENDSLICE_TEST_STACK=single) IPv4 only, and the
// controller publishes no endpoint of a family that is not served.
func servedFamilies(e *framework.Env) (map[corev1.IPFamily]bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var list networkingv1.ServiceCIDRList
	// The API server creates its default ServiceCIDR moments after it starts.
	for {
		if err := e.Client.List(ctx, &list); err != nil {
			return nil, fmt.Errorf("listing ServiceCIDRs: %w", err)
		}
		if len(list.Items) > 0 {
			break
		}
		select {
		case <-ctx.Done():
			return nil, errors.New("the API server made no ServiceCIDR within 30s")
		case <-time.After(100 * time.Millisecond):
		}
	}
	served := map[corev1.IPFamily]bool{}
	for _, c := range list.Items {
		for _, cidr := range c.Spec.CIDRs {
			if isIPv6CIDR(cidr) {
				served[corev1.IPv6Protocol] = true
			} else {
				served[corev1.IPv4Protocol] = true
			}
		}
	}
	return served, nil
}

// buildBinary builds the controller from the repository root into dir, or
// returns -binary. Building here tests the code of this checkout, not
// whatever bin/backendslice was built from last.
func buildBinary(dir string) (string, error) {
	if *binary != "" {
		abs, err := filepath.Abs(*binary)
		if err != nil {
			return "", err
		}
		if _, err := os.Stat(abs); err != nil {
			return "", fmt.Errorf("-binary: %w", err)
		}
		env.built = "the binary " + abs + " (-binary)"
		return abs, nil
	}
	bin, built, err := replica.BuildCheckout(dir)
	env.built = built
	return bin, err
}
