package chaos_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/e2e/framework"
	"github.com/backendslice/backendslice/test/replica"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// faultKill is the report's name of a SIGKILL under churn.
const faultKill = "controller SIGKILL while sources change"

// plantAll plants, next to the backends of churner prefix p, what the
// controller must leave alone: another manager's Service and slice, a
// Service whose name a backend wants (that backend must publish nothing
// and say ServiceConflict), and two lookalike slices with our labels for
// the backend p-static, one squatting the name of its first slice. Call
// it before newChurner, so that the squatter is there first.
func plantAll(t *testing.T, ns, p string) {
	t.Helper()
	w := env.world
	w.plantOthers(t, ns, p+"-taken")
	w.plantLookalikes(t, ns, p+"-static", p+"-static", ip4(0, 0), ip4(0, 250))
	conflict := replica.Backend(ns, p+"-conflict", time.Second, replica.StaticSource("vms", ip4(0, 60)))
	conflict.Spec.Service.Name = p + "-taken"
	w.markConflict(types.NamespacedName{Namespace: ns, Name: conflict.Name})
	w.createBackend(t, conflict)
}

// TestKillsUnderChurn kills the controller with SIGKILL at random points
// (-kills times) while the sources of every kind keep changing: for a
// random time up to 2.5 s while it runs (from the moment it starts, so
// some kills land in its start-up and first sync), a few more changes
// while it is dead, and more while it starts again. After each restart
// the changes stop and the invariants must hold within the deadline:
// converged, no endpoint in two slices, no slice or Service orphaned or
// duplicated, no foreign object touched, every reported endpoint
// published, nothing published that no source reports beyond its drain.
func TestKillsUnderChurn(t *testing.T) {
	ns := namespace(t)
	rng := newRand(t)
	plantAll(t, ns, "k")
	c := newChurner(t, rng, ns, "k")
	r := newReplica(t, "controller")
	start := time.Now()
	r.Start()
	converge(t, "", start, ns)

	for i := range *kills {
		c.churnFor(time.Duration(rng.IntN(2500)) * time.Millisecond)
		killed := r.Kill()
		env.world.down(killed)
		for range rng.IntN(4) {
			c.step()
		}
		time.Sleep(time.Duration(rng.IntN(1000)) * time.Millisecond)
		r.Start()
		started := time.Now()
		env.world.up(started)
		c.churnFor(time.Duration(rng.IntN(1000)) * time.Millisecond)
		since := later(started, c.last)
		t.Logf("kill %d of %d: killed %s, up again after %s", i+1, *kills, killed.Format("15:04:05.000"), started.Sub(killed).Round(time.Millisecond))
		converge(t, faultKill, since, ns)
	}
	t.Logf("%s", c.summary())
	env.ledger.note(faultKill, "%s", c.summary())

	// Once every drain is over, the controller must be at rest: no
	// Service or slice write at all while nothing changes. The window
	// starts once the controller itself reports nothing pending (no drain
	// running, every source answered), not after a fixed sleep: after a
	// kill, a source that has not answered since the restart holds what
	// the slices publish until it does, and only then do those endpoints
	// start to drain, so a fixed sleep could end before the last write
	// that the changes made.
	waitSettled(t, ns)
	converge(t, "", time.Now(), ns)
	writes := watchWrites(t, ns)
	before := r.MustScrape()
	time.Sleep(3 * time.Second)
	after := r.MustScrape()
	r.RequireRunning()
	if n := after.Writes() - before.Writes(); n != 0 {
		env.ledger.broken(faultKill, []violation{{cat: wrong, msg: "writes at rest"}})
		t.Errorf("the controller wrote %v times in 3 s while nothing changed (seed %d); what was written:%s", n, env.seed, writes)
	}
}

// waitSettled waits until every ExternalBackend of ns reports nothing
// pending: no endpoint draining, and every source answered (neither stale
// nor failing). A controller that never settles fails the test.
func waitSettled(t *testing.T, ns string) {
	t.Helper()
	deadline := time.Now().Add(convergeTimeout)
	for {
		var list v1alpha1.ExternalBackendList
		pending := ""
		if err := framework.E().Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			pending = "listing ExternalBackends: " + err.Error()
		}
		for _, xb := range list.Items {
			if len(xb.Status.Draining) > 0 {
				pending = fmt.Sprintf("%s drains %d endpoint(s)", xb.Name, len(xb.Status.Draining))
			}
			for _, s := range xb.Status.Sources {
				if s.Stale || s.LastError != "" {
					pending = fmt.Sprintf("%s: source %s has not answered (%s)", xb.Name, s.Name, s.LastError)
				}
			}
		}
		if pending == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the controller did not settle within %s: %s (seed %d)", convergeTimeout, pending, env.seed)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
