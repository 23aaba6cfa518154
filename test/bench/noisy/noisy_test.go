package noisy

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/docsection"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// Names of the run.
const (
	attackerNS = "attacker"
	victimNS   = "victim"
	// bystanderNS is admitted with the victim by the revocable provider,
	// so that revoking the victim leaves the provider's names non-empty.
	bystanderNS = "bystander"
	// attackerProvider admits the attacker; victimProvider the victim.
	attackerProvider = "attacker-static"
	victimProvider   = "victim-static"
	// revocableProvider admits the victim and the bystander; revocations
	// take the victim off its names.
	revocableProvider = "victim-revocable"
	// flipLabel is the label of spec.service.labels the attacker flips.
	flipLabel = "noisy.backendslice.io/flip"
	// flipBackend is the victim backend whose health flips, revBackend the
	// one whose provider is revoked.
	flipBackend = "flip"
	revBackend  = "rev"
)

// victimAddrs are the addresses of the victim's backends.
var (
	newAddrs  = []string{"192.0.2.1", "192.0.2.2", "192.0.2.3"}
	flipAddrs = []string{"192.0.2.10", "192.0.2.11", "192.0.2.12", "192.0.2.13"}
	revAddrs  = []string{"192.0.2.20", "192.0.2.21", "192.0.2.22", "192.0.2.23"}
)

var ctx = context.Background()

// measure sets up the attacker (quiet) and the victim at the scale of the
// flags, measures the victim's latencies, starts the attack, and measures
// them again in the same way.
func measure(t *testing.T) Report {
	if *attackAddresses < 1 || *attackAddresses > 381 || *attackBackends < 1 {
		t.Fatalf("-backends %d -addresses %d: at least one backend, 1 to 381 addresses", *attackBackends, *attackAddresses)
	}
	began := time.Now()
	k8s := framework.E().Client
	r := Report{
		CPUs: runtime.NumCPU(), Go: runtime.Version(), LoadBefore: docsection.LoadAverage(),
		Backends: *attackBackends, Addresses: *attackAddresses, FlipPeriod: *flipPeriod, Warmup: *warmup, AttackFor: *attackFor,
		Creates: *creates, Flips: *flips, Revocations: *revocations,
	}

	for _, ns := range []string{attackerNS, victimNS, bystanderNS} {
		if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatalf("creating namespace %s: %v", ns, err)
		}
	}
	createProvider(t, attackerProvider, []string{attackerNS}, "198.51.100.0/24", "203.0.113.0/25")
	createProvider(t, victimProvider, []string{victimNS}, "192.0.2.0/24")
	createProvider(t, revocableProvider, []string{victimNS, bystanderNS}, "192.0.2.0/24")

	// The attacker, quiet for now.
	start := time.Now()
	addrs := attackerAddrs(*attackAddresses)
	for i := range *attackBackends {
		xb := backend(attackerNS, fmt.Sprintf("a%d", i), attackerProvider, addrs...)
		xb.Spec.MaxEndpointsPerSlice = ptr.To(minEndpointsPerSlice)
		xb.Spec.Service.Labels = map[string]string{flipLabel: "a"}
		framework.Create(t, xb)
	}
	waitAttackerConverged(t)
	r.AttackerSetup = time.Since(start)
	r.AttackerSlices = len(attackerSlices(t))
	t.Logf("attacker: %d backends, %d slices, converged in %s", *attackBackends, r.AttackerSlices, r.AttackerSetup.Round(time.Millisecond))

	// The victim's standing backends.
	framework.Create(t, backend(victimNS, flipBackend, victimProvider, flipAddrs...))
	framework.Create(t, backend(victimNS, revBackend, revocableProvider, revAddrs...))
	w, err := newWatcher(victimNS)
	if err != nil {
		t.Fatal(err)
	}
	defer w.stop()
	for _, name := range []string{flipBackend, revBackend} {
		if _, err := w.until(*opTimeout, readyFor(name)); err != nil {
			t.Fatalf("victim backend %s: %v", name, err)
		}
	}
	if _, err := w.until(*opTimeout, published(revBackend, revAddrs...)); err != nil {
		t.Fatal(err)
	}

	t.Logf("idle: the attacker's backends exist and are left alone")
	r.Idle = runPhase(t, w, "idle", time.Time{})

	t.Logf("attack: flipping %s on %d backends every %s; measuring after %s", flipLabel, *attackBackends, *flipPeriod, *warmup)
	stopAttack, attackFlips := attack(t, k8s)
	time.Sleep(*warmup)
	r.Attack = runPhase(t, w, "attack", time.Now().Add(*attackFor))
	r.Attack.LabelFlips = stopAttack()
	r.Attack.FlipErrors = attackFlips.Load()

	r.LoadAfter = docsection.LoadAverage()
	r.Took = time.Since(began)
	return r
}

// minEndpointsPerSlice is the lowest spec.maxEndpointsPerSlice the CRD
// accepts (+kubebuilder:validation:Minimum=1).
const minEndpointsPerSlice int32 = 1

// attackerAddrs are n documentation addresses the attacker's provider
// admits: 198.51.100.1-254, then 203.0.113.1-127 (the upper half of
// 203.0.113.0/24 is the tests' denied range).
func attackerAddrs(n int) []string {
	out := make([]string, 0, n)
	for i := 1; i <= 254 && len(out) < n; i++ {
		out = append(out, fmt.Sprintf("198.51.100.%d", i))
	}
	for i := 1; i <= 127 && len(out) < n; i++ {
		out = append(out, fmt.Sprintf("203.0.113.%d", i))
	}
	return out
}

// createProvider creates a static BackendProvider admitting names and cidrs.
func createProvider(t *testing.T, name string, names []string, cidrs ...string) {
	t.Helper()
	framework.Create(t, &v1alpha1.BackendProvider{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.BackendProviderSpec{
			Static:       &v1alpha1.StaticProvider{},
			AllowedCIDRs: cidrs,
			Namespaces:   v1alpha1.NamespaceSelection{Names: names},
		},
	})
}

// backend is an IPv4 ExternalBackend with one TCP port whose static source
// through provider lists addrs.
func backend(ns, name, provider string, addrs ...string) *v1alpha1.ExternalBackend {
	eps := make([]v1alpha1.StaticEndpoint, 0, len(addrs))
	for _, a := range addrs {
		eps = append(eps, v1alpha1.StaticEndpoint{Address: a})
	}
	return &v1alpha1.ExternalBackend{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.ExternalBackendSpec{
			Service:      v1alpha1.ServiceSpec{Ports: []v1alpha1.ServicePort{{Name: "tcp", Port: 5432}}},
			AddressTypes: []v1alpha1.AddressType{v1alpha1.AddressTypeIPv4},
			Sources: []v1alpha1.Source{{
				Name: "fixed", ProviderRef: &v1alpha1.ProviderReference{Name: provider},
				Static: &v1alpha1.StaticSource{Endpoints: eps},
			}},
			DrainPeriod: &metav1.Duration{},
		},
	}
}

// attackerSlices lists our slices in the attacker's namespace.
func attackerSlices(t *testing.T) []discoveryv1.EndpointSlice {
	t.Helper()
	var list discoveryv1.EndpointSliceList
	if err := framework.E().Client.List(ctx, &list, client.InNamespace(attackerNS),
		client.MatchingLabels{discoveryv1.LabelManagedBy: v1alpha1.ManagedByValue}); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// waitAttackerConverged waits until every attacker backend is Ready and
// its slices publish all its addresses.
func waitAttackerConverged(t *testing.T) {
	t.Helper()
	want := *attackBackends * *attackAddresses
	framework.Eventually(t, 15*time.Minute, "the attacker's backends converge", func() error {
		n := 0
		for _, s := range attackerSlices(t) {
			n += len(s.Endpoints)
		}
		if n != want {
			return fmt.Errorf("%d of %d endpoints published", n, want)
		}
		var list v1alpha1.ExternalBackendList
		if err := framework.E().Client.List(ctx, &list, client.InNamespace(attackerNS)); err != nil {
			return err
		}
		for _, xb := range list.Items {
			if err := isReady(&xb); err != nil {
				return err
			}
		}
		return nil
	})
}

// attack flips flipLabel on every attacker backend each flipPeriod, as a
// merge patch of spec.service.labels, until the returned stop is called;
// stop says how many backend flips were written. The counter counts the
// patches that failed.
func attack(t *testing.T, k8s client.Client) (stop func() int64, failed *atomic.Int64) {
	t.Helper()
	actx, cancel := context.WithCancel(ctx)
	var done sync.WaitGroup
	var flipped atomic.Int64
	failed = &atomic.Int64{}
	done.Add(1)
	go func() {
		defer done.Done()
		tick := time.NewTicker(*flipPeriod)
		defer tick.Stop()
		value := "a"
		for {
			select {
			case <-actx.Done():
				return
			case <-tick.C:
			}
			value = map[string]string{"a": "b", "b": "a"}[value]
			patch := []byte(fmt.Sprintf(`{"spec":{"service":{"labels":{%q:%q}}}}`, flipLabel, value))
			for i := range *attackBackends {
				xb := &v1alpha1.ExternalBackend{ObjectMeta: metav1.ObjectMeta{Namespace: attackerNS, Name: fmt.Sprintf("a%d", i)}}
				if err := k8s.Patch(actx, xb, client.RawPatch(types.MergePatchType, patch)); err != nil {
					if actx.Err() == nil && failed.Add(1) == 1 {
						t.Logf("attacker flip: %v", err)
					}
					continue
				}
				flipped.Add(1)
			}
		}
	}()
	return func() int64 { cancel(); done.Wait(); return flipped.Load() }, failed
}

// Phase is what one phase measured.
type Phase struct {
	Name string
	// Latencies of each kind of victim change.
	Create, Flip, Revoke, Readmit []time.Duration
	// Rounds run of Rounds planned; a phase under attack stops starting
	// rounds at its deadline.
	Rounds, RoundsPlanned int
	Took                  time.Duration
	// The controller's writes in the phase, by namespace.
	AttackerSlices, AttackerServices, AttackerStatus int64
	VictimSlices, VictimServices, VictimStatus       int64
	// LabelFlips is how many attacker backend flips were written over the
	// attack (warm-up included); FlipErrors how many failed.
	LabelFlips, FlipErrors int64
}

// runPhase times the victim's changes, interleaved in rounds so that each
// kind is measured over the whole phase: each round creates a backend
// (creates/rounds of them), flips a health down and up (flips/rounds) and
// revokes and re-admits the provider (revocations/rounds). A zero
// deadline means none.
func runPhase(t *testing.T, w *watcher, name string, deadline time.Time) Phase {
	t.Helper()
	p := Phase{Name: name}
	p.RoundsPlanned = max(*revocations, (*creates+1)/2, (*flips+1)/2, 1)
	share := func(total, round int) int { // this round's part of total
		return total*(round+1)/p.RoundsPlanned - total*round/p.RoundsPlanned
	}
	before := snapshot()
	start := time.Now()
	created, flipped := 0, 0
	for round := range p.RoundsPlanned {
		if !deadline.IsZero() && time.Now().After(deadline) {
			t.Logf("%s: deadline reached after %d of %d rounds", name, round, p.RoundsPlanned)
			break
		}
		for range share(*creates, round) {
			p.Create = append(p.Create, timeCreate(t, w, fmt.Sprintf("new-%s-%d", name, created)))
			created++
		}
		for range share(*flips, round) {
			health := v1alpha1.HealthUnhealthy
			if flipped%2 == 1 {
				health = v1alpha1.HealthHealthy
			}
			p.Flip = append(p.Flip, timeFlip(t, w, health))
			flipped++
		}
		for range share(*revocations, round) {
			rev, readmit := timeRevocation(t, w)
			p.Revoke, p.Readmit = append(p.Revoke, rev), append(p.Readmit, readmit)
		}
		p.Rounds++
		t.Logf("%s: round %d of %d done after %s", name, p.Rounds, p.RoundsPlanned, time.Since(start).Round(time.Millisecond))
	}
	// A flip left down (an odd count) is put back, untimed.
	if flipped%2 == 1 {
		timeFlip(t, w, v1alpha1.HealthHealthy)
	}
	p.Took = time.Since(start)
	after := snapshot()
	p.AttackerSlices = after[0] - before[0]
	p.AttackerServices = after[1] - before[1]
	p.AttackerStatus = after[2] - before[2]
	p.VictimSlices = after[3] - before[3]
	p.VictimServices = after[4] - before[4]
	p.VictimStatus = after[5] - before[5]
	t.Logf("%s: %d rounds in %s: create p50 %s p99 %s; flip p50 %s p99 %s; revoke p50 %s p99 %s; attacker slice writes %d",
		name, p.Rounds, p.Took.Round(time.Millisecond), pct(p.Create, 50), pct(p.Create, 99), pct(p.Flip, 50), pct(p.Flip, 99),
		pct(p.Revoke, 50), pct(p.Revoke, 99), p.AttackerSlices)
	return p
}

// snapshot is the controller's writes so far: attacker slices, Services,
// status; victim slices, Services, status.
func snapshot() [6]int64 {
	return [6]int64{
		writes.Of(attackerNS, "endpointslices"), writes.Of(attackerNS, "services"), writes.Of(attackerNS, "externalbackends/status"),
		writes.Of(victimNS, "endpointslices"), writes.Of(victimNS, "services"), writes.Of(victimNS, "externalbackends/status"),
	}
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

// timeFlip sets the health of the flip backend's first endpoint and times
// it to its slice's ready condition.
func timeFlip(t *testing.T, w *watcher, health v1alpha1.Health) time.Duration {
	t.Helper()
	start := time.Now()
	framework.Edit(t, &v1alpha1.ExternalBackend{ObjectMeta: metav1.ObjectMeta{Namespace: victimNS, Name: flipBackend}},
		func(xb *v1alpha1.ExternalBackend) { xb.Spec.Sources[0].Static.Endpoints[0].Health = health })
	want := health == v1alpha1.HealthHealthy
	at, err := w.until(*opTimeout, func(c client.Reader) error {
		eps, err := endpointsOf(c, flipBackend)
		if err != nil {
			return err
		}
		e, ok := eps[flipAddrs[0]]
		if !ok {
			return fmt.Errorf("%s not published", flipAddrs[0])
		}
		if got := ptr.Deref(e.Conditions.Ready, false); got != want {
			return fmt.Errorf("%s ready=%t", flipAddrs[0], got)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("victim health flip to %s: %v", health, err)
	}
	return at.Sub(start)
}

// timeRevocation takes the victim off the revocable provider's names and
// times it until the rev backend's slices hold none of its addresses, then
// puts it back and times it until they hold all of them, ready.
func timeRevocation(t *testing.T, w *watcher) (revoke, readmit time.Duration) {
	t.Helper()
	setNames := func(names ...string) {
		framework.Edit(t, &v1alpha1.BackendProvider{ObjectMeta: metav1.ObjectMeta{Name: revocableProvider}},
			func(bp *v1alpha1.BackendProvider) { bp.Spec.Namespaces.Names = names })
	}
	start := time.Now()
	setNames(bystanderNS)
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
	revoke = at.Sub(start)

	start = time.Now()
	setNames(victimNS, bystanderNS)
	if at, err = w.until(*opTimeout, published(revBackend, revAddrs...)); err != nil {
		t.Fatalf("victim re-admission: %v", err)
	}
	return revoke, at.Sub(start)
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

// isReady says why xb is not Ready=True/Ready for its generation, or nil.
func isReady(xb *v1alpha1.ExternalBackend) error {
	c := meta.FindStatusCondition(xb.Status.Conditions, v1alpha1.ConditionReady)
	switch {
	case c == nil:
		return fmt.Errorf("%s/%s: no Ready condition", xb.Namespace, xb.Name)
	case c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonReady:
		return fmt.Errorf("%s/%s: Ready %s/%s: %s", xb.Namespace, xb.Name, c.Status, c.Reason, c.Message)
	case c.ObservedGeneration != xb.Generation || xb.Status.ObservedGeneration != xb.Generation:
		return fmt.Errorf("%s/%s: generation %d, observed %d (condition %d)", xb.Namespace, xb.Name,
			xb.Generation, xb.Status.ObservedGeneration, c.ObservedGeneration)
	}
	return nil
}
