// Package probes_test runs the controller, with its prober dialling from a
// network-namespace lab (test/netlab), against a real kube-apiserver, and
// checks that probe verdicts reach the EndpointSlices: a stopped server goes
// not ready and comes back, every server down fails open, a probe never
// makes an unhealthy endpoint ready, nothing is probed that may not be
// published, and steady verdicts cost no reconcile and no write.
package probes_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/controllers/externalbackend"
	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/providers/static"
	"github.com/backendslice/backendslice/test/e2e/framework"
	"github.com/backendslice/backendslice/test/netlab"
)

// Ports the hosts serve: TCP (name and echo) and HTTP (200, or 500 on
// /fail).
const (
	tcpPort  = 5000
	httpPort = 8080
)

// controllerNamespace holds the Secrets the controller may read.
const controllerNamespace = "backendslice-system"

var (
	lab   *netlab.Lab
	hosts = map[string]*netlab.Host{}
	// dialed records every address the prober connected to.
	dialed = &addressLog{seen: map[string]int{}}
)

var hostNames = []string{"a", "b", "c", "d"}

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	var err error
	lab, err = netlab.New(func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) })
	if err != nil {
		fmt.Fprintln(os.Stderr, "the probe tests run servers in network namespaces and cannot run without them:", err)
		return 1
	}
	defer lab.Close()
	for _, name := range hostNames {
		h, err := lab.AddHost(name)
		if err == nil {
			err = h.ServeTCP(tcpPort)
		}
		if err == nil {
			err = serveHTTP(h)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		hosts[name] = h
	}
	return framework.Run(m, framework.Options{
		Providers: func(providers.Waker) ([]providers.Provider, error) {
			return []providers.Provider{static.New()}, nil
		},
		Config: func(c *externalbackend.Config) { c.Namespace = controllerNamespace },
		ProbeDial: func(ctx context.Context, network, address string) (net.Conn, error) {
			dialed.add(address)
			return lab.Node.Dial(ctx, network, address)
		},
		Started: func(e *framework.Env) error {
			return e.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: controllerNamespace}})
		},
	})
}

// serveHTTP serves 200 with the host's name, 500 on /fail and 404 on
// /missing.
func serveHTTP(h *netlab.Host) error {
	l, err := h.Namespace().Listen("tcp", ":"+strconv.Itoa(httpPort))
	if err != nil {
		return err
	}
	srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/fail":
			w.WriteHeader(http.StatusInternalServerError)
		case "/missing":
			w.WriteHeader(http.StatusNotFound)
		}
		_, _ = io.WriteString(w, h.Name)
	})}
	go func() { _ = srv.Serve(l) }()
	return nil
}

// addressLog counts connections by host address, and by host and port.
type addressLog struct {
	mu   sync.Mutex
	seen map[string]int
}

func (l *addressLog) add(address string) {
	host, _, _ := net.SplitHostPort(address)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen[host]++
	l.seen[address]++
}

// count is the connections to host, an address or an address:port.
func (l *addressLog) count(host string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seen[host]
}

// tcpProbe is a TCP probe every second, out after two failures, back after
// two passes.
func tcpProbe() *v1alpha1.Probe {
	return &v1alpha1.Probe{
		TCP: &v1alpha1.TCPProbe{}, Period: &metav1.Duration{Duration: time.Second},
		Timeout: &metav1.Duration{Duration: 300 * time.Millisecond}, SuccessThreshold: 2, FailureThreshold: 2,
	}
}

// backend is an ExternalBackend "svc" in ns publishing the IPv4 address of
// each host named, on the TCP port, with probe.
func backend(ns string, probe *v1alpha1.Probe, names ...string) *v1alpha1.ExternalBackend {
	var eps []v1alpha1.StaticEndpoint
	for _, n := range names {
		eps = append(eps, v1alpha1.StaticEndpoint{Address: hosts[n].Addr4.String()})
	}
	return &v1alpha1.ExternalBackend{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "svc"},
		Spec: v1alpha1.ExternalBackendSpec{
			Service:      v1alpha1.ServiceSpec{Ports: []v1alpha1.ServicePort{{Name: "echo", Port: 80, TargetPort: ptr.To[int32](tcpPort)}}},
			Sources:      []v1alpha1.Source{{Name: "vms", Static: &v1alpha1.StaticSource{Endpoints: eps}}},
			AddressTypes: []v1alpha1.AddressType{v1alpha1.AddressTypeIPv4},
			DrainPeriod:  &metav1.Duration{},
			Probe:        probe,
		},
	}
}

// Endpoint states, as framework.States writes them.
const (
	ready      = "true/true/false"
	notServing = "false/false/false"
)

// states maps the hosts named to state.
func states(state string, names ...string) map[string]string {
	out := map[string]string{}
	for _, n := range names {
		out[hosts[n].Addr4.String()] = state
	}
	return out
}

// merge joins state maps.
func merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// waitProbed waits for the Probed condition's status and reason.
func waitProbed(t *testing.T, xb *v1alpha1.ExternalBackend, status metav1.ConditionStatus, reason string) *metav1.Condition {
	t.Helper()
	var c *metav1.Condition
	framework.Eventually(t, framework.Timeout, fmt.Sprintf("Probed %s/%s", status, reason), func() error {
		c = meta.FindStatusCondition(framework.Get(t, xb).Status.Conditions, v1alpha1.ConditionProbed)
		if c == nil || c.Status != status || c.Reason != reason {
			return fmt.Errorf("Probed is %+v", c)
		}
		return nil
	})
	return c
}

// restartAtEnd serves TCP again on the hosts named when the test ends,
// whatever it did.
func restartAtEnd(t *testing.T, names ...string) {
	t.Cleanup(func() {
		for _, n := range names {
			if err := hosts[n].ServeTCP(tcpPort); err != nil {
				t.Error(err)
			}
		}
	})
}

// TestSteadyVerdictsCostNothing: probes that keep passing cause no
// reconcile, no slice write and no status rewrite. It comes first: the
// counters are the process's, and later tests flip servers.
func TestSteadyVerdictsCostNothing(t *testing.T) {
	ns := framework.Namespace(t)
	xb := backend(ns, tcpProbe(), "a", "b")
	framework.Create(t, xb)
	framework.WaitStates(t, ns, "svc", states(ready, "a", "b"))
	framework.WaitReady(t, xb)
	time.Sleep(time.Second)
	reconciles := func() float64 {
		n, _ := framework.MetricValue(t, "backendslice_reconciles_total", nil)
		return n
	}
	rv0, r0 := framework.Get(t, xb).ResourceVersion, reconciles()
	w0 := framework.Writes(t, "EndpointSlice")
	const quiet = 4 * time.Second // four probe periods
	time.Sleep(quiet)
	rv1, r1 := framework.Get(t, xb).ResourceVersion, reconciles()
	w1 := framework.Writes(t, "EndpointSlice")
	if w1 != w0 || rv1 != rv0 {
		t.Errorf("in %s of passing probes: %v slice write(s), resourceVersion %s -> %s", quiet, w1-w0, rv0, rv1)
	}
	if r1-r0 > 1 {
		t.Errorf("%v reconciles in %s of passing probes, want at most 1", r1-r0, quiet)
	}
}

// TestEveryServerDownFailsOpen: when every endpoint fails its probe, they
// are published as the source says, Probed says FailOpen, and a Warning
// event tells it; with failOpen false they all go not ready.
func TestEveryServerDownFailsOpen(t *testing.T) {
	for _, failOpen := range []bool{true, false} {
		t.Run(map[bool]string{true: "Open", false: "Closed"}[failOpen], func(t *testing.T) {
			ns := framework.Namespace(t)
			p := tcpProbe()
			p.FailOpen = ptr.To(failOpen)
			xb := backend(ns, p, "c", "d")
			framework.Create(t, xb)
			framework.WaitStates(t, ns, "svc", states(ready, "c", "d"))
			restartAtEnd(t, "c", "d")
			for _, n := range []string{"c", "d"} {
				if err := hosts[n].Stop("tcp", tcpPort); err != nil {
					t.Fatal(err)
				}
			}
			if failOpen {
				waitProbed(t, xb, metav1.ConditionFalse, v1alpha1.ReasonFailOpen)
				framework.WaitEvent(t, xb, corev1.EventTypeWarning, v1alpha1.ReasonFailOpen)
				framework.WaitStates(t, ns, "svc", states(ready, "c", "d"))
				return
			}
			waitProbed(t, xb, metav1.ConditionFalse, v1alpha1.ReasonProbesFailing)
			framework.WaitStates(t, ns, "svc", states(notServing, "c", "d"))
		})
	}
}

// TestHTTPStatusDecides: an HTTP probe whose path answers 500 takes the
// endpoint out; with 500 among the accepted codes it stays.
func TestHTTPStatusDecides(t *testing.T) {
	ns := framework.Namespace(t)
	p := tcpProbe()
	p.TCP = nil
	p.Port = ptr.To[int32](httpPort)
	p.HTTP = &v1alpha1.HTTPProbe{Path: "/fail"}
	xb := backend(ns, p, "a", "b")
	// Probes go to target ports only: the Service targets the HTTP port.
	xb.Spec.Service.Ports = append(xb.Spec.Service.Ports, v1alpha1.ServicePort{Name: "web", Port: 8080, TargetPort: ptr.To[int32](httpPort)})
	// Source b probes "/", source a "/fail".
	xb.Spec.Sources = []v1alpha1.Source{
		{Name: "failing", Static: &v1alpha1.StaticSource{Endpoints: []v1alpha1.StaticEndpoint{{Address: hosts["a"].Addr4.String()}}}},
		{Name: "passing", Static: &v1alpha1.StaticSource{Endpoints: []v1alpha1.StaticEndpoint{{Address: hosts["b"].Addr4.String()}}},
			Probe: &v1alpha1.Probe{HTTP: &v1alpha1.HTTPProbe{Path: "/"}, Port: ptr.To[int32](httpPort),
				Period: &metav1.Duration{Duration: time.Second}, Timeout: &metav1.Duration{Duration: 300 * time.Millisecond}}},
	}
	framework.Create(t, xb)
	framework.WaitStates(t, ns, "svc", merge(states(notServing, "a"), states(ready, "b")))

	framework.Edit(t, xb, func(xb *v1alpha1.ExternalBackend) {
		xb.Spec.Probe.HTTP.StatusCodes = []string{"200-299", "500"}
	})
	framework.WaitStates(t, ns, "svc", states(ready, "a", "b"))
}

// TestProbeNeverRevivesUnhealthy: an endpoint its source calls Unhealthy
// stays not ready although its probe passes.
func TestProbeNeverRevivesUnhealthy(t *testing.T) {
	ns := framework.Namespace(t)
	xb := backend(ns, tcpProbe(), "a", "b")
	xb.Spec.Sources[0].Static.Endpoints[0].Health = v1alpha1.HealthUnhealthy
	framework.Create(t, xb)
	framework.WaitStates(t, ns, "svc", merge(states(notServing, "a"), states(ready, "b")))
	waitProbed(t, xb, metav1.ConditionTrue, v1alpha1.ReasonProbesPassing)
	// Three periods of passing probes later, a is still out.
	time.Sleep(3 * time.Second)
	framework.WaitStates(t, ns, "svc", merge(states(notServing, "a"), states(ready, "b")))
}

// TestDeniedAddressIsNeverProbed: an address the deny list refuses is not
// published, so it is never probed either.
func TestDeniedAddressIsNeverProbed(t *testing.T) {
	ns := framework.Namespace(t)
	denied := netip.MustParsePrefix(framework.TestDenied).Addr().Next().String()
	xb := backend(ns, tcpProbe(), "a")
	xb.Spec.Sources[0].Static.Endpoints = append(xb.Spec.Sources[0].Static.Endpoints, v1alpha1.StaticEndpoint{Address: denied})
	framework.Create(t, xb)
	framework.WaitStates(t, ns, "svc", states(ready, "a"))
	// Three periods: a is probed, the denied address never.
	time.Sleep(3 * time.Second)
	if n := dialed.count(hosts["a"].Addr4.String()); n < 2 {
		t.Errorf("a was probed %d times in 3 periods", n)
	}
	if n := dialed.count(denied); n != 0 {
		t.Errorf("the denied address %s was probed %d times", denied, n)
	}
}

// TestMissingCASecret: an HTTPS probe whose CA Secret is missing cannot
// run: Probed says so and the endpoints are published as the source says.
func TestMissingCASecret(t *testing.T) {
	ns := framework.Namespace(t)
	p := &v1alpha1.Probe{HTTP: &v1alpha1.HTTPProbe{Scheme: v1alpha1.HTTPSchemeHTTPS, ServerName: "db.test",
		CASecretRef: &v1alpha1.SecretKeyReference{Name: "no-such-ca", Key: "ca.crt"}}}
	xb := backend(ns, p, "a")
	framework.Create(t, xb)
	c := waitProbed(t, xb, metav1.ConditionFalse, v1alpha1.ReasonProbeUnavailable)
	for _, want := range []string{"spec.probe.http.caSecretRef", "no-such-ca"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("Probed message %q does not name %q", c.Message, want)
		}
	}
	framework.WaitStates(t, ns, "svc", states(ready, "a"))
}

// TestProbeCASecretsAreTheAdminsChoice: a probe's caSecretRef names a
// Secret of the controller's namespace, which is the platform team's, so a
// tenant may only name those --probe-ca-secrets lists. A Secret that
// exists there but is not listed gets exactly the message of one that
// does not exist: status tells a tenant nothing of the admin's Secrets.
func TestProbeCASecretsAreTheAdminsChoice(t *testing.T) {
	ns := framework.Namespace(t)
	framework.Create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: controllerNamespace, Name: "admin-ca"},
		Data: map[string][]byte{"ca.crt": []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")}})
	messages := map[string]string{}
	for _, secret := range []string{"admin-ca", "absent-ca"} {
		p := &v1alpha1.Probe{HTTP: &v1alpha1.HTTPProbe{Scheme: v1alpha1.HTTPSchemeHTTPS, ServerName: "db.test",
			CASecretRef: &v1alpha1.SecretKeyReference{Name: secret, Key: "ca.crt"}}}
		xb := backend(ns, p, "a")
		xb.Name = secret
		framework.Create(t, xb)
		c := waitProbed(t, xb, metav1.ConditionFalse, v1alpha1.ReasonProbeUnavailable)
		messages[secret] = strings.ReplaceAll(c.Message, secret, "SECRET")
		if !strings.Contains(c.Message, "--probe-ca-secrets") {
			t.Errorf("Probed message %q does not name --probe-ca-secrets", c.Message)
		}
	}
	if messages["admin-ca"] != messages["absent-ca"] {
		t.Errorf("an unlisted Secret that exists says %q, one that does not %q; want one message", messages["admin-ca"], messages["absent-ca"])
	}
}
