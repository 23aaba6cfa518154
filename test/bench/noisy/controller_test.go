package noisy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/backendslice/backendslice/cmd/backendslice/wiring"
	"github.com/backendslice/backendslice/controllers"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// controllerNS is the controller's own namespace: its leader election
// lease lives there.
const controllerNS = "backendslice-system"

// leaseName is the Lease the manager holds while it leads
// (controllers.NewManager's LeaderElectionID).
const leaseName = "backendslice-controller.backendslice.io"

// binaryFlags are the controller's flags as the bench gives them: the
// binary's defaults (its lease timings, client limit, workers, slice
// floor; sources must name a BackendProvider) with leader election on, no
// listening ports, and the test's DNS server as the controller's own
// resolver (which no source may use: every source names a provider).
func binaryFlags(resolver string) (*wiring.ControllerFlags, controllers.ManagerOptions, error) {
	var f wiring.ControllerFlags
	fs := pflag.NewFlagSet("controller", pflag.ContinueOnError)
	f.Bind(fs)
	err := fs.Parse([]string{
		"--leader-elect", "--leader-election-namespace=" + controllerNS, "--controller-namespace=" + controllerNS,
		"--metrics-bind-address=0", "--health-probe-bind-address=0", "--dns-resolvers=" + resolver,
	})
	if err != nil {
		return nil, controllers.ManagerOptions{}, err
	}
	opts, err := f.ManagerOptions()
	return &f, opts, err
}

// managerExit is a manager that stopped on its own: it lost its lease
// or failed.
type managerExit struct {
	At  time.Time
	Err error
}

// controller runs the controller in the test process as the binary runs
// it, and starts it again whenever it exits on its own, as the kubelet
// would restart its container; each exit is recorded.
type controller struct {
	cfg    *rest.Config
	flags  *wiring.ControllerFlags
	opts   controllers.ManagerOptions
	cancel context.CancelFunc
	done   chan struct{}

	mu    sync.Mutex
	exits []managerExit
}

// running is the controller of the run, started before the tests.
var running *controller

// startController creates the controller's namespace and starts the
// controller against e's API server, its client's writes counted.
func startController(e *framework.Env, resolver string) error {
	err := e.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: controllerNS}})
	if err != nil {
		return fmt.Errorf("creating namespace %s: %w", controllerNS, err)
	}
	flags, opts, err := binaryFlags(resolver)
	if err != nil {
		return err
	}
	cfg := rest.CopyConfig(e.Config())
	cfg.Wrap(writes.Wrap)
	c := &controller{cfg: cfg, flags: flags, opts: opts, done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go c.supervise(ctx)
	running = c
	return nil
}

// supervise runs managers one after the other until ctx ends.
func (c *controller) supervise(ctx context.Context) {
	defer close(c.done)
	for ctx.Err() == nil {
		err := c.runOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		c.mu.Lock()
		c.exits = append(c.exits, managerExit{At: time.Now(), Err: err})
		c.mu.Unlock()
		// A crash loop would otherwise spin.
		time.Sleep(time.Second)
	}
}

// runOnce builds a manager with providers of its own, as a new process
// would, and runs it until it stops.
func (c *controller) runOnce(ctx context.Context) error {
	p, err := c.flags.NewProviders(ctx)
	if err != nil {
		return err
	}
	opts := wiring.WithProviders(c.opts, p)
	// Each manager registers its metrics anew, and a second one in this
	// process must pass controller-runtime's check of unique names.
	opts.MetricsRegistry = prometheus.NewRegistry()
	opts.SkipNameValidation = true
	mgr, err := controllers.NewManager(c.cfg, opts)
	if err != nil {
		return err
	}
	err = controllers.Run(ctx, mgr)
	if err == nil && ctx.Err() == nil {
		err = errors.New("the manager returned without an error")
	}
	return err
}

// exitsBetween are the exits of managers between from and to.
func (c *controller) exitsBetween(from, to time.Time) []managerExit {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []managerExit
	for _, e := range c.exits {
		if !e.At.Before(from) && !e.At.After(to) {
			out = append(out, e)
		}
	}
	return out
}

// stop stops the controller and waits for it.
func (c *controller) stop() {
	c.cancel()
	<-c.done
}
