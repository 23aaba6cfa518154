package noisy

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/dnstest"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// Names of the attackers' objects.
const (
	// dnsZone holds the attackers' DNS names, on the test's server.
	dnsZone = "noisy.test"
	// attackerProvider admits the label-flip attacker's addresses.
	attackerProvider = "attacker-static"
	// stormProvider admits the storm's namespace but not its address.
	stormProvider = "attacker-storm"
	// dnsProvider is a dns BackendProvider on the test's DNS server,
	// admitting every attacker with DNS names.
	dnsProvider = "attacker-dns"
	// flipLabel is the label of spec.service.labels the attackers flip.
	flipLabel = "noisy.backendslice.io/flip"
	// refusedAddr is outside the storm provider's allowedCIDRs.
	refusedAddr = "192.0.2.250"
)

// attack is one class of noisy tenant, in a namespace of its own.
type attack struct {
	// key names the attack in -attacks; ns is its namespace.
	key, ns string
	// lookups says that its sources look names up through dnsProvider.
	lookups bool
	// Title names it in the report.
	title string
	// setup creates the attacker's backends (and waits for what the
	// attack needs published) and returns their names.
	setup func(t *testing.T, a attack) []string
	// period is how often every backend's label is flipped; zero: the
	// backends are left alone once created.
	period func() time.Duration
	// what describes the attack for the report, at the flags' scale.
	what func() string
}

// allAttacks are the attack classes, in the order -attacks defaults to.
func allAttacks() []attack {
	return []attack{
		{key: "flips", ns: "attacker-flips", title: "label flips on many slices", setup: setupFlips,
			period: func() time.Duration { return *flipPeriod },
			what: func() string {
				return fmt.Sprintf("%d backends of %d static addresses each, `maxEndpointsPerSlice: %d` (raised to the floor of 10), "+
					"one label of `spec.service.labels` flipped on every backend every %s: the controller copies it onto the Service and every slice",
					*attackBackends, *attackAddresses, minEndpointsPerSlice, *flipPeriod)
			}},
		{key: "dns", ns: "attacker-dns", lookups: true, title: "slow DNS", setup: setupSlowDNS,
			period: func() time.Duration { return *dnsEditPeriod },
			what: func() string {
				return fmt.Sprintf("%d backends, each with a dns source (BackendProvider `%s`) whose name the test's server never answers, "+
					"so that each lookup waits for the query timeout; a label edited on every backend every %s", *dnsBackends, dnsProvider, *dnsEditPeriod)
			}},
		{key: "storm", ns: "attacker-storm", lookups: true, title: "event and status storm", setup: setupStorm,
			period: func() time.Duration { return *stormPeriod },
			what: func() string {
				return fmt.Sprintf("%d backends, each with the static address %s outside its provider's allowedCIDRs and a dns name that is NXDOMAIN; "+
					"a label edited on every backend every %s: each reconcile patches the status and records Warning events", *stormBackends, refusedAddr, *stormPeriod)
			}},
		{key: "servfail", ns: "attacker-servfail", lookups: true, title: "SERVFAIL retries", setup: setupServFail,
			period: func() time.Duration { return 0 },
			what: func() string {
				return fmt.Sprintf("%d headless backends, each with a dns name that answers SERVFAIL: their reconciles fail and are retried "+
					"through the work queue's retry limiter; nobody edits them", *servfailCount)
			}},
	}
}

// chosenAttacks are the attacks -attacks names, in its order.
func chosenAttacks(t *testing.T) []attack {
	t.Helper()
	byKey := map[string]attack{}
	for _, a := range allAttacks() {
		byKey[a.key] = a
	}
	var out []attack
	for _, k := range strings.Split(*attacks, ",") {
		a, ok := byKey[strings.TrimSpace(k)]
		if !ok {
			t.Fatalf("-attacks: unknown attack %q (flips, dns, storm, servfail)", k)
		}
		out = append(out, a)
	}
	return out
}

// createAttackerProviders creates the namespaces and providers of the
// attacks and makes the test's DNS server answer the attackers' names
// as each attack needs.
func createAttackerProviders(t *testing.T, all []attack) {
	t.Helper()
	var dnsNamespaces []string
	for _, a := range all {
		createNamespace(t, a.ns)
		if a.lookups {
			dnsNamespaces = append(dnsNamespaces, a.ns)
		}
	}
	createProvider(t, attackerProvider, []string{"attacker-flips"}, "198.51.100.0/24", "203.0.113.0/25")
	createProvider(t, stormProvider, []string{"attacker-storm"}, "198.51.100.0/24")
	if len(dnsNamespaces) > 0 {
		framework.Create(t, &v1alpha1.BackendProvider{
			ObjectMeta: metav1.ObjectMeta{Name: dnsProvider},
			Spec: v1alpha1.BackendProviderSpec{
				DNS:        &v1alpha1.DNSProvider{Resolvers: []string{resolver.Addr}},
				Namespaces: v1alpha1.NamespaceSelection{Names: dnsNamespaces},
			},
		})
	}
	// Names without records are NXDOMAIN: the storm's need nothing.
	for i := range *dnsBackends {
		resolver.Fail(slowName(i), dnstest.Silent)
	}
	for i := range *servfailCount {
		resolver.Fail(failName(i), dnstest.ServFail, mdns.TypeA, mdns.TypeAAAA)
	}
}

// Names of the attackers' DNS sources.
func slowName(i int) string { return fmt.Sprintf("slow-%d.%s", i, dnsZone) }
func goneName(i int) string { return fmt.Sprintf("gone-%d.%s", i, dnsZone) }
func failName(i int) string { return fmt.Sprintf("fail-%d.%s", i, dnsZone) }

// createBackends creates the n backends of(0), ..., of(n-1), each with
// the flip label set, and returns their names.
func createBackends(t *testing.T, n int, of func(i int) *v1alpha1.ExternalBackend) []string {
	t.Helper()
	names := make([]string, n)
	for i := range n {
		xb := of(i)
		xb.Spec.Service.Labels = map[string]string{flipLabel: "a"}
		framework.Create(t, xb)
		names[i] = xb.Name
	}
	return names
}

// setupFlips creates the label-flip attacker's backends and waits until
// every address is published in slices of the floor's size.
func setupFlips(t *testing.T, a attack) []string {
	t.Helper()
	if *attackAddresses < 1 || *attackAddresses > 381 || *attackBackends < 1 {
		t.Fatalf("-backends %d -addresses %d: at least one backend, 1 to 381 addresses", *attackBackends, *attackAddresses)
	}
	addrs := attackerAddrs(*attackAddresses)
	names := createBackends(t, *attackBackends, func(i int) *v1alpha1.ExternalBackend {
		xb := backendOf(a.ns, fmt.Sprintf("a%d", i), staticSource(attackerProvider, addrs...))
		xb.Spec.MaxEndpointsPerSlice = ptr.To(minEndpointsPerSlice)
		return xb
	})
	waitConverged(t, a.ns, len(names)*len(addrs))
	return names
}

// setupSlowDNS creates backends whose names never answer.
func setupSlowDNS(t *testing.T, a attack) []string {
	t.Helper()
	return createBackends(t, *dnsBackends, func(i int) *v1alpha1.ExternalBackend {
		return backendOf(a.ns, fmt.Sprintf("slow%d", i), dnsSource(slowName(i)))
	})
}

// setupStorm creates backends with a refused address and an NXDOMAIN name.
func setupStorm(t *testing.T, a attack) []string {
	t.Helper()
	return createBackends(t, *stormBackends, func(i int) *v1alpha1.ExternalBackend {
		return backendOf(a.ns, fmt.Sprintf("storm%d", i), staticSource(stormProvider, refusedAddr), dnsSource(goneName(i)))
	})
}

// setupServFail creates headless backends whose names answer SERVFAIL.
func setupServFail(t *testing.T, a attack) []string {
	t.Helper()
	return createBackends(t, *servfailCount, func(i int) *v1alpha1.ExternalBackend {
		xb := backendOf(a.ns, fmt.Sprintf("fail%d", i), dnsSource(failName(i)))
		xb.Spec.Service.Type = v1alpha1.ServiceTypeHeadless
		return xb
	})
}

// editor flips flipLabel on backends in turn.
type editor struct {
	cancel  context.CancelFunc
	done    sync.WaitGroup
	written atomic.Int64
	failed  atomic.Int64
}

// startEditing flips flipLabel on every backend of names in ns each
// period, as a merge patch of spec.service.labels, until stop; no period
// starts nothing.
func startEditing(t *testing.T, ns string, names []string, period time.Duration) *editor {
	t.Helper()
	ectx, cancel := context.WithCancel(ctx)
	e := &editor{cancel: cancel}
	if period <= 0 {
		return e
	}
	e.done.Go(func() {
		tick := time.NewTicker(period)
		defer tick.Stop()
		value := "a"
		for {
			select {
			case <-ectx.Done():
				return
			case <-tick.C:
			}
			value = map[string]string{"a": "b", "b": "a"}[value]
			patch := client.RawPatch(types.MergePatchType,
				fmt.Appendf(nil, `{"spec":{"service":{"labels":{%q:%q}}}}`, flipLabel, value))
			for _, name := range names {
				e.patch(ectx, t, &v1alpha1.ExternalBackend{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, patch)
			}
		}
	})
	return e
}

// patch writes one edit and counts it; the first failure is logged.
func (e *editor) patch(ctx context.Context, t *testing.T, xb *v1alpha1.ExternalBackend, patch client.Patch) {
	if err := framework.E().Client.Patch(ctx, xb, patch); err != nil {
		if ctx.Err() == nil && e.failed.Add(1) == 1 {
			t.Logf("attacker edit: %v", err)
		}
		return
	}
	e.written.Add(1)
}

// stop ends the edits and says how many were written and how many failed.
func (e *editor) stop() (written, failed int64) {
	e.cancel()
	e.done.Wait()
	return e.written.Load(), e.failed.Load()
}

// deleteBackends deletes every backend of ns and waits until they are
// gone, so that the next phase starts without them.
func deleteBackends(t *testing.T, ns string) {
	t.Helper()
	k8s := framework.E().Client
	if err := k8s.DeleteAllOf(ctx, &v1alpha1.ExternalBackend{}, client.InNamespace(ns)); err != nil {
		t.Fatalf("deleting the backends of %s: %v", ns, err)
	}
	framework.Eventually(t, *opTimeout, "the backends of "+ns+" are gone", func() error {
		var list v1alpha1.ExternalBackendList
		if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return err
		}
		if n := len(list.Items); n > 0 {
			return fmt.Errorf("%d left", n)
		}
		return nil
	})
}
