package tenancy_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/awstest"
	"github.com/backendslice/backendslice/test/consultest"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// TestRevocation takes a namespace's access to a provider away in each
// way the platform team can: the namespace's labels changed so that the
// provider's selector no longer matches, the namespace taken out of the
// provider's names, the provider deleted, its allowedCIDRs shrunk, its
// allowedServices narrowed; and the database's owner takes the namespace
// out of its consent tag. The endpoints that came through the provider
// are withdrawn at once: gone from the slices within withdrawBound
// although the backend drains for an hour, neither draining nor held.
// Ready and Resolved, and the Warning event, say so, and never that the
// endpoints are kept (wantTold). A consent taken back drains instead, as
// a deleted database does (the two must look alike), and the messages say
// that. Where access comes back, they are published again.
func TestRevocation(t *testing.T) {
	t.Parallel()
	t.Run("namespace-labels", func(t *testing.T) {
		t.Parallel()
		ns := newNamespace(t, "relabelled", team("payments"))
		bp := uniqueName(ns, "static")
		createProvider(t, bp, admits("payments"), staticSpec("192.0.2.0/24", "2001:db8::/32"))
		xb := backend(ns, "db", drainHour, staticSource(bp, "192.0.2.71", "2001:db8::71"))
		framework.Create(t, xb)
		waitStates(t, ns, "db", statesOf(ready, "192.0.2.71", "2001:db8::71"))
		framework.WaitReady(t, xb)

		start := time.Now()
		setNamespaceLabels(t, ns, team("web"))
		withdrawn(t, start, ns, "db", map[string]string{})
		waitRefused(t, xb, fmt.Sprintf("BackendProvider %q", bp), "namespace "+ns, "spec.namespaces", withdrawnTold("fixed"))
		wantTold(t, xb, withdrawnTold("fixed"))
		wantNotDraining(t, xb, "192.0.2.71", "2001:db8::71")

		setNamespaceLabels(t, ns, team("payments"))
		waitStates(t, ns, "db", statesOf(ready, "192.0.2.71", "2001:db8::71"))
		framework.WaitReady(t, xb)
	})

	t.Run("provider-deleted", func(t *testing.T) {
		t.Parallel()
		ns := newNamespace(t, "deleted", nil)
		bp := uniqueName(ns, "static")
		createProvider(t, bp, admits("", ns), staticSpec("192.0.2.0/24"))
		xb := backend(ns, "db", drainHour, staticSource(bp, "192.0.2.72", "192.0.2.73"))
		framework.Create(t, xb)
		waitStates(t, ns, "db", statesOf(ready, "192.0.2.72", "192.0.2.73"))

		start := time.Now()
		deleteProvider(t, bp)
		withdrawn(t, start, ns, "db", map[string]string{})
		waitRefused(t, xb, fmt.Sprintf("BackendProvider %q does not exist", bp), withdrawnTold("fixed"))
		wantTold(t, xb, withdrawnTold("fixed"))
		wantNotDraining(t, xb, "192.0.2.72", "192.0.2.73")

		createProvider(t, bp, admits("", ns), staticSpec("192.0.2.0/24"))
		waitStates(t, ns, "db", statesOf(ready, "192.0.2.72", "192.0.2.73"))
		framework.WaitReady(t, xb)
	})

	t.Run("namespace-unnamed", func(t *testing.T) {
		t.Parallel()
		ns := newNamespace(t, "unnamed", nil)
		bp := uniqueName(ns, "static")
		createProvider(t, bp, admits("", ns, "billing"), staticSpec("192.0.2.0/24"))
		xb := backend(ns, "db", drainHour, staticSource(bp, "192.0.2.91", "192.0.2.92"))
		framework.Create(t, xb)
		waitStates(t, ns, "db", statesOf(ready, "192.0.2.91", "192.0.2.92"))
		framework.WaitReady(t, xb)

		start := time.Now()
		editProvider(t, bp, func(p *v1alpha1.BackendProvider) { p.Spec.Namespaces.Names = []string{"billing"} })
		withdrawn(t, start, ns, "db", map[string]string{})
		waitRefused(t, xb, fmt.Sprintf("BackendProvider %q", bp), "namespace "+ns, "spec.namespaces", withdrawnTold("fixed"))
		wantTold(t, xb, withdrawnTold("fixed"))
		wantNotDraining(t, xb, "192.0.2.91", "192.0.2.92")

		editProvider(t, bp, func(p *v1alpha1.BackendProvider) { p.Spec.Namespaces.Names = []string{"billing", ns} })
		waitStates(t, ns, "db", statesOf(ready, "192.0.2.91", "192.0.2.92"))
		framework.WaitReady(t, xb)
	})

	t.Run("allowedCIDRs-shrunk", func(t *testing.T) {
		t.Parallel()
		// Through a DNS provider: the addresses a name resolves to are
		// bounded as fixed ones are.
		ns := newNamespace(t, "shrunk", nil)
		name := "shrunk-" + ns + "." + zone
		setAddrs(tenantDNS, name, "198.51.100.71", "198.51.100.72")
		bp := uniqueName(ns, "dns")
		createProvider(t, bp, admits("", ns), v1alpha1.BackendProviderSpec{
			DNS: &v1alpha1.DNSProvider{Resolvers: []string{tenantDNS.Addr}}, AllowedCIDRs: []string{"198.51.100.0/24"},
		})
		xb := backend(ns, "db", drainHour, dnsSource(bp, name))
		framework.Create(t, xb)
		waitStates(t, ns, "db", statesOf(ready, "198.51.100.71", "198.51.100.72"))
		framework.WaitReady(t, xb)

		start := time.Now()
		editProvider(t, bp, func(p *v1alpha1.BackendProvider) { p.Spec.AllowedCIDRs = []string{"198.51.100.71/32"} })
		withdrawn(t, start, ns, "db", statesOf(ready, "198.51.100.71"))
		framework.WaitCondition(t, xb, v1alpha1.ConditionResolved, metav1.ConditionTrue, v1alpha1.ReasonAddressesDropped)
		framework.WaitReady(t, xb)
		wantDropped(t, xb, "198.51.100.72", "spec.allowedCIDRs", "198.51.100.71/32")
		waitEvent(t, xb, corev1.EventTypeWarning, v1alpha1.ReasonAddressesDropped, "198.51.100.72", "allowedCIDRs")
		wantNotDraining(t, xb, "198.51.100.72")
		wantMessage(t, xb, v1alpha1.ConditionResolved, "1 address(es) not published, and withdrawn at once (not drained) where they were; status.dropped says why")
		wantMessage(t, xb, v1alpha1.ConditionReady, "1 of 1 endpoint(s) ready in 1 EndpointSlice(s)")
		wantTold(t, xb)
	})

	t.Run("allowedServices-narrowed", func(t *testing.T) {
		t.Parallel()
		ns := newNamespace(t, "narrowed", nil)
		service := "payments-" + ns
		proxy := consultest.NewProxy(t, east.Addr)
		secret := uniqueName(ns, "token")
		putSecret(t, secret, "token", readToken(t, east).Secret)
		register(t, east, consultest.Service{ID: service + "-1", Name: service, Address: "203.0.113.71"})
		bp := uniqueName(ns, "consul")
		createProvider(t, bp, admits("", ns), consulSpec(proxy.Addr, "east", secret, "payments-*"))
		xb := backend(ns, "db", drainHour, consulSource(bp, service))
		framework.Create(t, xb)
		waitStates(t, ns, "db", statesOf(ready, "203.0.113.71"))
		framework.WaitReady(t, xb)

		start := time.Now()
		editProvider(t, bp, func(p *v1alpha1.BackendProvider) { p.Spec.Consul.AllowedServices = []string{"billing-*"} })
		withdrawn(t, start, ns, "db", map[string]string{})
		waitRefused(t, xb, fmt.Sprintf("%q is not among the services BackendProvider %q serves", service, bp), "spec.consul.allowedServices [billing-*]",
			withdrawnTold("catalog"))
		wantTold(t, xb, withdrawnTold("catalog"))
		wantNotDraining(t, xb, "203.0.113.71")

		// Refused, the source is watched no more: a change of the service
		// in Consul costs no query.
		asked := queriesOf(proxy, service)
		register(t, east, consultest.Service{ID: service + "-2", Name: service, Address: "203.0.113.72"})
		time.Sleep(time.Second)
		if n := queriesOf(proxy, service) - asked; n != 0 {
			t.Errorf("the refused service was queried %d time(s) after its refusal", n)
		}
		if got, err := states(t, ns, "db"); err != nil || len(got) != 0 {
			t.Errorf("refused backend publishes %v (%v)", got, err)
		}
	})

	t.Run("datacenter-narrowed", func(t *testing.T) {
		t.Parallel()
		// The provider pins the datacenters its token may be asked about:
		// a source of the same service in its datacenter is withdrawn at
		// once when the platform team narrows allowedDatacenters, and asks
		// Consul nothing more.
		ns := newNamespace(t, "dc-narrowed", nil)
		service := "orders-" + ns
		proxy := consultest.NewProxy(t, east.Addr)
		secret := uniqueName(ns, "token")
		putSecret(t, secret, "token", readToken(t, east).Secret)
		register(t, east, consultest.Service{ID: service + "-1", Name: service, Address: "203.0.113.81"})
		bp := uniqueName(ns, "consul")
		createProvider(t, bp, admits("", ns), consulSpec(proxy.Addr, "east", secret, "orders-*"))
		xb := backend(ns, "db", drainHour, consulSource(bp, service))
		framework.Create(t, xb)
		waitStates(t, ns, "db", statesOf(ready, "203.0.113.81"))
		framework.WaitReady(t, xb)

		start := time.Now()
		editProvider(t, bp, func(p *v1alpha1.BackendProvider) { p.Spec.Consul.AllowedDatacenters = []string{"west"} })
		withdrawn(t, start, ns, "db", map[string]string{})
		waitRefused(t, xb, fmt.Sprintf("spec.sources[catalog].consul.datacenter: %q is not among the datacenters BackendProvider %q serves", "east", bp),
			"spec.consul.allowedDatacenters [west]", withdrawnTold("catalog"))
		wantTold(t, xb, withdrawnTold("catalog"))
		asked := queriesOf(proxy, service)
		register(t, east, consultest.Service{ID: service + "-2", Name: service, Address: "203.0.113.82"})
		time.Sleep(time.Second)
		if n := queriesOf(proxy, service) - asked; n != 0 {
			t.Errorf("the refused source's service was queried %d time(s) after its refusal", n)
		}
	})

	t.Run("provider-deleted-while-draining", func(t *testing.T) {
		t.Parallel()
		// An endpoint that left the source earlier and drains came through
		// the provider too: it goes with the others.
		ns := newNamespace(t, "deleted-draining", nil)
		bp := uniqueName(ns, "static")
		createProvider(t, bp, admits("", ns), staticSpec("192.0.2.0/24"))
		xb := backend(ns, "db", drainHour, staticSource(bp, "192.0.2.74", "192.0.2.75"))
		framework.Create(t, xb)
		waitStates(t, ns, "db", statesOf(ready, "192.0.2.74", "192.0.2.75"))
		if err := framework.Update(t, xb, func(x *v1alpha1.ExternalBackend) {
			x.Spec.Sources = []v1alpha1.Source{staticSource(bp, "192.0.2.74")}
		}); err != nil {
			t.Fatal(err)
		}
		waitStates(t, ns, "db", map[string]string{"192.0.2.74": ready, "192.0.2.75": terminating})

		start := time.Now()
		deleteProvider(t, bp)
		withdrawn(t, start, ns, "db", map[string]string{})
		waitRefused(t, xb, fmt.Sprintf("BackendProvider %q does not exist", bp), withdrawnTold("fixed"))
		wantTold(t, xb, withdrawnTold("fixed"))
		wantNotDraining(t, xb, "192.0.2.74", "192.0.2.75")
	})

	t.Run("consent-withdrawn", func(t *testing.T) {
		t.Parallel()
		// The owner takes the namespace out of the database's consent
		// tag: the source fails as for a database that does not exist
		// (a tenant must not tell the two apart), so what it published
		// drains for the backend's hour, and the messages say so.
		fake := newFake(t)
		ns := newNamespace(t, "consent", nil)
		id := "orders-" + ns
		fake.PutDBInstance(dbInstance(id, "192.0.2.93", map[string]string{v1alpha1.DefaultConsentTag: "billing," + ns}))
		bp := uniqueName(ns, "aws")
		createProvider(t, bp, admits("", ns), awsSpec(fake.URL, "", v1alpha1.DefaultConsentTag))
		xb := backend(ns, "db", drainHour, rdsSource(bp, id))
		framework.Create(t, xb)
		waitStates(t, ns, "db", statesOf(ready, "192.0.2.93"))
		framework.WaitReady(t, xb)

		fake.UpdateDBInstance(id, func(i *awstest.DBInstance) { i.Tags = map[string]string{v1alpha1.DefaultConsentTag: "billing"} })
		drains := "what source db published drains for the drain period, then leaves"
		parts := []string{"DB instance " + id, "no tag " + v1alpha1.DefaultConsentTag + " naming namespace " + ns, drains}
		waitConditions(t, xb, metav1.ConditionFalse, v1alpha1.ReasonAccessDenied, parts...)
		waitEvent(t, xb, corev1.EventTypeWarning, v1alpha1.ReasonAccessDenied, parts...)
		wantTold(t, xb, drains)
		waitStates(t, ns, "db", statesOf(terminating, "192.0.2.93"))
	})
}

// withdrawnTold is what Ready and Resolved say of the endpoints of a
// source admission refuses.
func withdrawnTold(source string) string {
	return "nothing is published for source " + source + ": what it published was withdrawn at once, not drained"
}

// wantTold checks that the Ready and Resolved messages of xb say every
// part of what happened to the endpoints, and nothing of what did not:
// that endpoints stay published, are kept, or drain, unless a part says
// it. (The events are read by waitRefused and waitEvent.)
func wantTold(t *testing.T, xb *v1alpha1.ExternalBackend, parts ...string) {
	t.Helper()
	said := strings.Join(parts, " ")
	var never []string
	for _, n := range []string{"stays published", "kept", "drains"} {
		if !strings.Contains(said, n) {
			never = append(never, n)
		}
	}
	cur := framework.Get(t, xb)
	for _, typ := range []string{v1alpha1.ConditionResolved, v1alpha1.ConditionReady} {
		c := meta.FindStatusCondition(cur.Status.Conditions, typ)
		if c == nil {
			t.Errorf("%s/%s: no %s condition", xb.Namespace, xb.Name, typ)
			continue
		}
		if m := missing(c.Message, parts...); len(m) > 0 {
			t.Errorf("%s/%s %s message %q lacks %q", xb.Namespace, xb.Name, typ, c.Message, m)
		}
		for _, n := range never {
			if strings.Contains(c.Message, n) {
				t.Errorf("%s/%s %s message %q says %q, which did not happen", xb.Namespace, xb.Name, typ, c.Message, n)
			}
		}
	}
}

// wantMessage waits until xb's condition of type typ has a message
// holding every part.
func wantMessage(t *testing.T, xb *v1alpha1.ExternalBackend, typ string, parts ...string) {
	t.Helper()
	framework.Eventually(t, framework.Timeout, fmt.Sprintf("%s/%s %s message naming %q", xb.Namespace, xb.Name, typ, parts), func() error {
		c := meta.FindStatusCondition(framework.Get(t, xb).Status.Conditions, typ)
		switch {
		case c == nil:
			return fmt.Errorf("no %s condition", typ)
		case len(missing(c.Message, parts...)) > 0:
			return fmt.Errorf("%s message %q lacks %q", typ, c.Message, missing(c.Message, parts...))
		}
		return nil
	})
}

// TestDeniedDrainingAddressLeavesAtOnce: an address a static source
// published and then dropped drains for the backend's hour; once the
// provider's allowedCIDRs no longer include it, it may not be published
// any more, draining or not: it leaves at once, and the address still
// listed and allowed stays ready.
func TestDeniedDrainingAddressLeavesAtOnce(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "denied-draining", nil)
	bp := uniqueName(ns, "static")
	createProvider(t, bp, admits("", ns), staticSpec("192.0.2.0/24"))
	xb := backend(ns, "db", drainHour, staticSource(bp, "192.0.2.81", "192.0.2.82"))
	framework.Create(t, xb)
	waitStates(t, ns, "db", statesOf(ready, "192.0.2.81", "192.0.2.82"))
	if err := framework.Update(t, xb, func(x *v1alpha1.ExternalBackend) {
		x.Spec.Sources = []v1alpha1.Source{staticSource(bp, "192.0.2.81")}
	}); err != nil {
		t.Fatal(err)
	}
	waitStates(t, ns, "db", map[string]string{"192.0.2.81": ready, "192.0.2.82": terminating})

	start := time.Now()
	editProvider(t, bp, func(p *v1alpha1.BackendProvider) { p.Spec.AllowedCIDRs = []string{"192.0.2.81/32"} })
	withdrawn(t, start, ns, "db", statesOf(ready, "192.0.2.81"))
	wantNotDraining(t, xb, "192.0.2.82")
	framework.WaitReady(t, xb)
}

// wantDropped waits until status.dropped lists addr with a reason holding
// every part.
func wantDropped(t *testing.T, xb *v1alpha1.ExternalBackend, addr string, parts ...string) {
	t.Helper()
	framework.Eventually(t, framework.Timeout, fmt.Sprintf("%s/%s status.dropped lists %s", xb.Namespace, xb.Name, addr), func() error {
		dropped := framework.Get(t, xb).Status.Dropped
		i := slices.IndexFunc(dropped, func(d v1alpha1.DroppedAddress) bool { return d.Address == addr })
		switch {
		case i < 0:
			return fmt.Errorf("status.dropped: %+v", dropped)
		case len(missing(dropped[i].Reason, parts...)) > 0:
			return fmt.Errorf("reason %q lacks %q", dropped[i].Reason, strings.Join(missing(dropped[i].Reason, parts...), ", "))
		}
		return nil
	})
}

// TestRevokedWhileControllerDown deletes a provider while no controller
// runs (a crash, a leader change): the controller that starts next has no
// memory of what the refused source published, yet those endpoints must
// still leave at once, not drain for the backend's hour. Not parallel: it
// restarts the controller every test shares.
func TestRevokedWhileControllerDown(t *testing.T) {
	ns := newNamespace(t, "revoked-down", nil)
	bp := uniqueName(ns, "static")
	createProvider(t, bp, admits("", ns), staticSpec("192.0.2.0/24"))
	xb := backend(ns, "db", drainHour, staticSource(bp, "192.0.2.76"))
	framework.Create(t, xb)
	waitStates(t, ns, "db", statesOf(ready, "192.0.2.76"))
	framework.WaitReady(t, xb)

	framework.RestartControllerAfter(t, func() { deleteProvider(t, bp) })
	// The new controller has read the deletion once it says so.
	waitConditions(t, xb, metav1.ConditionFalse, v1alpha1.ReasonProviderNotAdmitted, fmt.Sprintf("BackendProvider %q does not exist", bp),
		withdrawnTold("fixed"))
	withdrawn(t, time.Now(), ns, "db", map[string]string{})
	waitEvent(t, xb, corev1.EventTypeWarning, v1alpha1.ReasonProviderNotAdmitted, bp, withdrawnTold("fixed"))
	wantTold(t, xb, withdrawnTold("fixed"))
	wantNotDraining(t, xb, "192.0.2.76")
}

// TestRevokedWhileControllerDownBesideAnAdmittedSource is the case above
// with a second source, through another provider that still admits the
// namespace and whose allowedCIDRs hold the revoked source's address too:
// nothing rules that address out, so only the slices' record of which
// source published it (backendslice.io/sources) tells the controller
// that started next to withdraw it at once rather than drain it for an
// hour. Not parallel: it restarts the controller every test shares.
func TestRevokedWhileControllerDownBesideAnAdmittedSource(t *testing.T) {
	ns := newNamespace(t, "revoked-beside", nil)
	revoked, kept := uniqueName(ns, "revoked"), uniqueName(ns, "kept")
	createProvider(t, revoked, admits("", ns), staticSpec("192.0.2.0/24"))
	createProvider(t, kept, admits("", ns), staticSpec("192.0.2.0/24"))
	second := staticSource(kept, "192.0.2.78")
	second.Name = "kept"
	xb := backend(ns, "db", drainHour, staticSource(revoked, "192.0.2.77"), second)
	framework.Create(t, xb)
	waitStates(t, ns, "db", statesOf(ready, "192.0.2.77", "192.0.2.78"))
	framework.WaitReady(t, xb)

	framework.RestartControllerAfter(t, func() { deleteProvider(t, revoked) })
	withdrawn(t, time.Now(), ns, "db", statesOf(ready, "192.0.2.78"))
	wantNotDraining(t, xb, "192.0.2.77")
}
