package noisy

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/docsection"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// Names of the victim's side.
const (
	victimNS = "victim"
	// bystanderNS is admitted with the victim by the revocable provider,
	// so that revoking the victim leaves the provider's names non-empty.
	bystanderNS = "bystander"
	// victimProvider admits the victim.
	victimProvider = "victim-static"
	// revocableProvider admits the victim and the bystander; revocations
	// take the victim off its names.
	revocableProvider = "victim-revocable"
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

// measure sets up the victim and the attackers' providers, measures the
// victim's latencies with nobody else busy, then under each attack of
// -attacks in turn.
func measure(t *testing.T) Report {
	began := time.Now()
	chosen := chosenAttacks(t)
	r := Report{
		CPUs: runtime.NumCPU(), Go: runtime.Version(), LoadBefore: docsection.LoadAverage(),
		Lease: running.opts.Lease, Warmup: *warmup, Settle: *settle, AttackFor: *attackFor,
		Busy: busyVictim(), Quiet: quietVictim(),
	}
	createAttackerProviders(t, chosen)
	w := setupVictim(t)
	defer w.stop()
	lease := watchLease(t)
	defer lease.stop()

	bare := newBareClient(t)
	t.Logf("idle: nobody but the victim")
	r.Idle = runIdle(t, w, bare, lease)
	for _, a := range chosen {
		t.Logf("attack %s: %s", a.key, a.what())
		r.Attacks = append(r.Attacks, runAttack(t, w, bare, lease, a))
	}
	r.LoadAfter = docsection.LoadAverage()
	r.Took = time.Since(began)
	return r
}

// setupVictim creates the victim's namespaces, providers and standing
// backends, waits until they are published, and returns a watch of them.
func setupVictim(t *testing.T) *watcher {
	t.Helper()
	createNamespace(t, victimNS)
	createNamespace(t, bystanderNS)
	createProvider(t, victimProvider, []string{victimNS}, "192.0.2.0/24")
	createProvider(t, revocableProvider, []string{victimNS, bystanderNS}, "192.0.2.0/24")
	framework.Create(t, backend(victimNS, flipBackend, victimProvider, flipAddrs...))
	framework.Create(t, backend(victimNS, revBackend, revocableProvider, revAddrs...))
	w, err := newWatcher(victimNS)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{flipBackend, revBackend} {
		if _, err := w.until(*opTimeout, readyFor(name)); err != nil {
			w.stop()
			t.Fatalf("victim backend %s: %v", name, err)
		}
	}
	if _, err := w.until(*opTimeout, published(revBackend, revAddrs...)); err != nil {
		w.stop()
		t.Fatal(err)
	}
	return w
}

// Phase is what one phase measured: idle, or one attack from its setup
// to its backends' deletion.
type Phase struct {
	// Key and Title name the attack ("" and "idle" for the idle phase);
	// What describes it.
	Key, Title, What string
	// Busy and Quiet are the victim's latencies in each mode.
	Busy, Quiet Latencies
	// Bare is what a bare client's changes took (runBare): the API
	// server's own pace in the phase.
	Bare []time.Duration
	// Setup is how long the attacker's backends took to create (and, for
	// label flips, to publish); Took the whole phase.
	Setup, Took time.Duration
	// Lease is what the controller's lease did from the setup to the end
	// of the measurements.
	Lease LeaseStats
	// Edits is how many attacker edits were written (warm-up included);
	// EditErrors how many failed.
	Edits, EditErrors int64
	// The controller's writes in the phase, in the attacker's namespace
	// and the victim's.
	Attacker, Victim Writes
}

// Writes are the controller's writes to one namespace.
type Writes struct{ Slices, Services, Status, Events int64 }

// writesTo is the controller's writes to ns so far.
func writesTo(ns string) Writes {
	return Writes{
		Slices: writes.Of(ns, "endpointslices"), Services: writes.Of(ns, "services"),
		Status: writes.Of(ns, "externalbackends/status"), Events: writes.Of(ns, "events"),
	}
}

// since is the writes from before to w.
func (w Writes) since(before Writes) Writes {
	return Writes{w.Slices - before.Slices, w.Services - before.Services, w.Status - before.Status, w.Events - before.Events}
}

// runIdle times the victim with nobody else busy.
func runIdle(t *testing.T, w *watcher, bare client.Client, lease *leaseWatch) Phase {
	t.Helper()
	p := Phase{Title: "idle"}
	start, victimBefore := time.Now(), writesTo(victimNS)
	p.Busy, p.Quiet = timeVictim(t, w, "idle", false)
	p.Bare = runBare(t, w, bare, "idle", *quietCreates, time.Time{})
	p.Lease = lease.between(start, time.Now())
	p.Victim = writesTo(victimNS).since(victimBefore)
	p.Took = time.Since(start)
	return p
}

// runAttack sets up attack a, starts its edits, lets it warm up, times
// the victim and the bare client, stops the edits, deletes the attacker's
// backends and lets the controller settle.
func runAttack(t *testing.T, w *watcher, bare client.Client, lease *leaseWatch, a attack) Phase {
	t.Helper()
	p := Phase{Key: a.key, Title: a.title, What: a.what()}
	start, attackerBefore, victimBefore := time.Now(), writesTo(a.ns), writesTo(victimNS)
	names := a.setup(t, a)
	p.Setup = time.Since(start)
	t.Logf("%s: %d backends set up in %s; warming up for %s", a.key, len(names), p.Setup.Round(time.Millisecond), *warmup)
	ed := startEditing(t, a.ns, names, a.period())
	time.Sleep(*warmup)
	p.Busy, p.Quiet = timeVictim(t, w, a.key, true)
	p.Bare = runBare(t, w, bare, a.key, *quietCreates, time.Now().Add(*attackFor))
	p.Edits, p.EditErrors = ed.stop()
	p.Lease = lease.between(start, time.Now())
	deleteBackends(t, a.ns)
	time.Sleep(*settle)
	p.Attacker = writesTo(a.ns).since(attackerBefore)
	p.Victim = writesTo(victimNS).since(victimBefore)
	p.Took = time.Since(start)
	t.Logf("%s: longest lease renewal gap %s, %d holder change(s), %d manager exit(s)", a.key,
		p.Lease.LongestGap.Round(time.Millisecond), p.Lease.HolderChanges, len(p.Lease.Exits))
	return p
}

// minEndpointsPerSlice is the lowest spec.maxEndpointsPerSlice the CRD
// accepts (+kubebuilder:validation:Minimum=1).
const minEndpointsPerSlice int32 = 1

// attackerAddrs are n documentation addresses the attacker's provider
// admits: 198.51.100.1-254, then 203.0.113.1-127.
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

// createNamespace creates namespace ns.
func createNamespace(t *testing.T, ns string) {
	t.Helper()
	framework.Create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
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
	return backendOf(ns, name, staticSource(provider, addrs...))
}

// backendOf is an IPv4 ExternalBackend with one TCP port, no drain period
// and the sources.
func backendOf(ns, name string, sources ...v1alpha1.Source) *v1alpha1.ExternalBackend {
	return &v1alpha1.ExternalBackend{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.ExternalBackendSpec{
			Service:      v1alpha1.ServiceSpec{Ports: []v1alpha1.ServicePort{{Name: "tcp", Port: 5432}}},
			AddressTypes: []v1alpha1.AddressType{v1alpha1.AddressTypeIPv4},
			Sources:      sources,
			DrainPeriod:  &metav1.Duration{},
		},
	}
}

// staticSource lists addrs through provider.
func staticSource(provider string, addrs ...string) v1alpha1.Source {
	eps := make([]v1alpha1.StaticEndpoint, 0, len(addrs))
	for _, a := range addrs {
		eps = append(eps, v1alpha1.StaticEndpoint{Address: a})
	}
	return v1alpha1.Source{
		Name: "fixed", ProviderRef: &v1alpha1.ProviderReference{Name: provider},
		Static: &v1alpha1.StaticSource{Endpoints: eps},
	}
}

// dnsSource looks name up through the attackers' dns provider.
func dnsSource(name string) v1alpha1.Source {
	return v1alpha1.Source{
		Name: "lookup", ProviderRef: &v1alpha1.ProviderReference{Name: dnsProvider},
		DNS: &v1alpha1.DNSSource{Name: name},
	}
}

// waitConverged waits until every backend of ns is Ready and their slices
// publish want endpoints in all.
func waitConverged(t *testing.T, ns string, want int) {
	t.Helper()
	k8s := framework.E().Client
	framework.Eventually(t, 15*time.Minute, "the backends of "+ns+" converge", func() error {
		var slices discoveryv1.EndpointSliceList
		if err := k8s.List(ctx, &slices, client.InNamespace(ns),
			client.MatchingLabels{discoveryv1.LabelManagedBy: v1alpha1.ManagedByValue}); err != nil {
			return err
		}
		n := 0
		for _, s := range slices.Items {
			n += len(s.Endpoints)
		}
		if n != want {
			return fmt.Errorf("%d of %d endpoints published", n, want)
		}
		var list v1alpha1.ExternalBackendList
		if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
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
