// Package noisy measures how much one tenant that churns its backends slows
// every other tenant down: a victim namespace's latencies with the attacker
// quiet, then with it attacking, side by side in one run on a real API
// server and the controller wired as the binary wires it.
package noisy

import (
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/backendslice/backendslice/controllers/externalbackend"
	"github.com/backendslice/backendslice/internal/cli"
	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/providers/static"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

var (
	// The attack.
	attackBackends  = flag.Int("backends", 8, "the attacker's backends")
	attackAddresses = flag.Int("addresses", 250, "static addresses of each attacker backend (at most 381: 198.51.100.1-254, 203.0.113.1-127)")
	flipPeriod      = flag.Duration("flip-period", 2*time.Second, "how often the attacker flips a label of spec.service.labels on every backend")
	warmup          = flag.Duration("warmup", 10*time.Second, "how long the attack runs before the first victim measurement")
	attackFor       = flag.Duration("duration", 15*time.Minute, "most time the measurements under attack may take; rounds not started by then are skipped (the report says how many samples each latency has)")

	// The victim's measurements.
	creates     = flag.Int("creates", 100, "victim creates to time in each phase")
	flips       = flag.Int("flips", 100, "victim health flips to time in each phase (half to Unhealthy, half back)")
	revocations = flag.Int("revocations", 40, "victim revocations to time in each phase (re-admitted between)")
	opTimeout   = flag.Duration("op-timeout", 5*time.Minute, "a victim change that has not reached the slices or status by then fails the test")
)

// clientQPS and clientBurst are the binary's default client-side limit
// on API requests, which the controller runs with.
var (
	clientQPS   float32
	clientBurst int
)

// writes counts the controller's writes to EndpointSlices and Services by
// namespace, from its own client's requests.
var writes = framework.NewWriteCounter()

func TestMain(m *testing.M) {
	// The controller starts before m.Run, which would parse the flags.
	flag.Parse()
	// The binary's client-side limit on API requests: envtest's own is so
	// high that no tenant's request would ever queue behind another's.
	binary, err := cli.OptionsFromArgs(nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	clientQPS, clientBurst = binary.KubeAPIQPS, binary.KubeAPIBurst
	os.Exit(framework.Run(m, framework.Options{
		KubeAPIQPS:   clientQPS,
		KubeAPIBurst: clientBurst,
		Providers: func(providers.Waker) ([]providers.Provider, error) {
			return []providers.Provider{static.New()}, nil
		},
		Config: func(c *externalbackend.Config) {
			// As the chart installs it: sources must name a BackendProvider,
			// and a slice holds at least --min-endpoints-per-slice's
			// default of 10 endpoints.
			c.AllowSourcesWithoutProvider = false
			c.MinEndpointsPerSlice = 10
		},
		WrapTransport: writes.Wrap,
	}))
}
