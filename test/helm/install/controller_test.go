package install

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/backendslice/backendslice/cmd/backendslice/wiring"
	"github.com/backendslice/backendslice/controllers"
	"github.com/backendslice/backendslice/controllers/externalbackend"
	"github.com/backendslice/backendslice/providers/static"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// The child process runs the controller when these are set.
const (
	// childKubeconfigEnv names the kubeconfig the controller uses: the
	// identity it runs as.
	childKubeconfigEnv = "BACKENDSLICE_HELMTEST_KUBECONFIG"
	// childLeaseNamespaceEnv is where it keeps its leader election lease.
	childLeaseNamespaceEnv = "BACKENDSLICE_HELMTEST_LEASE_NAMESPACE"
	// childMetricsAddressEnv is where it serves its metrics, over HTTPS
	// for tokens the API server authorizes, as by default.
	childMetricsAddressEnv = "BACKENDSLICE_HELMTEST_METRICS_ADDRESS"
	// podNamespaceEnv is the controller's own namespace, the only one whose
	// Secrets it reads: the chart sets it from the downward API, and the
	// parent sets it to the namespace whose Role grants them.
	podNamespaceEnv = "POD_NAMESPACE"
)

// stopGrace is how long an interrupted controller may take to exit before
// it is killed.
const stopGrace = controllers.ShutdownTimeout + 5*time.Second

// refusedPrefix starts each line in which the child reports a refused request.
const refusedPrefix = "refused "

// request is what the API server authorises: a verb on a resource
// (resource/subresource) of an API group ("" is the core group).
type request struct{ verb, group, resource string }

func (r request) String() string {
	group := r.group
	if group == "" {
		group = "core"
	}
	return fmt.Sprintf("%s %s (%s)", r.verb, r.resource, group)
}

// forbiddenMessage is how the API server's authoriser words a refusal:
// User "..." cannot <verb> resource "<resource>" in API group "<group>" ...
// The quotes are escaped when the body is JSON rather than protobuf.
var forbiddenMessage = regexp.MustCompile(`cannot ([a-z]+) resource \\?"([^"\\]+)\\?" in API group \\?"([^"\\]*)\\?"`)

// runChildController is the child process: it runs the controller, wired as
// the binary wires it, with the identity of kubeconfig and leader election
// in leaseNamespace, and prints every request the API server refuses on
// stdout until it is interrupted.
func runChildController(kubeconfig, leaseNamespace string) int {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.InfoLevel)))
	if err := runController(kubeconfig, leaseNamespace); err != nil {
		fmt.Fprintln(os.Stderr, "controller:", err)
		return 1
	}
	return 0
}

// childConfig is the controller's configuration in the child: the tests'
// defaults, with every setting the chart's grants exist for turned on, so
// that each grant is exercised.
func childConfig() externalbackend.Config {
	c := framework.TestConfig()
	// The scenarios written before BackendProviders publish sources that
	// name none, as an install migrating from 0.1 does.
	c.AllowSourcesWithoutProvider = true
	// The Secrets BackendProviders name are read here, as the chart's
	// Deployment says: list and watch on Secrets in this namespace alone.
	c.Namespace = os.Getenv(podNamespaceEnv)
	// The Nodes' Pod ranges are denied (TestConfig), as
	// controller.denyPodCIDRs does by default; Nodes are read anyway: their
	// addresses are always denied.
	return c
}

// runController runs the manager of the binary, with the static provider,
// until the process is interrupted.
func runController(kubeconfig, leaseNamespace string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return reportRefusals{next: rt} })
	reg, err := wiring.Kinds().NewRegistry(static.New())
	if err != nil {
		return err
	}
	mgr, err := controllers.NewManager(cfg, controllers.ManagerOptions{
		MetricsBindAddress:      os.Getenv(childMetricsAddressEnv),
		MetricsSecure:           true,
		HealthProbeBindAddress:  "0",
		LeaderElection:          true,
		LeaderElectionNamespace: leaseNamespace,
		Config:                  childConfig(),
		Providers:               reg,
	})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return controllers.Run(ctx, mgr)
}

// reportRefusals prints, on stdout, each request the API server refuses
// (HTTP 403), as the authoriser named it.
type reportRefusals struct{ next http.RoundTripper }

func (r reportRefusals) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusForbidden {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if m := forbiddenMessage.FindSubmatch(body); m != nil {
		fmt.Printf("%s%s\t%s\t%s\n", refusedPrefix, m[1], m[3], m[2])
	} else {
		// Refused by something other than the authoriser: report the
		// request as it was sent.
		fmt.Printf("%s%s\t?\t%s\n", refusedPrefix, req.Method, req.URL.Path)
	}
	return resp, err
}

// controllerProcess is the controller running in a child process.
type controllerProcess struct {
	cmd    *exec.Cmd
	output lockedBuffer
	exited chan struct{}
	// metrics is the address of its metrics endpoint.
	metrics string

	mu      sync.Mutex
	refused []request
	exitErr error
}

// startController runs the controller as id in namespace, the release
// namespace it would be installed in (its lease and the Secrets it reads),
// until the test ends. env adds to the child's environment.
func startController(t *testing.T, id identity, namespace string, env ...string) *controllerProcess {
	t.Helper()
	p := &controllerProcess{exited: make(chan struct{}), metrics: freeAddress(t)}
	p.cmd = exec.Command(os.Args[0])
	p.cmd.Env = append(os.Environ(),
		childKubeconfigEnv+"="+framework.WriteKubeconfig(t, id.config()),
		childMetricsAddressEnv+"="+p.metrics,
		childLeaseNamespaceEnv+"="+namespace,
		podNamespaceEnv+"="+namespace)
	p.cmd.Env = append(p.cmd.Env, env...)
	p.cmd.Stderr = &p.output
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go p.read(stdout)
	t.Cleanup(func() {
		// controller-runtime's manager (v0.25.2) waits without end for
		// the informers it starts before any controller (the
		// ExternalBackends', which has an index) when one can never list,
		// and on interrupt keeps waiting: controllers.Run returns anyway,
		// so that a controller missing a right still stops on SIGTERM.
		if !p.stop(stopGrace) {
			t.Errorf("the controller did not exit within %s of an interrupt: killed", stopGrace)
		}
		if t.Failed() {
			t.Logf("controller (as %s) output:\n%s", id.user(), p.output.String())
		}
	})
	return p
}

// read records the refusals the child reports, then waits for it to exit.
func (p *controllerProcess) read(stdout io.Reader) {
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		fields := strings.Split(strings.TrimPrefix(sc.Text(), refusedPrefix), "\t")
		if !strings.HasPrefix(sc.Text(), refusedPrefix) || len(fields) != 3 {
			fmt.Fprintf(&p.output, "unexpected output: %s\n", sc.Text())
			continue
		}
		p.mu.Lock()
		p.refused = append(p.refused, request{verb: fields[0], group: fields[1], resource: fields[2]})
		p.mu.Unlock()
	}
	err := p.cmd.Wait()
	p.mu.Lock()
	p.exitErr = err
	p.mu.Unlock()
	close(p.exited)
}

// stop interrupts the controller, which releases its lease, and waits for
// it; one that has not exited within grace is killed. It says whether the
// controller exited on its own.
func (p *controllerProcess) stop(grace time.Duration) bool {
	return stopProcess(p.cmd.Process, p.exited, os.Interrupt, grace)
}

// stopProcess sends sig to proc, which closes exited when it has exited,
// and waits for it; one that has not exited within grace is killed. It
// says whether the process exited on its own.
func stopProcess(proc *os.Process, exited <-chan struct{}, sig os.Signal, grace time.Duration) bool {
	select {
	case <-exited:
		return true
	default:
	}
	_ = proc.Signal(sig)
	select {
	case <-exited:
		return true
	case <-time.After(grace):
	}
	_ = proc.Kill()
	<-exited
	return false
}

// refusals are the requests the API server has refused the controller so far.
func (p *controllerProcess) refusals() []request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.refused)
}

// waitRefused waits until the API server has refused req.
func (p *controllerProcess) waitRefused(t *testing.T, req request) {
	t.Helper()
	framework.Eventually(t, framework.Timeout, "the API server refusing "+req.String(), func() error {
		got := p.refusals()
		if slices.Contains(got, req) {
			return nil
		}
		if exited, err := p.exit(); exited {
			why := "status 0"
			if err != nil {
				why = err.Error()
			}
			return fmt.Errorf("the controller exited (%s); refused so far: %v", why, got)
		}
		return fmt.Errorf("refused so far: %v", got)
	})
}

// waitExit waits until the controller exits on its own, and says why.
func (p *controllerProcess) waitExit(t *testing.T) error {
	t.Helper()
	framework.Eventually(t, framework.Timeout, "the controller exiting", func() error {
		if exited, _ := p.exit(); !exited {
			return errors.New("still running")
		}
		return nil
	})
	_, err := p.exit()
	return err
}

// exit says whether the controller has exited, and its error if it failed.
func (p *controllerProcess) exit() (bool, error) {
	select {
	case <-p.exited:
	default:
		return false, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return true, p.exitErr
}

// lockedBuffer is a buffer the child's stderr and the reader share.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
