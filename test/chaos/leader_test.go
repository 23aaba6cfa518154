package chaos_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/backendslice/backendslice/controllers"
	"github.com/backendslice/backendslice/test/e2e/framework"
	"github.com/backendslice/backendslice/test/replica"
)

// The report's names of the two ways a leader stops.
const (
	faultLeader     = "leader SIGKILLed mid-sync, standby takes over"
	faultLeaderTerm = "leader SIGTERMed mid-sync (a clean stop), standby takes over"
)

// maxPoll is the longest a standby waits between two looks at the lease:
// client-go's leader election tries every retry period (the controller's
// default here), stretched by a random jitter of up to 1.2 times it.
const maxPoll = controllers.DefaultRetryPeriod + controllers.DefaultRetryPeriod*12/10

// leaderStop is one way the test stops the leader.
type leaderStop struct {
	fault, signal string
	// clean stops release the lease; a SIGKILLed leader leaves it to expire.
	clean bool
}

// TestLeaderHandover runs two replicas with leader election, and stops
// the leader -handovers times with SIGKILL (a crash) and as many times
// with SIGTERM (a clean stop, as a rolling update or a drain does), in
// turn, in the middle of a burst of changes (every backend's sources, and
// new backends). It checks that the standby wrote nothing while it was
// standing by; that it takes the lease within the lease duration after a
// kill, and that a clean stop released the lease before the process
// exited; and that with the new leader the invariants hold again: nothing
// the stopped leader left half done is lost. A Consul check flipped just
// after each signal times how long a health change waits for the new
// leader. The stopped replica then comes back as the new standby.
func TestLeaderHandover(t *testing.T) {
	ns := namespace(t)
	rng := newRand(t)
	c := newChurner(t, rng, ns, "l")
	flip := newFlipper(t, ns, "l-flip", 1)
	flags := []string{"--leader-elect", "--leader-election-namespace", ns}
	replicas := []*replica.Replica{newReplica(t, "replica-a", flags...), newReplica(t, "replica-b", flags...)}
	start := time.Now()
	for _, r := range replicas {
		r.Start()
	}
	leader := replica.WaitLeader(t, replicas)
	converge(t, "", start, ns)

	stops := []leaderStop{{fault: faultLeader, signal: "SIGKILL"}, {fault: faultLeaderTerm, signal: "SIGTERM", clean: true}}
	for i := range 2 * *handovers {
		stop := stops[i%len(stops)]
		standby := replicas[0]
		if standby == leader {
			standby = replicas[1]
		}
		// Mid-sync: a burst of changes, and new backends, then the stop
		// at a random moment inside the leader's work on them.
		for j := range 5 {
			env.world.createBackend(t, replica.Backend(ns, fmt.Sprintf("l-new-%d-%d", i, j), time.Second,
				replica.StaticSource("vms", ip4(2, 150+5*i+j), ip6(7, 5*i+j))))
		}
		for range 10 {
			c.step()
		}
		time.Sleep(time.Duration(rng.IntN(400)) * time.Millisecond)
		m := standby.MustScrape()
		if m.Writes() != 0 || m.Reconciles() != 0 {
			t.Errorf("standby %s made %v writes and %v reconciles while %s led", standby.Name, m.Writes(), m.Reconciles(), leader.Name)
		}
		h := handOver(t, ns, stop, leader, standby, c, flip)
		h.log(t, i+1, leader, standby)
		converge(t, stop.fault, h.at, ns)

		leader.Start() // the new standby
		leader = standby
	}
	env.ledger.note(faultLeader, "%s", c.summary())
}

// handover is what one handover took, each time from the signal.
type handover struct {
	signal string
	at     time.Time
	// exited is when the stopped leader's process was gone; lease when
	// the standby held the lease; firstWrite when it first wrote; flip
	// when a health change made just after the signal was published.
	exited, lease, firstWrite, flip time.Duration
	// leaseDuration and renewed (how long before the signal the lease was
	// last renewed) are the lease's, as read before the signal.
	leaseDuration, renewed time.Duration
}

// handOver stops leader as stop says, flips a health check and keeps the
// sources changing, and waits until standby holds the lease, has written,
// and has published the flip.
func handOver(t *testing.T, ns string, stop leaderStop, leader, standby *replica.Replica, c *churner, flip *replica.Flipper) handover {
	t.Helper()
	lease := replica.ReadLease(t, ns)
	firstWrite := pollFirst(convergeTimeout, func() bool {
		m, err := standby.Scrape()
		return err == nil && m.Writes() > 0
	})
	h := handover{signal: stop.signal, leaseDuration: time.Duration(ptr.Deref(lease.Spec.LeaseDurationSeconds, 0)) * time.Second}
	if stop.clean {
		h.at = leader.Terminate()
	} else {
		h.at = leader.Kill()
	}
	h.renewed = h.at.Sub(lease.Spec.RenewTime.Time)
	env.world.down(h.at)
	published := flipAndPoll(t, flip, 0)
	c.churnFor(time.Duration(c.rng.IntN(1000)) * time.Millisecond)
	if stop.clean {
		h.exited = checkReleased(t, leader, ns, ptr.Deref(lease.Spec.HolderIdentity, "")).Sub(h.at)
	}

	// Takeover: the lease changes hands.
	framework.Eventually(t, 60*time.Second, "the standby taking the lease", func() error {
		l := replica.ReadLease(t, ns)
		if holder := ptr.Deref(l.Spec.HolderIdentity, ""); holder == "" || holder == ptr.Deref(lease.Spec.HolderIdentity, "") {
			return fmt.Errorf("still held by %q", holder)
		}
		h.lease = time.Since(h.at)
		return nil
	})
	env.world.up(h.at.Add(h.lease))
	// client-go counts itself leader only after the write that took the
	// lease returns, so the lease can be seen moved a moment before the
	// standby's metric says so.
	framework.Eventually(t, 5*time.Second, fmt.Sprintf("%s saying it leads, once the lease moved to it", standby.Name), func() error {
		m, err := standby.Scrape()
		if err != nil {
			return err
		}
		if !m.Leader() {
			return errors.New("leader_election_master_status is not 1")
		}
		return nil
	})
	// A standby counts the lease duration from when it saw the lease last
	// renewed, which it sees at its next look (up to maxPoll after the
	// renewal), and takes the lease at its first look after that duration
	// (up to maxPoll later): so the lease is taken at most the lease
	// duration and two looks after its last renewal.
	if limit := h.leaseDuration + 2*maxPoll; !stop.clean && h.lease+h.renewed > limit {
		t.Errorf("the standby took the lease %s after its last renewal, more than the lease duration %s and two looks at it (%s) (seed %d)",
			(h.lease + h.renewed).Round(time.Millisecond), h.leaseDuration, limit, env.seed)
	}
	h.firstWrite = since(t, h.at, firstWrite, "the new leader's first write")
	h.flip = since(t, h.at, published, "the health flip made during the handover reaching the slice")
	return h
}

// checkReleased waits for the SIGTERMed leader to exit and checks that it
// exited cleanly, releasing its lease on the way: once it is gone, the
// lease is free or the standby's, never still its own (which would leave
// the standby waiting out the lease duration).
func checkReleased(t *testing.T, leader *replica.Replica, ns, holder string) time.Time {
	t.Helper()
	exited, err := leader.Wait(replica.TerminationGrace)
	if err != nil {
		t.Errorf("controller %s exited with %v after SIGTERM, want a clean exit; end of its log:\n%s", leader.Name, err, leader.LogTail(3000))
	}
	if now := ptr.Deref(replica.ReadLease(t, ns).Spec.HolderIdentity, ""); now == holder {
		t.Errorf("controller %s exited after SIGTERM still holding the lease (%s): it did not release it", leader.Name, holder)
	}
	return exited
}

// log reports the handover in the test's output and in the report.
func (h handover) log(t *testing.T, n int, leader, standby *replica.Replica) {
	t.Logf("handover %d: %s %s (exited %s later), %s took the lease %s later, wrote first %s later, published a flip made then %s later (lease duration %s, last renewed %s before the signal)",
		n, leader.Name, h.signal, h.exited.Round(time.Millisecond), standby.Name, h.lease.Round(time.Millisecond), h.firstWrite.Round(time.Millisecond), h.flip.Round(time.Millisecond),
		h.leaseDuration, h.renewed.Round(time.Millisecond))
	env.ledger.handedOver(h)
}

// pollFirst polls cond every 20 ms, in the background, from now until it
// holds or timeout passes; the function it returns waits for that and
// returns when cond first held (zero if it never did).
func pollFirst(timeout time.Duration, cond func() bool) func() time.Time {
	done := make(chan time.Time, 1)
	go func() {
		deadline := time.Now().Add(timeout)
		for time.Now().Before(deadline) {
			if cond() {
				done <- time.Now()
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		done <- time.Time{}
	}()
	return func() time.Time { return <-done }
}

// since is how long after at the poll's condition first held; one that
// never did fails the test.
func since(t *testing.T, at time.Time, first func() time.Time, what string) time.Duration {
	t.Helper()
	when := first()
	if when.IsZero() {
		t.Errorf("%s: not seen within %s of the signal (seed %d)", what, convergeTimeout, env.seed)
		return -1
	}
	return when.Sub(at)
}
