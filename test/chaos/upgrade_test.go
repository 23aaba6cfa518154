package chaos_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/backendslice/backendslice/controllers"
	"github.com/backendslice/backendslice/test/controlplane"
	"github.com/backendslice/backendslice/test/docsection"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// How long the flips run before the upgrade starts (the times to compare
// with) and after the new leader took over.
const (
	flipsBefore = 5 * time.Second
	flipsAfter  = 5 * time.Second
)

// readinessDelay is the chart's readinessProbe initialDelaySeconds: the
// kubelet first probes a new Pod that long after it started, so a rolling
// update stops an old Pod no sooner. (Stopping it at once would time the
// new replica's first look at the lease rather than its steady polling.)
const readinessDelay = 5 * time.Second

// The two orders a rolling update can stop the old Pods in: the
// ReplicaSet controller picks which old Pod goes first, and the leader
// may be either.
const (
	leaderFirst  = "old leader stopped first"
	standbyFirst = "old standby stopped first"
)

// build is a controller binary and what it was built from, for the report.
type build struct{ path, built string }

// TestRollingUpgrade upgrades two replicas of the controller as the chart's
// rolling update does (maxSurge 1, maxUnavailable 0): a new replica starts
// and is Ready as a standby, then an old one gets SIGTERM and exits, then
// the second new one starts, then the second old one stops. The old
// replicas run -previous's binary (this checkout's when unset), the new
// ones this checkout's, with the chart's lease flags. Meanwhile a Consul
// check flips every -flip-period, and a watch sees every write to the
// namespace's slices, Services, ExternalBackends and Lease. It checks that
// no endpoint ever leaves (nor turns not ready) at any write, that the
// slices and Services get no write but the flips' own, that every flip
// reaches the slices, and that each stopped leader released its lease;
// the times go to the log and (with -upgrade-report) to the upgrade
// section of docs/benchmarks.md.
func TestRollingUpgrade(t *testing.T) {
	requireSetUp(t)
	prev := previousBinary(t)
	var results []upgradeResult
	for i := range *upgrades {
		order := []string{leaderFirst, standbyFirst}[i%2]
		t.Run(fmt.Sprintf("%d %s", i+1, order), func(t *testing.T) {
			results = append(results, upgradeOnce(t, i, prev, order))
		})
	}
	md := upgradeMarkdown(prev, results)
	t.Logf("rolling upgrades:\n%s", md)
	if *upgradeReport != "" && !t.Failed() {
		if err := docsection.Replace(*upgradeReport, "upgrade", md); err != nil {
			t.Fatal(err)
		}
	}
}

// previousBinary builds the controller of -previous from its git tree,
// or returns this checkout's.
func previousBinary(t *testing.T) build {
	t.Helper()
	if *previous == "" {
		return build{path: env.bin, built: "this checkout's binary (a rolling restart: no -previous)"}
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	git := func(args ...string) []byte {
		cmd := exec.Command("git", args...)
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("git %s: %v", strings.Join(args, " "), err)
		}
		return out
	}
	commit := strings.TrimSpace(string(git("rev-parse", "--short", *previous+"^{commit}")))
	src := t.TempDir()
	archive := exec.Command("sh", "-c", `git archive "$1" | tar -x -C "$2"`, "sh", commit, src)
	archive.Dir = root
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("extracting %s: %v\n%s", commit, err, out)
	}
	// The binary's main package moved to cmd/backendslice after 0.2.0.
	pkg := "."
	if _, err := os.Stat(filepath.Join(src, "cmd", "backendslice")); err == nil {
		pkg = "./cmd/backendslice"
	}
	out := filepath.Join(t.TempDir(), "backendslice-previous")
	start := time.Now()
	compile := exec.Command("go", "build", "-o", out, pkg)
	compile.Dir = src
	if b, err := compile.CombinedOutput(); err != nil {
		t.Fatalf("building %s of commit %s: %v\n%s", pkg, commit, err, b)
	}
	t.Logf("built the controller of %s (commit %s) in %s", *previous, commit, time.Since(start).Round(100*time.Millisecond))
	return build{path: out, built: fmt.Sprintf("the controller of %s (its chart's appVersion), built from commit %s", appVersion(t, src), commit)}
}

// appVersion is the appVersion of the chart in the source tree src: the
// release its binary is.
func appVersion(t *testing.T, src string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(src, "charts", "backendslice", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "appVersion:"); ok {
			return strings.Trim(strings.TrimSpace(v), `"'`)
		}
	}
	t.Fatalf("%s/charts/backendslice/Chart.yaml has no appVersion", src)
	return ""
}

// upgradeOnce runs one rolling upgrade in a namespace of its own.
func upgradeOnce(t *testing.T, round int, prev build, order string) upgradeResult {
	ns := namespace(t)
	p := fmt.Sprintf("u%d", round)
	flip := newFlipper(t, ns, p+"-flip", 4)
	dnsName := p + "-a." + dnsZone
	env.world.setDNS(dnsName, ip4(1, 0), ip6(2, 0))
	env.world.createBackend(t, backend(ns, p+"-dns", 2*time.Second, dnsSource("name", dnsName)))
	for j := range *upgradeBackends {
		env.world.createBackend(t, backend(ns, fmt.Sprintf("%s-static-%d", p, j), 2*time.Second,
			staticSource("vms", ip4(0, j%200), ip4(1, 1+j%200), ip6(1, j))))
	}
	flags := []string{"--leader-elect", "--leader-election-namespace", ns}
	old := []*replica{newReplica(t, "old-a", flags...), newReplica(t, "old-b", flags...)}
	start := time.Now()
	for _, r := range old {
		r.bin = prev.path
		r.start()
		waitLeader(t, old[:1]) // old-a leads, as the older Pod does
	}
	converge(t, "", start, ns)

	rec, err := record(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.stop()
	stopFlips := flip.flipEvery(*flipPeriod)
	time.Sleep(flipsBefore)
	u := upgradeRun{order: order, start: time.Now(), expected: expectedAddresses(ns)}
	u.steps = rollOut(t, ns, old, order, append(flags, chartLeaseFlags()...))
	time.Sleep(flipsAfter)
	u.end = time.Now()
	if err := stopFlips(); err != nil {
		t.Error(err)
	}
	converge(t, "", u.end, ns)
	// The watch sees the last writes a moment after the check read them.
	time.Sleep(time.Second)
	res := u.analyse(rec.seen(), flip)
	res.check(t)
	return res
}

// chartLeaseFlags are the lease flags the chart passes with its defaults.
func chartLeaseFlags() []string {
	return []string{
		"--leader-elect-lease-duration=" + controllers.DefaultLeaseDuration.String(),
		"--leader-elect-renew-deadline=" + controllers.DefaultRenewDeadline.String(),
		"--leader-elect-retry-period=" + controllers.DefaultRetryPeriod.String(),
	}
}

// expectedAddresses are the addresses each Service of ns must publish:
// what the sources report, which only health flips change here.
func expectedAddresses(ns string) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, k := range env.world.keys(ns) {
		want, xb := env.world.expected(k)
		set := map[string]bool{}
		for a := range want {
			set[a] = true
		}
		out[serviceName(xb)] = set
	}
	return out
}

// step is one action of the rollout, timed.
type step struct {
	at   time.Time
	what string
	// signal is set on the SIGTERM of a leader: the handovers are timed
	// from it.
	signal bool
}

// rollOut replaces the old replicas (old[0] leads) by two new ones, as a
// Deployment's rolling update with maxSurge 1 and maxUnavailable 0 does:
// start a new replica, wait until it is Ready (while standing by), stop
// an old one (SIGTERM, waiting for it to exit), and again. order says
// which old replica goes first.
func rollOut(t *testing.T, ns string, old []*replica, order string, flags []string) []step {
	t.Helper()
	victims := []*replica{old[0], old[1]}
	if order == standbyFirst {
		victims = []*replica{old[1], old[0]}
	}
	var steps []step
	var fresh []*replica
	for k, victim := range victims {
		n := newReplica(t, fmt.Sprintf("new-%d", k+1), flags...)
		steps = append(steps, step{at: time.Now(), what: "start " + n.name})
		n.start()
		fresh = append(fresh, n)
		time.Sleep(readinessDelay)
		framework.Eventually(t, 60*time.Second, n.name+" Ready while standing by (a rolling update waits for it)", func() error {
			if !n.ready() {
				return fmt.Errorf("/readyz of %s does not pass", n.name)
			}
			return nil
		})
		steps = append(steps, step{at: time.Now(), what: n.name + " Ready"})
		steps = append(steps, stopReplica(t, ns, victim)...)
	}
	waitLeader(t, fresh)
	steps = append(steps, step{at: time.Now(), what: "a new replica leads"})
	return steps
}

// stopReplica sends r SIGTERM as the kubelet does, waits for it to exit,
// and checks that it exited cleanly and, if it led, released its lease.
func stopReplica(t *testing.T, ns string, r *replica) []step {
	t.Helper()
	m := r.mustScrape()
	holder := ptr.Deref(readLease(t, ns).Spec.HolderIdentity, "")
	what := r.name + " (standby)"
	if m.leader() {
		what = r.name + " (leader)"
	}
	at := r.terminate()
	steps := []step{{at: at, what: "SIGTERM " + what, signal: m.leader()}}
	exited, err := r.wait(terminationGrace)
	if err != nil {
		t.Errorf("controller %s exited with %v after SIGTERM, want a clean exit; end of its log:\n%s", r.name, err, r.logTail(3000))
	}
	if now := ptr.Deref(readLease(t, ns).Spec.HolderIdentity, ""); m.leader() && now == holder {
		t.Errorf("controller %s exited after SIGTERM still holding the lease (%s): it did not release it", r.name, holder)
	}
	return append(steps, step{at: exited, what: r.name + " exited"})
}
