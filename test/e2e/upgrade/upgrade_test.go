package upgrade_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/controllers"
	"github.com/backendslice/backendslice/test/controlplane"
	"github.com/backendslice/backendslice/test/docsection"
	"github.com/backendslice/backendslice/test/e2e/framework"
	"github.com/backendslice/backendslice/test/netlab"
	"github.com/backendslice/backendslice/test/replica"
)

// How long the flips run before the upgrade starts (the times to compare
// with) and after the new leader took over.
const (
	flipsBefore = 5 * time.Second
	flipsAfter  = 5 * time.Second
)

// convergeTimeout bounds each wait for the slices to publish what the
// sources say. It is a safety bound for a stuck controller, not a
// measurement: the measured times go to the report.
const convergeTimeout = 90 * time.Second

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

// build is a controller binary and what it was built from, for the
// report; commit is set for one built from a git revision.
type build struct{ path, built, commit string }

// TestRollingUpgrade upgrades two replicas of the controller as the chart's
// rolling update does (maxSurge 1, maxUnavailable 0): a new replica starts
// and is Ready as a standby, then an old one gets SIGTERM and exits, then
// the second new one starts, then the second old one stops. The old
// replicas run -previous's binary (this checkout's when unset), the new
// ones this checkout's, with the chart's lease flags. Meanwhile a Consul
// check flips every -flip-period (one instance always passing), a client
// on the lab's node connects to the flipped backend's cluster IP every
// 5 ms through kube-proxy, and a watch sees every write to the
// namespace's slices, Services, ExternalBackends and Lease. It checks that
// no endpoint ever leaves (nor turns not ready) at any write, that the
// slices and Services get no write but the flips' own, that every flip
// reaches the slices, that no connection fails, and that each stopped
// leader released its lease; the times go to the log and (with -report)
// to the upgrade section of docs/benchmarks.md.
//
// With -baseline, each upgrade runs a second time right after, to the
// baseline's controller instead of this checkout's: the same upgrades on
// the same machine at nearly the same time, side by side in the report.
func TestRollingUpgrade(t *testing.T) {
	requireSetUp(t)
	load := docsection.LoadAverage()
	prev := previousBinary(t)
	targets := []build{{path: env.bin, built: env.built}}
	if *baseline != "" {
		targets = append(targets, revisionBinary(t, *baseline, "baseline"))
	}
	var results []upgradeResult
	for i := range *upgrades {
		order := []string{leaderFirst, standbyFirst}[i%2]
		for k, next := range targets {
			name := fmt.Sprintf("%d %s", i+1, order)
			if k > 0 {
				name += " baseline"
			}
			t.Run(name, func(t *testing.T) {
				res := upgradeOnce(t, i*len(targets)+k, prev, next, order)
				res.baseline = k > 0
				results = append(results, res)
			})
		}
	}
	md := upgradeMarkdown(prev, targets, results, load, docsection.LoadAverage())
	t.Logf("rolling upgrades:\n%s", md)
	if *report != "" && !t.Failed() {
		if err := docsection.Replace(*report, "upgrade", md); err != nil {
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
	b := revisionBinary(t, *previous, "previous")
	b.built = fmt.Sprintf("the controller of %s (its chart's appVersion), built from commit %s", b.built, b.commit)
	return b
}

// revisionBinary builds the controller of git revision rev from its git
// tree; built says the release its chart names.
func revisionBinary(t *testing.T, rev, what string) build {
	t.Helper()
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
	commit := strings.TrimSpace(string(git("rev-parse", "--short", rev+"^{commit}")))
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
	out := filepath.Join(t.TempDir(), "backendslice-"+what)
	start := time.Now()
	compile := exec.Command("go", "build", "-o", out, pkg)
	compile.Dir = src
	if b, err := compile.CombinedOutput(); err != nil {
		t.Fatalf("building %s of commit %s: %v\n%s", pkg, commit, err, b)
	}
	t.Logf("built the controller of %s (commit %s) in %s", rev, commit, time.Since(start).Round(100*time.Millisecond))
	return build{path: out, built: appVersion(t, src), commit: commit}
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

// upgradeOnce runs one rolling upgrade from prev to next in a namespace of
// its own.
func upgradeOnce(t *testing.T, round int, prev, next build, order string) upgradeResult {
	ns := namespace(t)
	p := fmt.Sprintf("u%d", round)
	var hostAddrs []string
	for _, h := range env.hosts {
		hostAddrs = append(hostAddrs, h.Addr4.String())
	}
	flip, err := replica.NewFlipper(agentChecks{env.consul}, ns, p+"-flip", hostAddrs...)
	if err != nil {
		t.Fatal(err)
	}
	create(t, replica.Backend(ns, flip.Name, 2*time.Second, replica.ConsulSource("catalog", flip.Name)))
	dnsName := p + "-a." + dnsZone
	env.dns.Set(dnsName, mdns.TypeA, 1, "203.0.113.250")
	env.dns.Set(dnsName, mdns.TypeAAAA, 1, "2001:db8:7::ffff")
	create(t, replica.Backend(ns, p+"-dns", 2*time.Second, replica.DNSSource("name", dnsName)))
	for j := range *upgradeBackends {
		create(t, replica.Backend(ns, fmt.Sprintf("%s-static-%d", p, j), 2*time.Second,
			replica.StaticSource("vms", fmt.Sprintf("203.0.113.%d", 1+j%100), fmt.Sprintf("203.0.113.%d", 101+j%100), ip6(j))))
	}
	expected := expectedAddresses(t, ns)
	flags := []string{"--leader-elect", "--leader-election-namespace", ns}
	old := []*replica.Replica{newReplica(t, "old-a", flags...), newReplica(t, "old-b", flags...)}
	for _, r := range old {
		r.Bin = prev.path
		r.Start()
		replica.WaitLeader(t, old[:1]) // old-a leads, as the older Pod does
	}
	converge(t, ns, expected, flip)
	addr := clusterIP(t, ns, flip.Name)

	rec, err := record(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.stop()
	client := env.lab.Node.StartClient(addr, netlab.DefaultClientLimits())
	defer client.Stop()
	stopFlips := flip.FlipEvery(*flipPeriod, 1)
	time.Sleep(flipsBefore)
	u := upgradeRun{order: order, start: time.Now(), expected: expected}
	u.steps = rollOut(t, ns, old, next, order, append(flags, chartLeaseFlags()...))
	time.Sleep(flipsAfter)
	u.end = time.Now()
	if err := stopFlips(); err != nil {
		t.Error(err)
	}
	converge(t, ns, expected, flip)
	caughtUp(t, ns)
	// The watch sees the last writes a moment after the check read them.
	time.Sleep(time.Second)
	res := u.analyse(rec.seen(), flipped{name: flip.Name, addrs: flip.Addrs, flips: flip.Recorded()})
	res.traffic = client.Stop()
	res.check(t)
	return res
}

// namespace creates a namespace for t whose backends, Services and slices
// are removed when t ends, after its controllers are killed (cleanups run
// last-registered first, and replicas are made after this), so that the
// next upgrade's controllers do not reconcile them.
func namespace(t *testing.T) string {
	t.Helper()
	requireSetUp(t)
	ns := framework.Namespace(t)
	t.Cleanup(func() {
		if err := replica.EmptyNamespace(ns); err != nil {
			t.Errorf("cleaning namespace %s: %v", ns, err)
		}
	})
	return ns
}

// newReplica prepares a controller of this checkout with the test's flags
// and extra ones; Start runs it.
func newReplica(t *testing.T, name string, extra ...string) *replica.Replica {
	t.Helper()
	return replica.New(t, replica.Options{Name: name, Bin: env.bin, Args: append(controllerFlags(), extra...)})
}

// create creates a backend or fails the test.
func create(t *testing.T, xb client.Object) {
	t.Helper()
	framework.Create(t, xb)
}

// ip6 is address i of 2001:db8:7::/64, a documentation range outside the
// lab's networks.
func ip6(i int) string {
	return netip.MustParseAddr(fmt.Sprintf("2001:db8:7::%x", i+1)).String()
}

// clusterIP is the IPv4 cluster IP of Service svc of ns, with the app
// port, once a client on the node reaches a host through it.
func clusterIP(t *testing.T, ns, svc string) string {
	t.Helper()
	s := &corev1.Service{}
	if err := framework.E().Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: svc}, s); err != nil {
		t.Fatal(err)
	}
	var addr string
	for _, ip := range s.Spec.ClusterIPs {
		if !strings.Contains(ip, ":") {
			addr = netlab.HostPort(ip, 80)
		}
	}
	if addr == "" {
		t.Fatalf("Service %s/%s has no IPv4 cluster IP: %v", ns, svc, s.Spec.ClusterIPs)
	}
	framework.Eventually(t, convergeTimeout, "kube-proxy serving "+addr, func() error {
		_, err := env.lab.Node.AskTCP(addr, time.Second)
		return err
	})
	return addr
}

// expectedAddresses are the addresses each Service of ns must publish:
// what the sources report (of the families the cluster serves), which only
// health flips change here.
func expectedAddresses(t *testing.T, ns string) map[string]map[string]bool {
	t.Helper()
	out := map[string]map[string]bool{}
	var list v1alpha1.ExternalBackendList
	if err := framework.E().Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, xb := range list.Items {
		var addrs []string
		for _, src := range xb.Spec.Sources {
			switch {
			case src.Static != nil:
				for _, e := range src.Static.Endpoints {
					addrs = append(addrs, e.Address)
				}
			case src.DNS != nil:
				addrs = append(addrs, "203.0.113.250", "2001:db8:7::ffff")
			case src.Consul != nil:
				for _, h := range env.hosts {
					addrs = append(addrs, h.Addr4.String())
				}
			}
		}
		set := map[string]bool{}
		for _, a := range framework.Served(addrs...) {
			set[a] = true
		}
		out[xb.Name] = set
	}
	return out
}

// converge waits until every Service of ns publishes each address its
// sources report once, ready, or for the flipped backend as its check is
// now.
func converge(t *testing.T, ns string, expected map[string]map[string]bool, f *replica.Flipper) {
	t.Helper()
	framework.Eventually(t, convergeTimeout, "the slices of "+ns+" publishing what the sources say", func() error {
		var list discoveryv1.EndpointSliceList
		if err := framework.E().Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return err
		}
		r := replay{slices: map[string]*discoveryv1.EndpointSlice{}}
		for i := range list.Items {
			r.slices[list.Items[i].Name] = &list.Items[i]
		}
		for svc, addrs := range expected {
			for a := range addrs {
				want := true
				if svc == f.Name {
					want = f.Serving(slices.Index(f.Addrs, a))
				}
				if ready, _, n := r.published(svc, a); n != 1 || ready != want {
					return fmt.Errorf("Service %s: %s in %d slices, ready=%t, want once and ready=%t", svc, a, n, ready, want)
				}
			}
		}
		return nil
	})
}

// caughtUp waits until every backend's status shows what this version
// writes: readyEndpoints, which the previous release did not write, is
// its endpoints' ready and total counts. A new leader may write it after
// the flips (it waits behind every change), and the report counts those
// writes too.
func caughtUp(t *testing.T, ns string) {
	t.Helper()
	framework.Eventually(t, convergeTimeout, "the statuses of "+ns+" caught up", func() error {
		var list v1alpha1.ExternalBackendList
		if err := framework.E().Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return err
		}
		behind := 0
		for _, xb := range list.Items {
			if xb.Status.ReadyEndpoints != fmt.Sprintf("%d/%d", xb.Status.Endpoints.Ready, xb.Status.Endpoints.Total) {
				behind++
			}
		}
		if behind > 0 {
			return fmt.Errorf("%d of %d backends show no readyEndpoints of their counts", behind, len(list.Items))
		}
		return nil
	})
}

// chartLeaseFlags are the lease flags the chart passes with its defaults.
func chartLeaseFlags() []string {
	return []string{
		"--leader-elect-lease-duration=" + controllers.DefaultLeaseDuration.String(),
		"--leader-elect-renew-deadline=" + controllers.DefaultRenewDeadline.String(),
		"--leader-elect-retry-period=" + controllers.DefaultRetryPeriod.String(),
	}
}

// step is one action of the rollout, timed.
type step struct {
	at   time.Time
	what string
	// signal is set on the SIGTERM of a leader: the handovers are timed
	// from it.
	signal bool
}

// rollOut replaces the old replicas (old[0] leads) by two of next, as a
// Deployment's rolling update with maxSurge 1 and maxUnavailable 0 does:
// start a new replica, wait until it is Ready (while standing by), stop
// an old one (SIGTERM, waiting for it to exit), and again. order says
// which old replica goes first.
func rollOut(t *testing.T, ns string, old []*replica.Replica, next build, order string, flags []string) []step {
	t.Helper()
	victims := []*replica.Replica{old[0], old[1]}
	if order == standbyFirst {
		victims = []*replica.Replica{old[1], old[0]}
	}
	var steps []step
	var fresh []*replica.Replica
	for k, victim := range victims {
		n := newReplica(t, fmt.Sprintf("new-%d", k+1), flags...)
		n.Bin = next.path
		steps = append(steps, step{at: time.Now(), what: "start " + n.Name})
		n.Start()
		fresh = append(fresh, n)
		time.Sleep(readinessDelay)
		framework.Eventually(t, 60*time.Second, n.Name+" Ready while standing by (a rolling update waits for it)", func() error {
			if !n.Ready() {
				return fmt.Errorf("/readyz of %s does not pass", n.Name)
			}
			return nil
		})
		steps = append(steps, step{at: time.Now(), what: n.Name + " Ready"})
		steps = append(steps, stopReplica(t, ns, victim)...)
	}
	replica.WaitLeader(t, fresh)
	steps = append(steps, step{at: time.Now(), what: "a new replica leads"})
	return steps
}

// stopReplica sends r SIGTERM as the kubelet does, waits for it to exit,
// and checks that it exited cleanly and, if it led, released its lease.
func stopReplica(t *testing.T, ns string, r *replica.Replica) []step {
	t.Helper()
	m := r.MustScrape()
	holder := ptr.Deref(replica.ReadLease(t, ns).Spec.HolderIdentity, "")
	what := r.Name + " (standby)"
	if m.Leader() {
		what = r.Name + " (leader)"
	}
	at := r.Terminate()
	steps := []step{{at: at, what: "SIGTERM " + what, signal: m.Leader()}}
	exited, err := r.Wait(replica.TerminationGrace)
	if err != nil {
		t.Errorf("controller %s exited with %v after SIGTERM, want a clean exit; end of its log:\n%s", r.Name, err, r.LogTail(3000))
	}
	if now := ptr.Deref(replica.ReadLease(t, ns).Spec.HolderIdentity, ""); m.Leader() && now == holder {
		t.Errorf("controller %s exited after SIGTERM still holding the lease (%s): it did not release it", r.Name, holder)
	}
	return append(steps, step{at: exited, what: r.Name + " exited"})
}
