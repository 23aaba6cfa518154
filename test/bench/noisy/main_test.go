// Package noisy measures how much one tenant slows every other tenant
// down: a victim namespace's latencies with nobody else busy, then under
// each class of attack in turn (label flips on many slices, DNS names that
// never answer, a storm of status writes and Warning events, lookups that
// fail and retry), side by side in one run on a real API server and the
// controller wired as the binary wires it, leader election on. Each victim
// change is timed twice: back to back (busy) and alone, seconds apart
// (quiet), which is where a change waits behind another tenant's queue.
package noisy

import (
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/backendslice/backendslice/test/controlplane"
	"github.com/backendslice/backendslice/test/dnstest"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

var (
	// The attacks.
	attacks         = flag.String("attacks", "flips,dns,storm,servfail", "the attacks to run, in order, comma-separated: flips, dns, storm, servfail")
	attackBackends  = flag.Int("backends", 8, "label flips: the attacker's backends")
	attackAddresses = flag.Int("addresses", 250, "label flips: static addresses of each attacker backend (at most 381: 198.51.100.1-254, 203.0.113.1-127)")
	flipPeriod      = flag.Duration("flip-period", 2*time.Second, "label flips: how often the attacker flips a label of spec.service.labels on every backend")
	dnsBackends     = flag.Int("dns-backends", 60, "slow DNS: the attacker's backends, each with a DNS name that never answers")
	dnsEditPeriod   = flag.Duration("dns-edit-period", 20*time.Second, "slow DNS: how often the attacker edits a label on every backend")
	stormBackends   = flag.Int("storm-backends", 60, "event and status storm: the attacker's backends, each with a refused address and an NXDOMAIN name")
	stormPeriod     = flag.Duration("storm-period", time.Second, "event and status storm: how often the attacker edits a label on every backend")
	servfailCount   = flag.Int("servfail-backends", 300, "SERVFAIL retries: the attacker's headless backends, each with a DNS name that answers SERVFAIL")
	warmup          = flag.Duration("warmup", 20*time.Second, "how long each attack runs before the victim is measured")
	settle          = flag.Duration("settle", 10*time.Second, "how long the run waits after each attack's backends are gone")
	attackFor       = flag.Duration("duration", 3*time.Minute, "most time each victim mode's measurements under one attack may take; rounds not started by then are skipped (the report says how many samples each latency has)")

	// The victim's measurements.
	creates          = flag.Int("creates", 100, "busy victim: creates to time in each phase")
	flips            = flag.Int("flips", 100, "busy victim: health flips to time in each phase (half to Unhealthy, half back)")
	revocations      = flag.Int("revocations", 40, "busy victim: revocations to time in each phase (re-admitted between)")
	quietCreates     = flag.Int("quiet-creates", 20, "quiet victim: creates to time in each phase")
	quietFlips       = flag.Int("quiet-flips", 20, "quiet victim: health flips to time in each phase")
	quietRevocations = flag.Int("quiet-revocations", 10, "quiet victim: revocations to time in each phase")
	quietGap         = flag.Duration("quiet-gap", 3*time.Second, "quiet victim: the pause before each of its changes")
	opTimeout        = flag.Duration("op-timeout", 5*time.Minute, "a victim change that has not reached the slices or status by then fails the test")
)

// clientQPS and clientBurst are the binary's default client-side limit
// on API requests, which the controller runs with.
var (
	clientQPS   float32
	clientBurst int
)

// writes counts the controller's writes by namespace and resource, from
// its own client's requests (events included).
var writes = framework.NewWriteCounter()

// resolver is the authoritative DNS server of the attackers' names.
var resolver *dnstest.Server

func TestMain(m *testing.M) {
	// The controller starts before m.Run, which would parse the flags.
	flag.Parse()
	os.Exit(run(m))
}

// run starts the DNS server, the control plane and the controller, runs
// the tests and stops everything.
func run(m *testing.M) int {
	var err error
	if resolver, err = dnstest.New(dnsZone); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = resolver.Stop() }()
	_, binary, err := binaryFlags(resolver.Addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	clientQPS, clientBurst = binary.KubeAPIQPS, binary.KubeAPIBurst
	return framework.Run(m, framework.Options{
		// The controller runs here, as the binary wires it, with leader
		// election on: the framework's own has it off.
		ControlPlaneOnly: true,
		// Every victim create and attacker backend takes a cluster IP and
		// keeps it for the run: the suites' /24 runs out. Allocations
		// only: nothing connects to these addresses.
		ServiceCIDRs: serviceCIDRs(),
		Started:      func(e *framework.Env) error { return startController(e, resolver.Addr) },
		Stopping: func() {
			if running != nil {
				running.stop()
			}
		},
	})
}

// serviceCIDRs are the suites' Service ranges of the stack under test,
// widened to /16 (and /108) so that a whole run's Services fit.
func serviceCIDRs() string {
	if os.Getenv(controlplane.StackEnv) == "single" {
		return "10.96.0.0/16"
	}
	return "10.96.0.0/16,fd00:10:96::/108"
}
