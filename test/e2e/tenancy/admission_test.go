package tenancy_test

import (
	"fmt"
	"strings"
	"testing"

	mdns "github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/awstest"
	"github.com/backendslice/backendslice/test/consultest"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// kindCase is one provider kind as TestEveryKindAdmitsAndRefuses drives it.
type kindCase struct {
	// kind is the BackendProvider's status.kind.
	kind string
	// spec is the provider's connection (the namespaces are added).
	spec v1alpha1.BackendProviderSpec
	// source is a source through provider for the backend labelled label
	// ("named", "labelled", "refused"), and the addresses it publishes.
	source func(provider, label string) (v1alpha1.Source, []string)
	// asked counts the queries that reached the provider's server (and the
	// controller's own) for the source labelled label; nil when the kind
	// has no server (static) or cannot tell sources apart (aws, see total).
	asked func(label string) int
	// total counts every call that reached the provider's server.
	total func() int
}

// TestEveryKindAdmitsAndRefuses runs one BackendProvider of each kind that
// admits one namespace by name and one by label: both publish through it.
// A third namespace, neither named nor labelled to match, is refused
// before anything is asked: ProviderNotAdmitted on Resolved and Ready
// naming the provider, the namespace and the rule (spec.namespaces), a
// Warning event saying so, no endpoint published, and not one query at
// the provider's server (DNS server, Consul agent, AWS) for its source,
// nor at the controller's own connections. The refused backend is created
// first, so that for AWS, whose listing sources share, the server's total
// is its count.
func TestEveryKindAdmitsAndRefuses(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"static", "dns", "consul", "aws"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			runKindCase(t, newKindCase(t, kind))
		})
	}
}

// newKindCase sets up the servers of kind for the test.
func newKindCase(t *testing.T, kind string) kindCase {
	t.Helper()
	suffix := fmt.Sprint(namespaces.Add(1))
	switch kind {
	case "static":
		addrs := map[string][]string{
			"named":    {"192.0.2.21", "2001:db8::21"},
			"labelled": {"192.0.2.22"},
			"refused":  {"192.0.2.23", "2001:db8::23"},
		}
		return kindCase{
			kind: kind,
			spec: staticSpec("192.0.2.0/24", "2001:db8::/32"),
			source: func(provider, label string) (v1alpha1.Source, []string) {
				return staticSource(provider, addrs[label]...), addrs[label]
			},
			total: func() int { return 0 },
		}
	case "dns":
		name := func(label string) string { return label + "-" + suffix + "." + zone }
		addrs := map[string][]string{
			"named":    {"198.51.100.21", "2001:db8::1:21"},
			"labelled": {"198.51.100.22"},
			"refused":  {"198.51.100.23"},
		}
		for label, as := range addrs {
			setAddrs(tenantDNS, name(label), as...)
			// The controller's own resolver would answer too: a source
			// asked through it would publish.
			setAddrs(ownDNS, name(label), as...)
		}
		return kindCase{
			kind: kind,
			spec: dnsSpec(tenantDNS.Addr),
			source: func(provider, label string) (v1alpha1.Source, []string) {
				return dnsSource(provider, name(label)), addrs[label]
			},
			asked: func(label string) int {
				return len(tenantDNS.Queries(name(label))) + len(ownDNS.Queries(name(label)))
			},
			total: func() int {
				n := 0
				for label := range addrs {
					n += len(tenantDNS.Queries(name(label)))
				}
				return n
			},
		}
	case "consul":
		proxy := consultest.NewProxy(t, east.Addr)
		token := readToken(t, east)
		secret := "kinds-consul-" + suffix
		putSecret(t, secret, "token", token.Secret)
		service := func(label string) string { return label + "-" + suffix }
		addrs := map[string][]string{
			"named":    {"203.0.113.21"},
			"labelled": {"203.0.113.22"},
			"refused":  {"203.0.113.23"},
		}
		for label, as := range addrs {
			register(t, east, consultest.Service{ID: service(label), Name: service(label), Address: as[0]})
		}
		return kindCase{
			kind: kind,
			spec: consulSpec(proxy.Addr, "", secret),
			source: func(provider, label string) (v1alpha1.Source, []string) {
				return consulSource(provider, service(label)), addrs[label]
			},
			asked: func(label string) int { return queriesOf(proxy, service(label)) },
			// Every request but the provider's connection checks, which
			// ask for no service.
			total: func() int { return len(proxy.Requests()) - checksOf(proxy) },
		}
	case "aws":
		fake := newFake(t)
		addrs := map[string][]string{
			"named":    {"192.0.2.31"},
			"labelled": {"192.0.2.32"},
			"refused":  {"192.0.2.33"},
		}
		for i, label := range []string{"named", "labelled", "refused"} {
			fake.PutEC2Instance(awstest.EC2Instance{ID: fmt.Sprintf("i-%08x", i+1), State: "running",
				PrivateIP: addrs[label][0], Zone: region + "a", Tags: map[string]string{"app": label}})
		}
		return kindCase{
			kind: kind,
			spec: awsSpec(fake.URL, "", ""),
			source: func(provider, label string) (v1alpha1.Source, []string) {
				return ec2Source(provider, map[string]string{"app": label}), addrs[label]
			},
			// Every call but the provider's connection checks.
			total: func() int { return sourceCalls(fake) },
		}
	}
	t.Fatalf("no case for kind %s", kind)
	return kindCase{}
}

// runKindCase runs TestEveryKindAdmitsAndRefuses for one kind.
func runKindCase(t *testing.T, c kindCase) {
	teamName := "team-" + c.kind
	named := newNamespace(t, "named", nil)
	labelled := newNamespace(t, "labelled", team(teamName))
	refusedNS := newNamespace(t, "refused", team("someone-else"))
	provider := uniqueName(named, c.kind)
	createProvider(t, provider, admits(teamName, named), c.spec)
	waitProviderStatus(t, provider, c.kind, metav1.ConditionTrue, v1alpha1.ReasonProviderReady)

	src, _ := c.source(provider, "refused")
	refused := backend(refusedNS, "db", nil, src)
	framework.Create(t, refused)
	waitRefused(t, refused, fmt.Sprintf("BackendProvider %q", provider), "namespace "+refusedNS, "spec.namespaces")
	if n := c.total(); n != 0 {
		t.Errorf("%d call(s) reached the %s provider's server before any admitted backend existed: the refused source was asked", n, c.kind)
	}

	for _, ns := range []struct{ name, label string }{{named, "named"}, {labelled, "labelled"}} {
		src, addrs := c.source(provider, ns.label)
		xb := backend(ns.name, "db", nil, src)
		framework.Create(t, xb)
		waitStates(t, ns.name, "db", statesOf(ready, addrs...))
		framework.WaitReady(t, xb)
		wantSliceShape(t, ns.name, "db")
	}
	if c.kind != "static" && c.total() == 0 {
		t.Errorf("the admitted %s backends published without a call counted at the provider's server: the count is blind", c.kind)
	}
	if c.asked != nil {
		for _, label := range []string{"named", "labelled"} {
			if c.asked(label) == 0 {
				t.Errorf("the %s source of namespace %s published without a query counted: the count is blind", c.kind, label)
			}
		}
	}

	// Admitted backends of the same provider are busy; the refused one
	// still publishes nothing and is still asked nothing.
	cur := framework.Get(t, refused)
	if c := meta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionReady); c == nil || c.Reason != v1alpha1.ReasonProviderNotAdmitted {
		t.Errorf("refused backend: Ready %+v, want ProviderNotAdmitted", c)
	}
	if got, err := states(t, refusedNS, "db"); err != nil || len(got) != 0 {
		t.Errorf("refused backend publishes %v (%v)", got, err)
	}
	if c.asked != nil {
		if n := c.asked("refused"); n != 0 {
			t.Errorf("the refused %s source was asked %d time(s)", c.kind, n)
		}
	}
}

// TestSourceWithoutProviderIsRefused: this install allows no source
// without providerRef. Such a source, of any kind, is refused with a
// message saying providerRef is required, publishes nothing, and is never
// resolved through the controller's own connections (its DNS resolver,
// Consul address and AWS endpoint count nothing for it); in a backend with
// an admitted source, the admitted one still publishes.
func TestSourceWithoutProviderIsRefused(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "unreferenced", nil)
	name := "unreferenced-" + ns + "." + zone
	setAddrs(ownDNS, name, "192.0.2.41")
	fake := newFake(t)
	fake.PutEC2Instance(awstest.EC2Instance{ID: "i-0000aaaa", State: "running", PrivateIP: "192.0.2.42", Tags: map[string]string{"app": "web"}})
	unreferenced := []v1alpha1.Source{
		{Name: "fixed", Static: &v1alpha1.StaticSource{Endpoints: []v1alpha1.StaticEndpoint{{Address: "192.0.2.40"}}}},
		{Name: "lookup", DNS: &v1alpha1.DNSSource{Name: name}},
		{Name: "catalog", Consul: &v1alpha1.ConsulSource{Service: "unreferenced-" + ns}},
		{Name: "vms", AWSEC2: &v1alpha1.AWSEC2Source{Region: region, Tags: map[string]string{"app": "web"}}},
	}
	var backends []*v1alpha1.ExternalBackend
	for _, src := range unreferenced {
		xb := backend(ns, src.Name, nil, src)
		framework.Create(t, xb)
		backends = append(backends, xb)
	}
	for _, xb := range backends {
		src := xb.Spec.Sources[0].Name
		waitRefused(t, xb, fmt.Sprintf("source %s: spec.sources[%s].providerRef: required", src, src), "BackendProvider")
	}

	// One source admitted, one without providerRef: the first publishes,
	// the second is refused and nothing of it is published.
	provider := uniqueName(ns, "static")
	createProvider(t, provider, admits("", ns), staticSpec("192.0.2.0/24"))
	mixed := backend(ns, "mixed", nil, staticSource(provider, "192.0.2.43"),
		v1alpha1.Source{Name: "own", Static: &v1alpha1.StaticSource{Endpoints: []v1alpha1.StaticEndpoint{{Address: "192.0.2.44"}}}})
	framework.Create(t, mixed)
	waitConditions(t, mixed, metav1.ConditionFalse, v1alpha1.ReasonProviderNotAdmitted, "source own: spec.sources[own].providerRef: required")
	waitEvent(t, mixed, "Warning", v1alpha1.ReasonProviderNotAdmitted, "spec.sources[own].providerRef: required")
	waitStates(t, ns, "mixed", statesOf(ready, "192.0.2.43"))

	if n := len(ownDNS.Queries(name)); n != 0 {
		t.Errorf("the controller's own DNS resolver was asked %d time(s) for %s", n, name)
	}
	if n := ownConsul.count(); n != 0 {
		t.Errorf("the controller's own Consul address was asked %d time(s): %v", n, ownConsul.paths())
	}
	if n := ownAWS.TotalCalls() + fake.TotalCalls(); n != 0 {
		t.Errorf("AWS was called %d time(s) for a source without providerRef", n)
	}
}

// setAddrs gives name A and AAAA records on server (TTL 1s), an address's
// family saying which.
func setAddrs(server interface {
	Set(name string, typ uint16, ttl uint32, values ...string)
}, name string, addrs ...string) {
	var v4, v6 []string
	for _, a := range addrs {
		if strings.Contains(a, ":") {
			v6 = append(v6, a)
		} else {
			v4 = append(v4, a)
		}
	}
	server.Set(name, mdns.TypeA, 1, v4...)
	server.Set(name, mdns.TypeAAAA, 1, v6...)
}

// readToken makes a token of agent a that reads every service and node.
func readToken(t *testing.T, a *consultest.Agent) consultest.Token {
	t.Helper()
	tok, err := a.CreateToken(consultest.ReadAll)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// register registers s on agent a, deregistered when the test ends.
func register(t *testing.T, a *consultest.Agent, s consultest.Service) {
	t.Helper()
	if err := a.Register(s); err != nil {
		t.Fatalf("registering %s: %v", s.ID, err)
	}
	t.Cleanup(func() { _ = a.Deregister(s.ID) })
}

// checksOf counts the requests of connection checks that went through
// proxy: the leader and the token asked for.
func checksOf(proxy *consultest.Proxy) int {
	return countPath(proxy, "/v1/status/leader") + countPath(proxy, "/v1/acl/token/self")
}

// queriesOf counts the health queries of service that went through proxy.
func queriesOf(proxy *consultest.Proxy, service string) int {
	return countPath(proxy, "/v1/health/service/"+service)
}

// sourceCalls counts the calls fake received other than the connection
// checks of the BackendProviders of its URL (GetCallerIdentity).
func sourceCalls(fake *awstest.Server) int {
	return fake.TotalCalls() - fake.Calls(awstest.GetCallerIdentity)
}

// TestWrongKindIsRefused: a source naming a BackendProvider of another
// kind (a dns source naming a static provider, a consul source naming an
// AWS one) is refused before anything is asked: ProviderNotAdmitted naming
// the provider and both kinds, and no query at any DNS server, Consul or AWS.
func TestWrongKindIsRefused(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "wrong-kind", nil)
	fake := newFake(t)
	staticBP, awsBP := uniqueName(ns, "static"), uniqueName(ns, "aws")
	createProvider(t, staticBP, admits("", ns), staticSpec("192.0.2.0/24"))
	createProvider(t, awsBP, admits("", ns), awsSpec(fake.URL, "", ""))
	name := "wrong-kind-" + ns + "." + zone
	setAddrs(tenantDNS, name, "192.0.2.121")
	setAddrs(ownDNS, name, "192.0.2.121")
	service := "wrong-kind-" + ns

	lookup := backend(ns, "lookup", nil, dnsSource(staticBP, name))
	catalog := backend(ns, "catalog", nil, consulSource(awsBP, service))
	framework.Create(t, lookup)
	framework.Create(t, catalog)
	waitRefused(t, lookup, fmt.Sprintf("BackendProvider %q is of kind static and cannot serve dns sources", staticBP))
	waitRefused(t, catalog, fmt.Sprintf("BackendProvider %q is of kind aws and cannot serve consul sources", awsBP))
	if n := len(tenantDNS.Queries(name)) + len(ownDNS.Queries(name)); n != 0 {
		t.Errorf("%s was looked up %d time(s)", name, n)
	}
	if n := sourceCalls(fake) + ownAWS.TotalCalls(); n != 0 {
		t.Errorf("AWS was called %d time(s) besides the provider's connection checks", n)
	}
	if n := ownConsul.count(); n != 0 {
		t.Errorf("the controller's own Consul was asked %d time(s): %v", n, ownConsul.paths())
	}
}

// TestSecretsOnlyFromControllerNamespace: a BackendProvider's Secret is
// read from the controller's namespace only. The same Secret in a tenant's
// namespace is not used: the provider says SecretNotFound naming the
// controller's namespace, and its backend publishes nothing; the Secret
// put in the controller's namespace, it publishes.
func TestSecretsOnlyFromControllerNamespace(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "secret-elsewhere", nil)
	service := "db-" + ns
	register(t, east, consultest.Service{ID: service, Name: service, Address: "192.0.2.131"})
	token := readToken(t, east)
	secret := uniqueName(ns, "token")
	elsewhere := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: secret},
		Data: map[string][]byte{"token": []byte(token.Secret)}}
	if err := k8s.Create(ctx, elsewhere); err != nil {
		t.Fatal(err)
	}
	proxy := consultest.NewProxy(t, east.Addr)
	bp := uniqueName(ns, "consul")
	createProvider(t, bp, admits("", ns), consulSpec(proxy.Addr, "east", secret))
	waitProviderStatus(t, bp, "consul", metav1.ConditionFalse, v1alpha1.ReasonSecretNotFound, controllerNamespace+"/"+secret)
	xb := backend(ns, "db", nil, consulSource(bp, service))
	framework.Create(t, xb)
	waitResolvedFalse(t, xb, controllerNamespace+"/"+secret)
	waitStates(t, ns, "db", map[string]string{})
	for _, r := range proxy.Requests() {
		if r.Token != "" && r.Token != "anonymous" {
			t.Errorf("Consul was asked %s with token %q: a Secret outside the controller's namespace was read", r.Path, r.Token)
		}
	}

	putSecret(t, secret, "token", token.Secret)
	waitProviderStatus(t, bp, "consul", metav1.ConditionTrue, v1alpha1.ReasonProviderReady)
	waitStates(t, ns, "db", statesOf(ready, "192.0.2.131"))
	framework.WaitReady(t, xb)
}
