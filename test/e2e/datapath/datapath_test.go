package datapath_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/e2e/framework"
	"github.com/backendslice/backendslice/test/netlab"
)

// The Service's ports: the echo server on TCP and UDP behind port 80 (the
// same number, two protocols), and the HTTP server behind 81. Each maps to
// another port on the hosts (targetPort), and kube-proxy must match each
// by name.
var ports = []v1alpha1.ServicePort{
	{Name: "echo", Port: 80, TargetPort: ptr.To[int32](echoPort), Protocol: "TCP"},
	{Name: "echo-udp", Port: 80, TargetPort: ptr.To[int32](echoPort), Protocol: "UDP"},
	{Name: "web", Port: 81, TargetPort: ptr.To[int32](httpPort), Protocol: "TCP"},
}

// family is which addresses of the hosts a backend publishes.
type family int

const (
	ipv4 family = 1 << iota
	ipv6
	dual = ipv4 | ipv6
)

// addressTypes are the spec's address types for f.
func (f family) addressTypes() []v1alpha1.AddressType {
	var out []v1alpha1.AddressType
	if f&ipv4 != 0 {
		out = append(out, v1alpha1.AddressTypeIPv4)
	}
	if f&ipv6 != 0 {
		out = append(out, v1alpha1.AddressTypeIPv6)
	}
	return out
}

// served is the part of f the API server serves.
func (f family) served() family {
	if framework.DualStack() {
		return f
	}
	return f & ipv4
}

// endpoint is a static endpoint for each address of host in f, with the
// host's zone and its name as hostname.
func endpoints(f family, host string, health v1alpha1.Health) []v1alpha1.StaticEndpoint {
	h := hosts[host]
	var out []v1alpha1.StaticEndpoint
	for _, a := range addrs(f, h) {
		out = append(out, v1alpha1.StaticEndpoint{Address: a, Zone: zoneOf(host), Hostname: host, Health: health})
	}
	return out
}

// addrs are the addresses of h in f.
func addrs(f family, h *netlab.Host) []string {
	var out []string
	if f&ipv4 != 0 {
		out = append(out, h.Addr4.String())
	}
	if f&ipv6 != 0 {
		out = append(out, h.Addr6.String())
	}
	return out
}

// zoneOf is the zone of a host: its name's letter.
func zoneOf(host string) string {
	switch host[0] {
	case 'a':
		return nodeZone
	case 'b':
		return otherZone
	}
	return ""
}

// staticBackend is an ExternalBackend "svc" in ns with the test's ports,
// a drain period of a minute and one static source of eps.
func staticBackend(ns string, eps ...[]v1alpha1.StaticEndpoint) *v1alpha1.ExternalBackend {
	return &v1alpha1.ExternalBackend{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "svc"},
		Spec: v1alpha1.ExternalBackendSpec{
			Service:     v1alpha1.ServiceSpec{Ports: ports},
			Sources:     []v1alpha1.Source{{Name: "vms", Static: &v1alpha1.StaticSource{Endpoints: slices.Concat(eps...)}}},
			DrainPeriod: &metav1.Duration{Duration: time.Minute},
		},
	}
}

// setHealth edits the backend's static endpoints of host to health.
func setHealth(t *testing.T, xb *v1alpha1.ExternalBackend, health v1alpha1.Health, names ...string) {
	t.Helper()
	framework.Edit(t, xb, func(xb *v1alpha1.ExternalBackend) {
		eps := xb.Spec.Sources[0].Static.Endpoints
		for i := range eps {
			for _, n := range names {
				if eps[i].Hostname == n {
					eps[i].Health = health
				}
			}
		}
	})
}

// clusterIPs waits until the backend's Service has its ClusterIPs and
// returns them.
func clusterIPs(t *testing.T, xb *v1alpha1.ExternalBackend) []string {
	t.Helper()
	var svc corev1.Service
	framework.Eventually(t, framework.Timeout, "the Service of "+xb.Name, func() error {
		return framework.E().Client.Get(context.Background(), client.ObjectKey{Namespace: xb.Namespace, Name: xb.Name}, &svc)
	})
	return svc.Spec.ClusterIPs
}

// states maps the addresses of the hosts in f to the state wanted.
func states(f family, state string, names ...string) map[string]string {
	out := map[string]string{}
	for _, n := range names {
		for _, a := range addrs(f, hosts[n]) {
			out[a] = state
		}
	}
	return out
}

// Endpoint states, as framework.States writes them.
const (
	ready       = "true/true/false"
	notServing  = "false/false/false"
	terminating = "false/true/true"
)

// waitStates waits until the backend publishes want (its served part).
func waitStates(t *testing.T, xb *v1alpha1.ExternalBackend, want ...map[string]string) {
	t.Helper()
	all := map[string]string{}
	for _, w := range want {
		maps.Copy(all, w)
	}
	framework.WaitStates(t, xb.Namespace, xb.Name, framework.ServedOf(all))
}

// TestClusterIPReachesOnlyReadyEndpoints: through the ClusterIP of each
// family, connections reach every ready endpoint and never an Unhealthy
// one; a Service of both families is reachable on both of its ClusterIPs.
func TestClusterIPReachesOnlyReadyEndpoints(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    family
	}{{"IPv4", ipv4}, {"IPv6", ipv6}, {"DualStack", dual}} {
		t.Run(tc.name, func(t *testing.T) {
			ns := framework.Namespace(t)
			xb := staticBackend(ns, endpoints(tc.f, "a1", ""), endpoints(tc.f, "a2", ""), endpoints(tc.f, "b1", ""),
				endpoints(tc.f, "c1", v1alpha1.HealthUnhealthy))
			xb.Spec.AddressTypes = tc.f.addressTypes()
			framework.Create(t, xb)
			if tc.f.served() == 0 {
				// A single-stack cluster cannot carry an IPv6-only backend:
				// it says so and publishes nothing, so nothing is reachable.
				framework.WaitCondition(t, xb, v1alpha1.ConditionResolved, metav1.ConditionFalse, v1alpha1.ReasonFamilyNotServed)
				return
			}
			waitStates(t, xb, states(tc.f, ready, "a1", "a2", "b1"), states(tc.f, notServing, "c1"))
			ips := clusterIPs(t, xb)
			if want := familyCount(tc.f.served()); len(ips) != want {
				t.Fatalf("ClusterIPs %v, want one per served family (%d)", ips, want)
			}
			for _, ip := range ips {
				waitReaches(t, "tcp", netlab.HostPort(ip, 80), "a1", "a2", "b1")
			}
		})
	}
}

// familyCount is how many families f holds.
func familyCount(f family) int {
	n := 0
	for _, g := range []family{ipv4, ipv6} {
		if f&g != 0 {
			n++
		}
	}
	return n
}

// TestPortsMapByNameAndProtocol: port 80 reaches the echo server on 5000
// over TCP and over UDP, and port 81 the HTTP server on 8080. Were the
// ports matched by number or position instead of name, the HTTP request
// would land on the echo server and fail.
func TestPortsMapByNameAndProtocol(t *testing.T) {
	ns := framework.Namespace(t)
	xb := staticBackend(ns, endpoints(dual, "a1", ""), endpoints(dual, "b1", ""))
	framework.Create(t, xb)
	waitStates(t, xb, states(dual, ready, "a1", "b1"))
	for _, ip := range clusterIPs(t, xb) {
		waitReaches(t, "tcp", netlab.HostPort(ip, 80), "a1", "b1")
		waitReaches(t, "udp", netlab.HostPort(ip, 80), "a1", "b1")
		waitReaches(t, "http", netlab.HostPort(ip, 81), "a1", "b1")
	}
}

// TestTerminatingServingOnlyWhenNoneReady: endpoints that are going away
// but still serve get connections only while no endpoint is ready
// (kube-proxy's fallback), and none once one is.
func TestTerminatingServingOnlyWhenNoneReady(t *testing.T) {
	ns := framework.Namespace(t)
	xb := staticBackend(ns, endpoints(dual, "a1", ""), endpoints(dual, "a2", ""), endpoints(dual, "c1", v1alpha1.HealthUnhealthy))
	framework.Create(t, xb)
	waitStates(t, xb, states(dual, ready, "a1", "a2"), states(dual, notServing, "c1"))
	ips := clusterIPs(t, xb)

	setHealth(t, xb, v1alpha1.HealthDraining, "a1", "a2")
	waitStates(t, xb, states(dual, terminating, "a1", "a2"), states(dual, notServing, "c1"))
	for _, ip := range ips {
		waitReaches(t, "tcp", netlab.HostPort(ip, 80), "a1", "a2")
	}

	setHealth(t, xb, v1alpha1.HealthHealthy, "c1")
	waitStates(t, xb, states(dual, terminating, "a1", "a2"), states(dual, ready, "c1"))
	for _, ip := range ips {
		waitReaches(t, "tcp", netlab.HostPort(ip, 80), "c1")
	}
}

// TestDrainKeepsEstablishedConnections: when an endpoint leaves the spec
// it drains; a connection already open to it keeps working while new
// connections go to the others.
func TestDrainKeepsEstablishedConnections(t *testing.T) {
	ns := framework.Namespace(t)
	xb := staticBackend(ns, endpoints(ipv4, "a1", ""), endpoints(ipv4, "a2", ""))
	framework.Create(t, xb)
	waitStates(t, xb, states(ipv4, ready, "a1", "a2"))
	addr := netlab.HostPort(clusterIPs(t, xb)[0], 80)
	waitReaches(t, "tcp", addr, "a1", "a2")

	// Open connections until one lands on a1 (each lands there with
	// probability one half: 40 tries all missing is one in 10^12).
	var held net.Conn
	var r *bufio.Reader
	for i := 0; i < 40 && held == nil; i++ {
		c, err := lab.Node.Dial(context.Background(), "tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(framework.Timeout * 3))
		br := bufio.NewReader(c)
		name, err := br.ReadString('\n')
		if err == nil && strings.TrimSpace(name) == "a1" {
			held, r = c, br
			continue
		}
		netlab.CloseNow(c)
	}
	if held == nil {
		t.Fatal("40 connections and none reached a1")
	}
	defer netlab.CloseNow(held)

	framework.Edit(t, xb, func(xb *v1alpha1.ExternalBackend) {
		xb.Spec.Sources[0].Static.Endpoints = endpoints(ipv4, "a2", "")
	})
	waitStates(t, xb, states(ipv4, terminating, "a1"), states(ipv4, ready, "a2"))
	waitReaches(t, "tcp", addr, "a2")
	for i := range 3 {
		line := fmt.Sprintf("still there %d\n", i)
		if _, err := io.WriteString(held, line); err != nil {
			t.Fatalf("the connection to draining a1 broke: %v", err)
		}
		if got, err := r.ReadString('\n'); err != nil || got != line {
			t.Fatalf("the connection to draining a1 answered %q, %v; want %q", got, err, line)
		}
	}
}

// TestHeadlessServiceInCoreDNS: CoreDNS answers A and AAAA for a headless
// Service with exactly the ready endpoints, and SRV with their hostnames
// and the backend port.
func TestHeadlessServiceInCoreDNS(t *testing.T) {
	ns := framework.Namespace(t)
	xb := staticBackend(ns, endpoints(dual, "a1", ""), endpoints(dual, "b1", ""),
		endpoints(dual, "c1", v1alpha1.HealthUnhealthy), endpoints(dual, "c2", v1alpha1.HealthDraining))
	xb.Spec.Service.Type = v1alpha1.ServiceTypeHeadless
	framework.Create(t, xb)
	waitStates(t, xb, states(dual, ready, "a1", "b1"), states(dual, notServing, "c1"), states(dual, terminating, "c2"))
	svc := fmt.Sprintf("svc.%s.svc.cluster.local.", ns)

	want := map[uint16][]string{mdns.TypeA: addrs(ipv4, hosts["a1"]), mdns.TypeAAAA: nil}
	want[mdns.TypeA] = append(want[mdns.TypeA], addrs(ipv4, hosts["b1"])...)
	if dual.served()&ipv6 != 0 {
		want[mdns.TypeAAAA] = slices.Concat(addrs(ipv6, hosts["a1"]), addrs(ipv6, hosts["b1"]))
	}
	for qtype, addrs := range want {
		slices.Sort(addrs)
		framework.Eventually(t, framework.Timeout, fmt.Sprintf("%s %s", svc, mdns.TypeToString[qtype]), func() error {
			var got []string
			for _, rr := range query(t, svc, qtype).Answer {
				got = append(got, rrAddr(rr))
			}
			slices.Sort(got)
			if !slices.Equal(got, addrs) {
				return fmt.Errorf("answered %v, want %v", got, addrs)
			}
			return nil
		})
	}

	srv := "_echo._tcp." + svc
	wantSRV := []string{"a1." + svc + " 5000", "b1." + svc + " 5000"}
	framework.Eventually(t, framework.Timeout, srv+" SRV", func() error {
		var got []string
		for _, rr := range query(t, srv, mdns.TypeSRV).Answer {
			if s, ok := rr.(*mdns.SRV); ok {
				got = append(got, fmt.Sprintf("%s %d", s.Target, s.Port))
			}
		}
		slices.Sort(got)
		// One record per hostname and family in a dual-stack cluster.
		got = slices.Compact(got)
		if !slices.Equal(got, wantSRV) {
			return fmt.Errorf("answered %v, want %v", got, wantSRV)
		}
		return nil
	})
	// Each hostname resolves to its own endpoint.
	if got := query(t, "a1."+svc, mdns.TypeA).Answer; len(got) != 1 || rrAddr(got[0]) != hosts["a1"].Addr4.String() {
		t.Errorf("a1.%s A: %v, want %s", svc, got, hosts["a1"].Addr4)
	}
}

// rrAddr is the address of an A or AAAA record.
func rrAddr(rr mdns.RR) string {
	switch r := rr.(type) {
	case *mdns.A:
		return r.A.String()
	case *mdns.AAAA:
		return r.AAAA.String()
	}
	return rr.String()
}

// TestPreferCloseStaysInZone: with trafficDistribution PreferClose,
// kube-proxy on a node in zone-a sends only to zone-a endpoints while any
// of them is ready, and to the others once none is.
func TestPreferCloseStaysInZone(t *testing.T) {
	ns := framework.Namespace(t)
	xb := staticBackend(ns, endpoints(dual, "a1", ""), endpoints(dual, "a2", ""), endpoints(dual, "b1", ""), endpoints(dual, "b2", ""))
	xb.Spec.Service.TrafficDistribution = ptr.To(corev1.ServiceTrafficDistributionPreferClose)
	framework.Create(t, xb)
	waitStates(t, xb, states(dual, ready, "a1", "a2", "b1", "b2"))
	ips := clusterIPs(t, xb)
	reach := func(names ...string) {
		t.Helper()
		for _, ip := range ips {
			waitReaches(t, "tcp", netlab.HostPort(ip, 80), names...)
		}
	}
	reach("a1", "a2")

	setHealth(t, xb, v1alpha1.HealthUnhealthy, "a1")
	waitStates(t, xb, states(dual, notServing, "a1"), states(dual, ready, "a2", "b1", "b2"))
	reach("a2")

	setHealth(t, xb, v1alpha1.HealthUnhealthy, "a2")
	waitStates(t, xb, states(dual, notServing, "a1", "a2"), states(dual, ready, "b1", "b2"))
	reach("b1", "b2")
}
