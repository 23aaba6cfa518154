package chaos_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/backendslice/backendslice/test/e2e/framework"
)

// faultLeader is the report's name of a leader kill.
const faultLeader = "leader SIGKILLed mid-sync, standby takes over"

// leaseName is the controller's leader election lease (controllers.NewManager).
const leaseName = "backendslice-controller.backendslice.io"

// maxPoll is the longest a standby waits between two looks at the lease:
// client-go's leader election (with controller-runtime's defaults) tries
// every retry period of 2 s, stretched by a random jitter of up to 1.2
// times that.
const maxPoll = 2*time.Second + 2*time.Second*12/10

// TestLeaderHandover runs two replicas with leader election, and -handovers
// times kills the leader with SIGKILL in the middle of a burst of changes
// (every backend's sources, and new backends). It checks that the standby
// wrote nothing while it was standing by, that it takes the lease within
// the lease duration, and that with it the invariants hold again: nothing
// the killed leader left half done is lost. The killed replica then comes
// back as the new standby.
func TestLeaderHandover(t *testing.T) {
	ns := namespace(t)
	rng := newRand(t)
	c := newChurner(t, rng, ns, "l")
	flags := []string{"--leader-elect", "--leader-election-namespace", ns}
	replicas := []*replica{newReplica(t, "replica-a", flags...), newReplica(t, "replica-b", flags...)}
	start := time.Now()
	for _, r := range replicas {
		r.start()
	}
	leader := waitLeader(t, replicas)
	converge(t, "", start, ns)

	for i := range *handovers {
		standby := replicas[0]
		if standby == leader {
			standby = replicas[1]
		}
		// Mid-sync: a burst of changes, and new backends, then the kill
		// at a random moment inside the leader's work on them.
		for j := range 5 {
			env.world.createBackend(t, backend(ns, fmt.Sprintf("l-new-%d-%d", i, j), time.Second,
				staticSource("vms", ip4(2, 150+5*i+j), ip6(7, 5*i+j))))
		}
		for range 10 {
			c.step()
		}
		time.Sleep(time.Duration(rng.IntN(400)) * time.Millisecond)
		m := standby.mustScrape()
		if m.writes() != 0 || m.reconciles() != 0 {
			t.Errorf("standby %s made %v writes and %v reconciles while %s led", standby.name, m.writes(), m.reconciles(), leader.name)
		}
		lease := readLease(t, ns)
		killed := leader.kill()
		env.world.down(killed)
		c.churnFor(time.Duration(rng.IntN(1000)) * time.Millisecond)

		// Takeover: the lease changes hands.
		var took time.Duration
		framework.Eventually(t, 60*time.Second, "the standby taking the lease", func() error {
			l := readLease(t, ns)
			if ptr.Deref(l.Spec.HolderIdentity, "") == ptr.Deref(lease.Spec.HolderIdentity, "") {
				return fmt.Errorf("still held by %s", ptr.Deref(l.Spec.HolderIdentity, ""))
			}
			took = time.Since(killed)
			return nil
		})
		env.world.up(killed.Add(took))
		if !standby.mustScrape().leader() {
			t.Errorf("the lease moved, but %s does not say it leads", standby.name)
		}
		duration := time.Duration(ptr.Deref(lease.Spec.LeaseDurationSeconds, 0)) * time.Second
		renewed := killed.Sub(lease.Spec.RenewTime.Time)
		t.Logf("handover %d: %s killed, %s took the lease %s later (lease duration %s, last renewed %s before the kill)",
			i+1, leader.name, standby.name, took.Round(time.Millisecond), duration, renewed.Round(time.Millisecond))
		env.ledger.note(faultLeader, "takeover %s after the kill (lease duration %s; the lease was last renewed %s before the kill)",
			took.Round(100*time.Millisecond), duration, renewed.Round(100*time.Millisecond))
		// A standby counts the lease duration from when it saw the lease
		// last renewed, which it sees at its next look (up to maxPoll
		// after the renewal), and takes the lease at its first look after
		// that duration (up to maxPoll later): so the lease is taken at
		// most the lease duration and two looks after its last renewal.
		if limit := duration + 2*maxPoll; took+renewed > limit {
			t.Errorf("handover %d: the standby took the lease %s after its last renewal, more than the lease duration %s and two looks at it (%s) (seed %d)",
				i+1, (took + renewed).Round(time.Millisecond), duration, limit, env.seed)
		}
		converge(t, faultLeader, killed, ns)

		leader.start() // the new standby
		leader = standby
	}
	env.ledger.note(faultLeader, "%s", c.summary())
}

// waitLeader waits until one replica says it leads, and returns it.
func waitLeader(t *testing.T, replicas []*replica) *replica {
	t.Helper()
	var leader *replica
	framework.Eventually(t, 60*time.Second, "a leader", func() error {
		leader = nil
		for _, r := range replicas {
			m, err := r.scrape()
			if err != nil {
				return err
			}
			if m.leader() {
				if leader != nil {
					return fmt.Errorf("%s and %s both say they lead", leader.name, r.name)
				}
				leader = r
			}
		}
		if leader == nil {
			return fmt.Errorf("no replica leads yet")
		}
		return nil
	})
	return leader
}

// readLease reads the controller's leader election lease in ns.
func readLease(t *testing.T, ns string) *coordinationv1.Lease {
	t.Helper()
	l := &coordinationv1.Lease{}
	if err := framework.E().Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: leaseName}, l); err != nil {
		t.Fatalf("reading lease %s/%s: %v", ns, leaseName, err)
	}
	return l
}
