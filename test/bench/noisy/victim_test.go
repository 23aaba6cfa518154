package noisy

import (
	"fmt"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// VictimMode is how the victim acts: how many changes of each kind it
// times in a phase, and how long it pauses before each.
type VictimMode struct {
	Name                        string
	Creates, Flips, Revocations int
	// Gap is the pause before each change: none for the busy victim, whose
	// changes follow each other back to back, seconds for the quiet one,
	// whose every change arrives at a controller that has nothing of its
	// own to do, so that the whole wait is the other tenants'.
	Gap time.Duration
}

// busyVictim and quietVictim are the two modes at the flags' scale.
func busyVictim() VictimMode { return VictimMode{"busy", *creates, *flips, *revocations, 0} }
func quietVictim() VictimMode {
	return VictimMode{"quiet", *quietCreates, *quietFlips, *quietRevocations, *quietGap}
}

// rounds is how many rounds the mode's changes are spread over.
func (m VictimMode) rounds() int { return max(m.Revocations, (m.Creates+1)/2, (m.Flips+1)/2, 1) }

// Latencies are what one victim mode measured in one phase.
type Latencies struct {
	// Of each kind of victim change.
	Create, Flip, Revoke, Readmit []time.Duration
	// Rounds run of Rounds planned; a phase under attack stops starting
	// rounds at its deadline.
	Rounds, RoundsPlanned int
	Took                  time.Duration
}

// timeVictim times the busy victim, then the quiet one; under attack
// (bounded) each mode starts no round after -duration.
func timeVictim(t *testing.T, w *watcher, phase string, bounded bool) (busy, quiet Latencies) {
	t.Helper()
	deadline := func() time.Time {
		if !bounded {
			return time.Time{}
		}
		return time.Now().Add(*attackFor)
	}
	busy = runVictim(t, w, phase, busyVictim(), deadline())
	return busy, runVictim(t, w, phase, quietVictim(), deadline())
}

// runVictim times the victim's changes in mode m, interleaved in rounds so
// that each kind is measured over the whole phase: each round creates a
// backend (creates/rounds of them), flips a health down and up
// (flips/rounds) and revokes and re-admits the provider
// (revocations/rounds). A zero deadline means none.
func runVictim(t *testing.T, w *watcher, phase string, m VictimMode, deadline time.Time) Latencies {
	t.Helper()
	l := Latencies{RoundsPlanned: m.rounds()}
	share := func(total, round int) int { // this round's part of total
		return total*(round+1)/l.RoundsPlanned - total*round/l.RoundsPlanned
	}
	pause := func() { time.Sleep(m.Gap) }
	start := time.Now()
	created, flipped := 0, 0
	for round := range l.RoundsPlanned {
		if !deadline.IsZero() && time.Now().After(deadline) {
			t.Logf("%s, %s victim: deadline reached after %d of %d rounds", phase, m.Name, round, l.RoundsPlanned)
			break
		}
		for range share(m.Creates, round) {
			pause()
			l.Create = append(l.Create, timeCreate(t, w, fmt.Sprintf("new-%s-%s-%d", phase, m.Name, created)))
			created++
		}
		for range share(m.Flips, round) {
			pause()
			l.Flip = append(l.Flip, timeFlip(t, w, flipped%2 == 1))
			flipped++
		}
		for range share(m.Revocations, round) {
			pause()
			l.Revoke = append(l.Revoke, timeRevoke(t, w))
			pause()
			l.Readmit = append(l.Readmit, timeReadmit(t, w))
		}
		l.Rounds++
	}
	// A flip left down (an odd count) is put back, untimed.
	if flipped%2 == 1 {
		timeFlip(t, w, true)
	}
	l.Took = time.Since(start)
	t.Logf("%s, %s victim: %d rounds in %s: create p50 %s p99 %s; flip p50 %s p99 %s; revoke p50 %s p99 %s",
		phase, m.Name, l.Rounds, l.Took.Round(time.Millisecond), pct(l.Create, 50), pct(l.Create, 99),
		pct(l.Flip, 50), pct(l.Flip, 99), pct(l.Revoke, 50), pct(l.Revoke, 99))
	return l
}

// timeCreate creates a victim backend and times it to Ready with its
// generation observed; the backend is deleted afterwards (untimed).
func timeCreate(t *testing.T, w *watcher, name string) time.Duration {
	t.Helper()
	xb := backend(victimNS, name, victimProvider, newAddrs...)
	start := time.Now()
	framework.Create(t, xb)
	at, err := w.until(*opTimeout, readyFor(name))
	if err != nil {
		t.Fatalf("victim create %s: %v", name, err)
	}
	if err := framework.E().Client.Delete(ctx, xb); err != nil {
		t.Fatalf("deleting %s: %v", name, err)
	}
	return at.Sub(start)
}

// timeFlip sets the health of the flip backend's first endpoint (healthy
// or not) and times it to its slice's ready condition.
func timeFlip(t *testing.T, w *watcher, healthy bool) time.Duration {
	t.Helper()
	health := v1alpha1.HealthUnhealthy
	if healthy {
		health = v1alpha1.HealthHealthy
	}
	start := time.Now()
	framework.Edit(t, &v1alpha1.ExternalBackend{ObjectMeta: metav1.ObjectMeta{Namespace: victimNS, Name: flipBackend}},
		func(xb *v1alpha1.ExternalBackend) { xb.Spec.Sources[0].Static.Endpoints[0].Health = health })
	at, err := w.until(*opTimeout, func(c client.Reader) error {
		eps, err := endpointsOf(c, flipBackend)
		if err != nil {
			return err
		}
		e, ok := eps[flipAddrs[0]]
		if !ok {
			return fmt.Errorf("%s not published", flipAddrs[0])
		}
		if got := ptr.Deref(e.Conditions.Ready, false); got != healthy {
			return fmt.Errorf("%s ready=%t", flipAddrs[0], got)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("victim health flip to %s: %v", health, err)
	}
	return at.Sub(start)
}

// setRevocableNames sets the namespaces the revocable provider admits.
func setRevocableNames(t *testing.T, names ...string) {
	t.Helper()
	framework.Edit(t, &v1alpha1.BackendProvider{ObjectMeta: metav1.ObjectMeta{Name: revocableProvider}},
		func(bp *v1alpha1.BackendProvider) { bp.Spec.Namespaces.Names = names })
}

// timeRevoke takes the victim off the revocable provider's names and
// times it until the rev backend's slices hold none of its addresses.
func timeRevoke(t *testing.T, w *watcher) time.Duration {
	t.Helper()
	start := time.Now()
	setRevocableNames(t, bystanderNS)
	at, err := w.until(*opTimeout, func(c client.Reader) error {
		eps, err := endpointsOf(c, revBackend)
		if err != nil {
			return err
		}
		for _, a := range revAddrs {
			if _, ok := eps[a]; ok {
				return fmt.Errorf("%s still published", a)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("victim revocation: %v", err)
	}
	return at.Sub(start)
}

// timeReadmit puts the victim back on the revocable provider's names and
// times it until the rev backend's slices hold all its addresses, ready.
func timeReadmit(t *testing.T, w *watcher) time.Duration {
	t.Helper()
	start := time.Now()
	setRevocableNames(t, victimNS, bystanderNS)
	at, err := w.until(*opTimeout, published(revBackend, revAddrs...))
	if err != nil {
		t.Fatalf("victim re-admission: %v", err)
	}
	return at.Sub(start)
}

// endpointsOf maps the addresses in our slices of the victim's Service
// svc to their endpoints.
func endpointsOf(c client.Reader, svc string) (map[string]discoveryv1.Endpoint, error) {
	var list discoveryv1.EndpointSliceList
	if err := c.List(ctx, &list, client.InNamespace(victimNS), client.MatchingLabels{
		discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: v1alpha1.ManagedByValue,
	}); err != nil {
		return nil, err
	}
	return framework.Published(list.Items)
}

// published holds when our slices of svc publish every address of addrs,
// ready.
func published(svc string, addrs ...string) func(client.Reader) error {
	return func(c client.Reader) error {
		eps, err := endpointsOf(c, svc)
		if err != nil {
			return err
		}
		for _, a := range addrs {
			e, ok := eps[a]
			if !ok || !ptr.Deref(e.Conditions.Ready, false) {
				return fmt.Errorf("%s not published ready", a)
			}
		}
		return nil
	}
}

// readyFor holds when the victim's backend name is Ready=True with its
// generation observed by the condition and the status.
func readyFor(name string) func(client.Reader) error {
	return func(c client.Reader) error {
		xb := &v1alpha1.ExternalBackend{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: victimNS, Name: name}, xb); err != nil {
			return err
		}
		return isReady(xb)
	}
}
