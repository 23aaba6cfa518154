package chaos_test

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/backendslice/backendslice/controllers"
)

// faultStats are the figures of one kind of fault over a run.
type faultStats struct {
	injected int
	// longest is the longest time from a fault to the first check that
	// found every invariant holding.
	longest time.Duration
	// unconverged counts injections after which the invariants never held.
	unconverged int
	// counts are the broken invariants found at the end of injections
	// that did not converge, and while a provider was down.
	counts map[category]int
	notes  []string
}

// ledger collects the figures of the run for the report.
type ledger struct {
	mu        sync.Mutex
	order     []string
	faults    map[string]*faultStats
	handovers []handover
}

func newLedger() *ledger { return &ledger{faults: map[string]*faultStats{}} }

func (l *ledger) stats(fault string) *faultStats {
	s := l.faults[fault]
	if s == nil {
		s = &faultStats{counts: map[category]int{}}
		l.faults[fault] = s
		l.order = append(l.order, fault)
	}
	return s
}

// injected records one injection of fault: how long the invariants took
// to hold again (took < 0: they never did) and what was still broken.
func (l *ledger) injected(fault string, took time.Duration, v verdict) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.stats(fault)
	s.injected++
	if took < 0 {
		s.unconverged++
	} else {
		s.longest = max(s.longest, took)
	}
	for _, x := range v.violations {
		s.counts[x.cat]++
	}
}

// broken adds invariants found broken during fault (while it lasted,
// rather than after it).
func (l *ledger) broken(fault string, vs []violation) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.stats(fault)
	for _, x := range vs {
		s.counts[x.cat]++
	}
}

// note adds a figure of fault that the table has no column for.
func (l *ledger) note(fault, format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.stats(fault)
	s.notes = append(s.notes, fmt.Sprintf(format, args...))
}

// handedOver records the times of one leader handover.
func (l *ledger) handedOver(h handover) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.handovers = append(l.handovers, h)
}

// handoverTable renders the handovers, one row each, in the order made.
func (l *ledger) handoverTable(b *strings.Builder) {
	if len(l.handovers) == 0 {
		return
	}
	b.WriteString("\n## Leader handovers\n\n")
	fmt.Fprintf(b, "Two replicas with leader election (the default lease: %s, renewed every %s); the leader is stopped in the\n", controllers.DefaultLeaseDuration, controllers.DefaultRetryPeriod)
	b.WriteString("middle of a burst of changes, a Consul check is flipped just after the signal, and each time is counted from the signal.\n\n")
	b.WriteString("| signal | lease last renewed before it | old leader exited | lease taken | new leader's first write | flip made then published |\n")
	b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: |\n")
	round := func(d time.Duration) string { return d.Round(10 * time.Millisecond).String() }
	for _, h := range l.handovers {
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s |\n", h.signal, round(h.renewed), round(h.exited), round(h.lease), round(h.firstWrite), round(h.flip))
	}
	b.WriteString("\nA SIGKILLed leader (a crash, an OOM kill, a lost node) leaves its lease to expire: the standby takes it at its\n")
	fmt.Fprintf(b, "first look (every %s, stretched by a random jitter of up to 1.2 times that, so up to %s) after the lease duration\n", controllers.DefaultRetryPeriod, maxPoll)
	b.WriteString("has passed since it saw the last renewal.\n")
	b.WriteString("A SIGTERMed leader (a rolling update, a drain) stops its reconciles, releases the lease and exits; the standby takes\n")
	b.WriteString("it at its next look. Its caches are synced while it stands by, so its first write follows at once. The stopping\n")
	b.WriteString("leader still finishes the reconciles its workers began, and may publish the flip itself.\n")
}

// write renders the report as Markdown into path.
func (l *ledger) write(path string, passed bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	stack := "dual-stack"
	if os.Getenv("BACKENDSLICE_TEST_STACK") == "single" {
		stack = "single-stack (IPv4)"
	}
	fmt.Fprintf(&b, "# Reliability under faults\n\n")
	fmt.Fprintf(&b, "Written by the chaos suite (`test/chaos`, `make chaos`): the real `backendslice` binary in a child process,\n")
	fmt.Fprintf(&b, "killed with SIGKILL or stopped with SIGTERM, against a real kube-apiserver and etcd (%s), a real Consul agent, the in-process\n", stack)
	fmt.Fprintf(&b, "DNS server and the AWS wire fake. Every check is the same function, `(*world).check` in\n")
	fmt.Fprintf(&b, "`test/chaos/invariants_test.go`, which reads every Service, EndpointSlice and ExternalBackend and\n")
	fmt.Fprintf(&b, "compares them with what the test made the sources report.\n\n")
	fmt.Fprintf(&b, "Run of %s, %s on %d CPUs, the controller %s: `-kills=%d -quiet=%s -backends=%d -handovers=%d -down=%s -seed=%d`.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.Version(), runtime.NumCPU(), env.built, *kills, *quiet, *backends, *handovers, *downFor, env.seed)
	if passed {
		b.WriteString("**Result: every test passed; every count below is 0.**\n\n")
	} else {
		b.WriteString("**Result: FAILED. The counts that are not 0 are broken invariants; the test output names each object and address.**\n\n")
	}
	b.WriteString("| fault | injected | longest time to converge | endpoints lost | duplicated | orphaned | foreign objects touched | other |\n")
	b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, name := range l.order {
		s := l.faults[name]
		if s.injected == 0 && len(s.counts) == 0 {
			continue // notes only
		}
		longest := s.longest.Round(10 * time.Millisecond).String()
		if s.unconverged > 0 {
			longest = fmt.Sprintf("never (%d of %d)", s.unconverged, s.injected)
		}
		other := s.counts[stale] + s.counts[wrong] + s.counts[pending]
		fmt.Fprintf(&b, "| %s | %d | %s | %d | %d | %d | %d | %d |\n", name, s.injected, longest,
			s.counts[lost], s.counts[duplicated], s.counts[orphaned], s.counts[foreignTouched], other)
	}
	b.WriteString("\n\"Converge\" is the first check, polled every 200 ms, at which every invariant holds, timed from the\n")
	b.WriteString("fault's end (the restart, the provider or API server back, the tamper, the leader's kill or SIGTERM).\n")
	b.WriteString("\"Other\" counts endpoints published that no source reports beyond their drain period, wrong\n")
	b.WriteString("conditions, ports, labels or selectors, statuses that never caught up, and writes in quiet windows.\n")
	var notes []string
	for _, name := range l.order {
		for _, n := range l.faults[name].notes {
			notes = append(notes, fmt.Sprintf("- %s: %s", name, n))
		}
	}
	if len(notes) > 0 {
		b.WriteString("\n## Other figures\n\n")
		b.WriteString(strings.Join(notes, "\n"))
		b.WriteString("\n")
	}
	l.handoverTable(&b)
	b.WriteString(invariantsDoc)
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// invariantsDoc explains the checks, at the end of the report.
const invariantsDoc = `
## What is checked

After every fault, until they hold (at most 90 s):

- every ExternalBackend has exactly one Service, of the name its spec says, controlled by it,
  selectorless, with the spec's ports and the ` + "`backendslice.io/backend`" + ` label;
- every EndpointSlice carrying our managed-by label is controlled by the current Service of a
  backend, carries its labels and ports, is not empty, and no address is in two slices of a Service;
- every endpoint a source reports now is published, not terminating, ready and serving exactly
  when the source says it is healthy;
- every published endpoint no source reports is terminating, not ready, and no older than its
  drain period plus the time the controller needs to see the change (2 s DNS refresh, 1 s AWS
  refresh, plus 2 s) plus any time no controller was running;
- every object of another manager (a Service with a selector and its slice, a Service whose name
  a backend wants, a hand-made slice with all our labels and no owner squatting the name of our
  first slice, another tool's slice with our labels) is still there at the resource version it
  was created with;
- every status has observed its backend's latest generation.

While a provider is down, the published endpoints of its backends are compared with those before
the fault every 250 ms: any change counts. After tampering, the quiet window counts reconciles
and writes (the child's metrics) and resource versions of our objects and of the ExternalBackends.
`
