package tenancy_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/argocdtest"
	"github.com/backendslice/backendslice/test/awstest"
	"github.com/backendslice/backendslice/test/consultest"
	"github.com/backendslice/backendslice/test/dnstest"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// readyParts are what the Ready message of a provider whose connection
// answers its checks says.
var readyParts = []string{"connection answers its checks"}

// stillResolved is what every ConnectionFailed message says of sources.
const stillResolved = "sources through this provider are still resolved"

// waitConnectionFailed waits, at most checkBound from start, until
// provider name of kind is Ready=False/ConnectionFailed with a message
// naming every part, and that `kubectl get bp` prints so; it returns how
// long it took.
func waitConnectionFailed(t *testing.T, start time.Time, name, kind string, parts ...string) time.Duration {
	t.Helper()
	waitProviderStatusWithin(t, checkBound-time.Since(start), name, kind, metav1.ConditionFalse, v1alpha1.ReasonConnectionFailed,
		append(parts, stillResolved)...)
	took := time.Since(start)
	t.Logf("BackendProvider %s: Ready=False/%s within %s", name, v1alpha1.ReasonConnectionFailed, took.Round(time.Millisecond))
	waitPrinted(t, name, map[string]string{"Ready": "False", "Reason": v1alpha1.ReasonConnectionFailed})
	judgeProvider(t, name, "Degraded", v1alpha1.ReasonConnectionFailed+": the connection check fails", kstatus.FailedStatus)
	return took
}

// judgeProvider checks what the Argo CD health check of BackendProvider
// (config/argocd/backendprovider-health.lua) and kstatus make of provider
// name as the API server sends it now.
func judgeProvider(t *testing.T, name, health, message string, want kstatus.Status) {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("BackendProvider"))
	if err := k8s.Get(ctx, client.ObjectKey{Name: name}, u); err != nil {
		t.Fatal(err)
	}
	h, err := argocdtest.HealthOf(u)
	if err != nil {
		t.Fatal(err)
	}
	if h.Status != health || !strings.Contains(h.Message, message) {
		t.Errorf("Argo CD health of BackendProvider %s: %s (%s), want %s saying %q", name, h.Status, h.Message, health, message)
	}
	res, err := kstatus.Compute(u)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != want {
		t.Errorf("kstatus of BackendProvider %s: %s (%s), want %s", name, res.Status, res.Message, want)
	}
}

// waitConnectionBack waits, at most checkBound from start, until provider
// name is Ready=True again.
func waitConnectionBack(t *testing.T, start time.Time, name, kind string) {
	t.Helper()
	waitProviderStatusWithin(t, checkBound-time.Since(start), name, kind, metav1.ConditionTrue, v1alpha1.ReasonProviderReady, readyParts...)
	judgeProvider(t, name, "Healthy", readyParts[0], kstatus.CurrentStatus)
	t.Logf("BackendProvider %s: Ready=True again within %s", name, time.Since(start).Round(time.Millisecond))
}

// TestConsulProviderReadyFollowsTheAgent runs a Consul agent of its own,
// stops it and starts it again. A BackendProvider of it is Ready while it
// runs; once stopped, Ready turns False/ConnectionFailed within the check
// bound, naming the agent's address and the refused connection (also in
// the column kubectl prints), while a backend through it keeps its
// endpoints (the source, not the provider, says it fails) and a second
// provider, of another agent, stays Ready. Started again, the provider is
// Ready within the bound and the backend follows Consul. Reconciles in
// between (the token's Secret rewritten twenty times) do not check more
// often than the interval says, and checks that find what the status
// already says (passing, or failing the same way) do not rewrite it.
func TestConsulProviderReadyFollowsTheAgent(t *testing.T) {
	t.Parallel()
	agent := consultest.Run(t, consultest.Config{Node: "ready-agent"})
	ns := newNamespace(t, "consul-ready", nil)
	service := "ready-" + ns
	must(t, agent.Register(consultest.Service{ID: service + "-1", Name: service, Address: "192.0.2.121"}))
	secret := uniqueName(ns, "token")
	// The agent runs without ACLs: it answers "ACL support disabled" when
	// the token is read, which passes.
	putSecret(t, secret, "token", "any-token")
	// counted reaches the agent through a proxy that counts its checks.
	proxy := consultest.NewProxy(t, agent.Addr)
	bp, counted, other := uniqueName(ns, "consul"), uniqueName(ns, "counted"), uniqueName(ns, "other")
	createProvider(t, bp, admits("", ns), consulSpec(agent.Addr, "", secret))
	createProvider(t, counted, admits("", ns), consulSpec(proxy.Addr, "", secret))
	otherToken := uniqueName(ns, "other-token")
	putSecret(t, otherToken, "token", readToken(t, east).Secret)
	createProvider(t, other, admits("", ns), consulSpec(east.Addr, "east", otherToken))
	waitProviderStatus(t, bp, "consul", metav1.ConditionTrue, v1alpha1.ReasonProviderReady, readyParts...)
	waitProviderStatus(t, counted, "consul", metav1.ConditionTrue, v1alpha1.ReasonProviderReady, readyParts...)
	xb := backend(ns, "db", drainHour, consulSource(bp, service))
	framework.Create(t, xb)
	waitStates(t, ns, "db", statesOf(ready, "192.0.2.121"))
	framework.WaitReady(t, xb)

	// Reconciled often, checked at the interval's pace, and its status
	// not rewritten while the verdict holds.
	window, version := time.Now(), providerVersion(t, counted)
	leaders := countPath(proxy, "/v1/status/leader")
	for i := range 20 {
		putSecret(t, secret, "token", fmt.Sprintf("any-token-%d", i))
		time.Sleep(200 * time.Millisecond)
	}
	checks, elapsed := countPath(proxy, "/v1/status/leader")-leaders, time.Since(window)
	// Each wait is at least nine tenths of the interval; one check may
	// have been due as the window opened.
	if most := int(elapsed/(testChecks.Interval*9/10)) + 1; checks > most {
		t.Errorf("%d connection checks in %s while the Secret changed 20 times, want at most %d (every %s)", checks, elapsed.Round(time.Millisecond), most, testChecks.Interval)
	}
	t.Logf("%d connection check(s) in %s while the provider was reconciled 20 more times", checks, elapsed.Round(time.Millisecond))
	if v := providerVersion(t, counted); v != version {
		t.Errorf("the provider's status was rewritten (resourceVersion %s -> %s) while its checks passed", version, v)
	}

	start := time.Now()
	must(t, agent.Stop())
	waitConnectionFailed(t, start, bp, "consul", "Consul at "+agent.Addr, "GET /v1/status/leader", "connection refused")
	held := waitConditions(t, xb, metav1.ConditionFalse, v1alpha1.ReasonSourceFailed,
		"what source catalog published before stays published while it fails")
	t.Logf("backend while its provider fails its check: %s", reasonMessage(held, v1alpha1.ConditionReady))
	if got, err := states(t, ns, "db"); err != nil || got["192.0.2.121"] != ready {
		t.Errorf("the backend through the failing provider publishes %v (%v), want its endpoint kept", got, err)
	}
	waitProviderStatus(t, other, "consul", metav1.ConditionTrue, v1alpha1.ReasonProviderReady, readyParts...)
	// Failing the same way, checked again and again, written once.
	version = providerVersion(t, bp)
	time.Sleep(2 * testChecks.Interval)
	if v := providerVersion(t, bp); v != version {
		t.Errorf("the failing provider's status was rewritten (resourceVersion %s -> %s) while it failed the same way", version, v)
	}

	start = time.Now()
	must(t, agent.Restart())
	waitConnectionBack(t, start, bp, "consul")
	// A dev agent forgets its catalog: registered again, the backend
	// follows Consul.
	must(t, agent.Register(consultest.Service{ID: service + "-2", Name: service, Address: "192.0.2.122"}))
	waitStates(t, ns, "db", map[string]string{"192.0.2.122": ready, "192.0.2.121": terminating})
}

// TestConsulProviderReadyFollowsTheToken puts a token the agent no longer
// knows into a provider's Secret: Ready turns False naming Consul's
// refusal, and a good token brings it back.
func TestConsulProviderReadyFollowsTheToken(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "consul-token-ready", nil)
	good, revoked := readToken(t, east), readToken(t, east)
	if err := east.RevokeToken(revoked); err != nil {
		t.Fatal(err)
	}
	secret := uniqueName(ns, "token")
	putSecret(t, secret, "token", good.Secret)
	bp := uniqueName(ns, "consul")
	createProvider(t, bp, admits("", ns), consulSpec(east.Addr, "east", secret))
	waitProviderStatus(t, bp, "consul", metav1.ConditionTrue, v1alpha1.ReasonProviderReady, readyParts...)

	start := time.Now()
	putSecret(t, secret, "token", revoked.Secret)
	// The Secret's change is seen at the next check, an interval at most.
	waitConnectionFailed(t, start, bp, "consul", "Consul at "+east.Addr+" refuses the ACL token of BackendProvider "+bp,
		"Consul answered 403 ACL not found")
	start = time.Now()
	putSecret(t, secret, "token", good.Secret)
	waitConnectionBack(t, start, bp, "consul")
}

// TestAWSProviderReadyFollowsTheRole: an AWS provider whose role the
// controller may not assume (the fake refuses AssumeRole) is
// Ready=False/ConnectionFailed naming the endpoint, the role and AWS's
// AccessDenied; once the role trusts the controller, Ready within the
// bound. Each check asks STS only: no Describe call is made for it.
func TestAWSProviderReadyFollowsTheRole(t *testing.T) {
	t.Parallel()
	fake := newFake(t)
	ns := newNamespace(t, "aws-ready", nil)
	const role = "arn:aws:iam::444444444444:role/backendslice-later"
	bp, own := uniqueName(ns, "aws"), uniqueName(ns, "own")
	createProvider(t, bp, admits("", ns), awsSpec(fake.URL, role, ""))
	createProvider(t, own, admits("", ns), awsSpec(fake.URL, "", ""))
	waitConnectionFailed(t, time.Now(), bp, "aws", "AWS STS at "+fake.URL+", as role "+role+" of BackendProvider "+bp,
		"AssumeRole: AccessDenied", "not authorized to perform: sts:AssumeRole on resource: "+role)
	waitProviderStatus(t, own, "aws", metav1.ConditionTrue, v1alpha1.ReasonProviderReady, readyParts...)

	start := time.Now()
	fake.AddRole(role, "ASIALATER")
	waitConnectionBack(t, start, bp, "aws")
	if n := fake.CallsBy(awstest.GetCallerIdentity, "ASIALATER"); n == 0 {
		t.Error("no GetCallerIdentity was signed with the role's key: the check did not ask as the role")
	}
	for _, action := range []string{awstest.DescribeDBInstances, awstest.DescribeDBClusters, awstest.DescribeInstances} {
		if n := fake.Calls(action); n != 0 {
			t.Errorf("%d %s call(s) without any backend: a check described the account", n, action)
		}
	}
}

// TestDNSProviderReadyFollowsTheResolver stops the only resolver of a DNS
// provider: Ready turns False naming the resolver, while the backend
// through it keeps its addresses; started again, Ready again.
func TestDNSProviderReadyFollowsTheResolver(t *testing.T) {
	t.Parallel()
	server, err := dnstest.New(zone)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = server.Stop() })
	ns := newNamespace(t, "dns-ready", nil)
	name := "db-" + ns + "." + zone
	setAddrs(server, name, "198.51.100.121")
	bp := uniqueName(ns, "dns")
	createProvider(t, bp, admits("", ns), dnsSpec(server.Addr))
	waitProviderStatus(t, bp, "dns", metav1.ConditionTrue, v1alpha1.ReasonProviderReady, readyParts...)
	xb := backend(ns, "db", drainHour, dnsSource(bp, name))
	framework.Create(t, xb)
	waitStates(t, ns, "db", statesOf(ready, "198.51.100.121"))

	start := time.Now()
	if err := server.Stop(); err != nil {
		t.Fatal(err)
	}
	waitConnectionFailed(t, start, bp, "dns", "1 of the 1 DNS resolver(s) of BackendProvider "+bp, "resolver "+server.Addr+": ")
	waitConditions(t, xb, metav1.ConditionFalse, v1alpha1.ReasonSourceFailed, "what source lookup published before stays published while it fails")
	if got, err := states(t, ns, "db"); err != nil || got["198.51.100.121"] != ready {
		t.Errorf("the backend through the failing provider publishes %v (%v), want its address kept", got, err)
	}

	start = time.Now()
	if err := server.Restart(); err != nil {
		t.Fatal(err)
	}
	waitConnectionBack(t, start, bp, "dns")
	framework.WaitReady(t, xb)
}

// providerVersion is the resourceVersion of BackendProvider name: a
// status write changes it.
func providerVersion(t *testing.T, name string) string {
	t.Helper()
	bp := &v1alpha1.BackendProvider{}
	if err := k8s.Get(ctx, client.ObjectKey{Name: name}, bp); err != nil {
		t.Fatal(err)
	}
	return bp.ResourceVersion
}

// countPath counts the requests for path that went through proxy.
func countPath(proxy *consultest.Proxy, path string) int {
	n := 0
	for _, r := range proxy.Requests() {
		if r.Path == path {
			n++
		}
	}
	return n
}

// reasonMessage is "reason: message" of xb's condition of type typ.
func reasonMessage(xb *v1alpha1.ExternalBackend, typ string) string {
	for _, c := range xb.Status.Conditions {
		if c.Type == typ {
			return c.Reason + ": " + c.Message
		}
	}
	return "no " + typ + " condition"
}

// must fails the test on an error.
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
