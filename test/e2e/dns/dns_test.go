// Package dns_test runs the controller with the dns provider against a real
// kube-apiserver and an authoritative DNS server in the test process, and
// checks that each DNS behaviour ends in the right EndpointSlices and status.
package dns_test

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/providers/dns"
	"github.com/backendslice/backendslice/providers/static"
	"github.com/backendslice/backendslice/test/dnstest"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// zone is the zone the test server is authoritative for; each test uses
// names of its own in it, so that tests run in parallel.
const zone = "e2e.test"

// server is the DNS server the controller's dns provider asks.
var server *dnstest.Server

func TestMain(m *testing.M) {
	s, err := dnstest.New(append([]string{zone}, deniedZones...)...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	server = s
	code := framework.Run(m, framework.Options{Providers: func(providers.Waker) ([]providers.Provider, error) {
		// Only TestSilentNamesHoldNoWorker's names go unanswered, and they
		// must stay unanswered for longer than another namespace's backend
		// takes to become Ready on a loaded machine (at 500ms, a fresh CI
		// run's load outlasted it); a 1s floor lets records with TTL 1 be
		// followed every second.
		p, err := dns.New(dns.Options{
			Resolvers:    []string{s.Addr},
			QueryTimeout: 5 * time.Second,
			MinRefresh:   time.Second,
			MaxRefresh:   time.Minute,
		})
		if err != nil {
			return nil, err
		}
		return []providers.Provider{static.New(), p}, nil
	}})
	if err := s.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the DNS server:", err)
	}
	os.Exit(code)
}

// host is a name of the test in the zone.
func host(label string) string { return label + "." + zone }

// setAddrs gives name A and AAAA records with the TTL, replacing its
// records of both types; an address's family says which record it goes in.
func setAddrs(name string, ttl uint32, addrs ...string) {
	var v4, v6 []string
	for _, a := range addrs {
		if strings.Contains(a, ":") {
			v6 = append(v6, a)
		} else {
			v4 = append(v4, a)
		}
	}
	server.Set(name, mdns.TypeA, ttl, v4...)
	server.Set(name, mdns.TypeAAAA, ttl, v6...)
}

// lookup is a dns source named "lookup" of name, refreshed at least every
// second.
func lookup(name string) v1alpha1.Source {
	return v1alpha1.Source{Name: "lookup", DNS: &v1alpha1.DNSSource{
		Name: name, MinRefresh: &metav1.Duration{Duration: time.Second}}}
}

// backend is an ExternalBackend "db" in ns with one port, a 2s drain period
// and the given sources.
func backend(ns string, sources ...v1alpha1.Source) *v1alpha1.ExternalBackend {
	return &v1alpha1.ExternalBackend{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"},
		Spec: v1alpha1.ExternalBackendSpec{
			Service:     v1alpha1.ServiceSpec{Ports: []v1alpha1.ServicePort{{Name: "pg", Port: 5432}}},
			Sources:     sources,
			DrainPeriod: &metav1.Duration{Duration: 2 * time.Second},
		},
	}
}

// create creates backend "db", looking up name, in a namespace of the
// test's own, after edit (when not nil) changed it.
func create(t *testing.T, name string, edit func(*v1alpha1.ExternalBackend)) (string, *v1alpha1.ExternalBackend) {
	t.Helper()
	ns := framework.Namespace(t)
	xb := backend(ns, lookup(name))
	if edit != nil {
		edit(xb)
	}
	framework.Create(t, xb)
	return ns, xb
}

// publish gives the name label.e2e.test addresses with TTL 1s, creates a
// backend that looks it up and waits until it publishes them all ready.
func publish(t *testing.T, label string, addrs ...string) (ns, name string, xb *v1alpha1.ExternalBackend) {
	t.Helper()
	name = host(label)
	setAddrs(name, 1, addrs...)
	ns, xb = create(t, name, nil)
	waitStates(t, ns, allReady(addrs...))
	return ns, name, xb
}

// Endpoint states, as framework.States writes them.
const (
	ready       = "true/true/false"
	notServing  = "false/false/false"
	terminating = "false/true/true"
)

// waitStates waits until the slices of db in ns publish exactly the
// addresses of want the API server serves, and says how long that took.
func waitStates(t *testing.T, ns string, want map[string]string) time.Duration {
	t.Helper()
	want = framework.ServedOf(want)
	start := time.Now()
	framework.Eventually(t, framework.Timeout, fmt.Sprintf("endpoints %v", want), func() error {
		got, err := framework.States(framework.Slices(t, ns, "db"))
		if err != nil {
			return err
		}
		if !maps.Equal(got, want) {
			return fmt.Errorf("published %v", got)
		}
		return nil
	})
	return time.Since(start)
}

// allReady maps each address to the ready state.
func allReady(addrs ...string) map[string]string {
	out := map[string]string{}
	for _, a := range addrs {
		out[a] = ready
	}
	return out
}

// sourceStatus is the status of the named source, failing the test when
// there is none.
func sourceStatus(t *testing.T, xb *v1alpha1.ExternalBackend, name string) v1alpha1.SourceStatus {
	t.Helper()
	for _, s := range xb.Status.Sources {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no status.sources[%s] in %+v", name, xb.Status.Sources)
	return v1alpha1.SourceStatus{}
}

// expectMessage checks that condition typ's message holds each of words.
func expectMessage(t *testing.T, xb *v1alpha1.ExternalBackend, typ string, words ...string) {
	t.Helper()
	c := meta.FindStatusCondition(xb.Status.Conditions, typ)
	if c == nil {
		t.Fatalf("no %s condition", typ)
	}
	for _, w := range words {
		if !strings.Contains(c.Message, w) {
			t.Errorf("%s message %q lacks %q", typ, c.Message, w)
		}
	}
}

// TestResolvesBothFamiliesThroughCNAMEs publishes the A and AAAA records
// found at the end of a CNAME chain, one slice a family, and no FQDN slice
// since the spec does not ask for one.
func TestResolvesBothFamiliesThroughCNAMEs(t *testing.T) {
	t.Parallel()
	server.Set(host("api"), mdns.TypeCNAME, 60, host("edge")+".")
	server.Set(host("edge"), mdns.TypeCNAME, 60, host("dual")+".")
	setAddrs(host("dual"), 60, "192.0.2.10", "192.0.2.11", "2001:db8::10")
	ns, xb := create(t, host("api"), nil)
	cur := framework.WaitReady(t, xb)
	waitStates(t, ns, allReady("192.0.2.10", "192.0.2.11", "2001:db8::10"))

	var types []discoveryv1.AddressType
	for _, s := range framework.Slices(t, ns, "db") {
		types = append(types, s.AddressType)
	}
	slices.Sort(types)
	if want := framework.ServedTypes(); !slices.Equal(types, want) {
		t.Errorf("slices of types %v, want one of each of %v", types, want)
	}
	src := sourceStatus(t, cur, "lookup")
	if src.Kind != "dns" || src.Endpoints != 3 || src.LastSuccessTime == nil || src.Stale || src.LastError != "" {
		t.Errorf("status.sources[lookup] = %+v, want kind dns, 3 endpoints, a success time, not stale", src)
	}
}

// TestFollowsRecordChanges changes the records under a published name: the
// slices follow at the next refresh (TTL 1s), an address that goes drains
// as terminating for the drain period and then leaves.
func TestFollowsRecordChanges(t *testing.T) {
	t.Parallel()
	ns, name, _ := publish(t, "changing", "192.0.2.20", "2001:db8::20")

	setAddrs(name, 1, "192.0.2.20", "192.0.2.21", "2001:db8::20")
	t.Logf("an added address was published %v after the record changed (TTL 1s)",
		waitStates(t, ns, allReady("192.0.2.20", "192.0.2.21", "2001:db8::20")))

	setAddrs(name, 1, "192.0.2.21", "2001:db8::21")
	want := allReady("192.0.2.21", "2001:db8::21")
	want["192.0.2.20"], want["2001:db8::20"] = terminating, terminating
	t.Logf("removed addresses were terminating %v after the record changed", waitStates(t, ns, want))
	t.Logf("and gone %v later (drainPeriod 2s)", waitStates(t, ns, allReady("192.0.2.21", "2001:db8::21")))
}

// TestNXDOMAINDrains removes a published name: the source is gone, said on
// status naming the field, and its endpoints drain; a spec naming a name
// that exists publishes again.
func TestNXDOMAINDrains(t *testing.T) {
	t.Parallel()
	ns, name, xb := publish(t, "vanishing", "192.0.2.30", "2001:db8::30")

	server.Remove(name)
	cur := framework.WaitCondition(t, xb, v1alpha1.ConditionResolved, metav1.ConditionFalse, v1alpha1.ReasonBackendNotFound)
	expectMessage(t, cur, v1alpha1.ConditionResolved, "spec.sources[lookup].dns.name", name+" does not exist", "NXDOMAIN")
	framework.WaitCondition(t, xb, v1alpha1.ConditionStalled, metav1.ConditionTrue, v1alpha1.ReasonBackendNotFound)
	waitStates(t, ns, map[string]string{"192.0.2.30": terminating, "2001:db8::30": terminating})
	waitStates(t, ns, map[string]string{})

	setAddrs(host("replacement"), 1, "192.0.2.31")
	if err := framework.Update(t, xb, func(xb *v1alpha1.ExternalBackend) {
		xb.Spec.Sources[0].DNS.Name = host("replacement")
	}); err != nil {
		t.Fatal(err)
	}
	framework.WaitReady(t, xb)
	waitStates(t, ns, allReady("192.0.2.31"))
}

// TestServerFailureKeepsEndpoints makes the server answer SERVFAIL: the
// source is stale on status with its last success time kept, the endpoints
// stay as they were, and all recovers by itself once the server answers.
func TestServerFailureKeepsEndpoints(t *testing.T) {
	t.Parallel()
	expectOutageKeepsEndpoints(t, "flaky",
		func(name string) { server.Fail(name, dnstest.ServFail) },
		func(name string) { server.Fail(name, dnstest.Answer) },
		"SERVFAIL")
}

// TestServerStoppedKeepsEndpoints stops the DNS server itself, as an outage
// of the resolver would. It is not parallel: the other tests wait while
// the server is down.
func TestServerStoppedKeepsEndpoints(t *testing.T) {
	expectOutageKeepsEndpoints(t, "outage",
		func(string) {
			if err := server.Stop(); err != nil {
				t.Fatal(err)
			}
		},
		func(string) {
			if err := server.Restart(); err != nil {
				t.Fatal(err)
			}
		},
		server.Addr)
}

// expectOutageKeepsEndpoints publishes a name of label, breaks its DNS
// answers with fail, and checks that the endpoints stay while status says
// the source is stale, with words in its error; then it repairs the answers
// and checks that the backend recovers without any change to it.
func expectOutageKeepsEndpoints(t *testing.T, label string, fail, repair func(name string), words ...string) {
	t.Helper()
	ns, name, xb := publish(t, label, "192.0.2.40", "2001:db8::40")
	framework.WaitReady(t, xb)
	want := allReady("192.0.2.40", "2001:db8::40")
	before := sourceStatus(t, framework.Get(t, xb), "lookup").LastSuccessTime

	fail(name)
	repaired := false
	defer func() {
		if !repaired {
			repair(name)
		}
	}()
	cur := framework.WaitCondition(t, xb, v1alpha1.ConditionResolved, metav1.ConditionFalse, v1alpha1.ReasonSourceFailed)
	expectMessage(t, cur, v1alpha1.ConditionResolved, append([]string{"spec.sources[lookup].dns.name"}, words...)...)
	src := sourceStatus(t, cur, "lookup")
	if !src.Stale || src.LastSuccessTime == nil || !src.LastSuccessTime.Equal(before) || src.Endpoints != 2 {
		t.Errorf("status.sources[lookup] = %+v, want stale with lastSuccessTime %v and 2 endpoints kept", src, before)
	}
	got, err := framework.States(framework.Slices(t, ns, "db"))
	if err != nil || !maps.Equal(got, framework.ServedOf(want)) {
		t.Errorf("during the outage the slices publish %v (%v), want the last known %v", got, err, want)
	}

	repair(name)
	repaired = true
	cur = framework.WaitReady(t, xb)
	if src := sourceStatus(t, cur, "lookup"); src.Stale || src.LastError != "" {
		t.Errorf("after recovery status.sources[lookup] = %+v, want fresh", src)
	}
	waitStates(t, ns, want)
}

// TestStaticDisasterRecoveryMerged merges a dns source with a static
// disaster-recovery address: de-duplicated by address, the first source in
// spec order keeping the health it gave, each source on status; a DNS
// failure keeps the dns endpoints and leaves the static one alone.
func TestStaticDisasterRecoveryMerged(t *testing.T) {
	t.Parallel()
	name := host("primary")
	setAddrs(name, 1, "192.0.2.50", "192.0.2.51")
	ns, xb := create(t, name, func(xb *v1alpha1.ExternalBackend) {
		xb.Spec.Sources = append(xb.Spec.Sources, v1alpha1.Source{Name: "dr", Static: &v1alpha1.StaticSource{
			Endpoints: []v1alpha1.StaticEndpoint{
				{Address: "192.0.2.51", Health: v1alpha1.HealthUnhealthy},
				{Address: "198.51.100.50", Health: v1alpha1.HealthUnhealthy},
				{Address: "198.51.100.51"},
			}}})
		xb.Spec.AddressTypes = []v1alpha1.AddressType{v1alpha1.AddressTypeIPv4}
	})
	cur := framework.WaitReady(t, xb)
	want := allReady("192.0.2.50", "192.0.2.51", "198.51.100.51")
	want["198.51.100.50"] = notServing
	waitStates(t, ns, want)
	if dns, dr := sourceStatus(t, cur, "lookup"), sourceStatus(t, cur, "dr"); dns.Endpoints != 2 || dr.Endpoints != 3 {
		t.Errorf("status.sources: lookup %+v, dr %+v; want 2 and 3 endpoints", dns, dr)
	}

	server.Fail(name, dnstest.ServFail)
	defer server.Fail(name, dnstest.Answer)
	cur = framework.WaitCondition(t, xb, v1alpha1.ConditionResolved, metav1.ConditionFalse, v1alpha1.ReasonSourceFailed)
	if dns, dr := sourceStatus(t, cur, "lookup"), sourceStatus(t, cur, "dr"); !dns.Stale || dr.Stale {
		t.Errorf("status.sources: lookup %+v, dr %+v; want only lookup stale", dns, dr)
	}
	// The failing dns source keeps its last answer, so the shared address
	// keeps the health dns gave it, not the static source's.
	got, err := framework.States(framework.Slices(t, ns, "db"))
	if err != nil || !maps.Equal(got, framework.ServedOf(want)) {
		t.Errorf("with the dns source failing the slices publish %v (%v), want %v", got, err, want)
	}
}

// TestFQDNOnlyWhenAsked publishes the name itself in an FQDN slice when
// spec.addressTypes lists FQDN, next to the families listed, and not the
// family left out.
func TestFQDNOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	name := host("named")
	setAddrs(name, 60, "192.0.2.60", "2001:db8::60")
	ns, xb := create(t, name, func(xb *v1alpha1.ExternalBackend) {
		xb.Spec.AddressTypes = []v1alpha1.AddressType{v1alpha1.AddressTypeIPv4, v1alpha1.AddressTypeFQDN}
	})
	framework.WaitReady(t, xb)
	waitStates(t, ns, allReady("192.0.2.60", name))
	for _, s := range framework.Slices(t, ns, "db") {
		wantType := discoveryv1.AddressTypeIPv4
		if s.Endpoints[0].Addresses[0] == name {
			wantType = discoveryv1.AddressTypeFQDN
		}
		if s.AddressType != wantType {
			t.Errorf("slice %s of type %s holds %s", s.Name, s.AddressType, s.Endpoints[0].Addresses[0])
		}
	}
}

// TestInvalidNameStalls refuses a name that is not a DNS name, naming the
// field, without asking the server.
func TestInvalidNameStalls(t *testing.T) {
	t.Parallel()
	_, xb := create(t, "Not_A_Name."+zone, nil)
	cur := framework.WaitCondition(t, xb, v1alpha1.ConditionStalled, metav1.ConditionTrue, v1alpha1.ReasonInvalidSpec)
	expectMessage(t, cur, v1alpha1.ConditionResolved, "spec.sources[lookup].dns.name", `"Not_A_Name.`+zone+`"`)
	if q := server.Queries("Not_A_Name." + zone); len(q) != 0 {
		t.Errorf("the server was asked %d time(s) for an invalid name", len(q))
	}
}

// TestRefreshFollowsTTL measures how often the controller asks for a name
// with nothing changing: at the TTL, within the bounds. It logs the
// intervals the server saw and checks only that lookups repeat; the numbers
// are for reading, not for asserting.
func TestRefreshFollowsTTL(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		label    string
		ttl      uint32
		min, max time.Duration
	}{
		{"ttl2", 2, 0, 0},
		{"ttl0", 0, 0, 0},
		{"ttl3600-max3s", 3600, 0, 3 * time.Second},
		{"ttl1-min2s", 1, 2 * time.Second, 0},
	} {
		t.Run(c.label, func(t *testing.T) {
			t.Parallel()
			name := host(c.label)
			setAddrs(name, c.ttl, "192.0.2.70")
			_, xb := create(t, name, func(xb *v1alpha1.ExternalBackend) {
				src := xb.Spec.Sources[0].DNS
				src.MinRefresh, src.MaxRefresh = nil, nil
				if c.min != 0 {
					src.MinRefresh = &metav1.Duration{Duration: c.min}
				}
				if c.max != 0 {
					src.MaxRefresh = &metav1.Duration{Duration: c.max}
				}
				xb.Spec.AddressTypes = []v1alpha1.AddressType{v1alpha1.AddressTypeIPv4}
			})
			framework.WaitReady(t, xb)
			settled := time.Now()
			var at []time.Time
			framework.Eventually(t, 4*framework.Timeout, "five lookups after Ready", func() error {
				at = at[:0]
				for _, q := range server.Queries(name) {
					if q.Type == mdns.TypeA && q.At.After(settled) {
						at = append(at, q.At)
					}
				}
				if len(at) < 5 {
					return fmt.Errorf("%d lookups so far", len(at))
				}
				return nil
			})
			var gaps []string
			for i := 1; i < len(at); i++ {
				gaps = append(gaps, at[i].Sub(at[i-1]).Round(10*time.Millisecond).String())
			}
			t.Logf("TTL %ds, spec minRefresh %v maxRefresh %v (provider 1s..1m): intervals between lookups %v",
				c.ttl, c.min, c.max, gaps)
		})
	}
}
