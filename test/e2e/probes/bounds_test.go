package probes_test

import (
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/e2e/framework"
	"github.com/backendslice/backendslice/test/netlab"
)

// healthPort is a port the hosts' Services never target: a probe may use
// it only when a BackendProvider allows it.
const healthPort = 9090

// countConnections accepts connections on port of h, in its namespace,
// and counts them, until the test ends: the listener's own view of what
// reached the port, whatever dialled it.
func countConnections(t *testing.T, h *netlab.Host, port int) *atomic.Int64 {
	t.Helper()
	l, err := h.Namespace().Listen("tcp", ":"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	var n atomic.Int64
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			_ = c.Close()
		}
	}()
	return &n
}

// portProbe is tcpProbe on port.
func portProbe(port int32) *v1alpha1.Probe {
	p := tcpProbe()
	p.Port = ptr.To(port)
	return p
}

// TestProbeOnAnotherPortIsRefused: a probe on a port the Service does not
// target, of a source without a provider (the controller's own
// connections), is never sent: no connection reaches the port in three
// periods, Probed says ProbePortNotAllowed naming the field and the fix,
// a Warning event tells it, and the endpoint is published as its source
// says.
func TestProbeOnAnotherPortIsRefused(t *testing.T) {
	ns := framework.Namespace(t)
	accepted := countConnections(t, hosts["a"], healthPort)
	xb := backend(ns, portProbe(healthPort), "a")
	framework.Create(t, xb)
	c := waitProbed(t, xb, metav1.ConditionFalse, v1alpha1.ReasonProbePortNotAllowed)
	for _, want := range []string{"spec.probe.port: 9090", "spec.service.ports", "spec.probes.allowedPorts", "a source without providerRef"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("Probed message %q does not name %q", c.Message, want)
		}
	}
	framework.WaitEvent(t, xb, corev1.EventTypeWarning, v1alpha1.ReasonProbePortNotAllowed)
	framework.WaitStates(t, ns, "svc", states(ready, "a"))
	time.Sleep(3 * time.Second) // three probe periods
	addr := netlab.HostPort(hosts["a"].Addr4.String(), healthPort)
	if n, d := accepted.Load(), dialed.count(addr); n != 0 || d != 0 {
		t.Errorf("port %d got %d connection(s) (%d dialled), want none", healthPort, n, d)
	}
}

// TestProviderAllowsAProbePort: a BackendProvider's
// spec.probes.allowedPorts lets its endpoints be probed on a port the
// Service does not target; taking the port away stops the probes.
func TestProviderAllowsAProbePort(t *testing.T) {
	ns := framework.Namespace(t)
	accepted := countConnections(t, hosts["b"], healthPort)
	bp := &v1alpha1.BackendProvider{ObjectMeta: metav1.ObjectMeta{Name: "health-" + ns}, Spec: v1alpha1.BackendProviderSpec{
		Static: &v1alpha1.StaticProvider{}, AllowedCIDRs: []string{"192.0.2.0/24"},
		Namespaces: v1alpha1.NamespaceSelection{Names: []string{ns}},
		Probes:     &v1alpha1.ProviderProbes{AllowedPorts: []v1alpha1.PortRange{{Port: 8000, EndPort: ptr.To[int32](healthPort)}}},
	}}
	framework.Create(t, bp)
	t.Cleanup(func() { _ = client.IgnoreNotFound(framework.E().Client.Delete(t.Context(), bp)) })
	xb := backend(ns, portProbe(healthPort), "b")
	xb.Spec.Sources[0].ProviderRef = &v1alpha1.ProviderReference{Name: bp.Name}
	framework.Create(t, xb)
	waitProbed(t, xb, metav1.ConditionTrue, v1alpha1.ReasonProbesPassing)
	framework.WaitStates(t, ns, "svc", states(ready, "b"))
	framework.Eventually(t, framework.Timeout, "probes reaching the allowed port", func() error {
		if n := accepted.Load(); n < 2 {
			return fmt.Errorf("%d connection(s) at port %d", n, healthPort)
		}
		return nil
	})

	framework.Edit(t, bp, func(bp *v1alpha1.BackendProvider) { bp.Spec.Probes = nil })
	c := waitProbed(t, xb, metav1.ConditionFalse, v1alpha1.ReasonProbePortNotAllowed)
	if want := fmt.Sprintf("not allowed by BackendProvider %q", bp.Name); !strings.Contains(c.Message, want) {
		t.Errorf("Probed message %q does not say %q", c.Message, want)
	}
	// A probe already running when the port was taken away may still land.
	before := accepted.Load()
	time.Sleep(3 * time.Second)
	if n := accepted.Load(); n > before+1 {
		t.Errorf("%d connection(s) at port %d in three periods after the provider took it away, want none", n-before, healthPort)
	}
}

// TestFailuresLookAlike: a probe answered 500, one answered 404 and one
// refused give a tenant the same Probed message and the same event: the
// status says the probe did not pass, not which code or error (that is
// the controller's log and metric).
func TestFailuresLookAlike(t *testing.T) {
	ns := framework.Namespace(t)
	const closedPort = 8081 // nothing listens there
	failing := map[string]func(*v1alpha1.Probe){
		"status-500": func(p *v1alpha1.Probe) { p.HTTP.Path = "/fail" },
		"status-404": func(p *v1alpha1.Probe) { p.HTTP.Path = "/missing" },
		"refused":    func(p *v1alpha1.Probe) { p.Port = ptr.To[int32](closedPort) },
	}
	conditions, events := map[string]string{}, map[string]string{}
	for name, change := range failing {
		p := tcpProbe()
		p.TCP, p.HTTP, p.Port, p.FailOpen = nil, &v1alpha1.HTTPProbe{Path: "/"}, ptr.To[int32](httpPort), ptr.To(false)
		change(p)
		xb := backend(ns, p, "c")
		xb.Name = name
		xb.Spec.Service.Name = name
		xb.Spec.Service.Ports = []v1alpha1.ServicePort{
			{Name: "web", Port: 80, TargetPort: ptr.To[int32](httpPort)},
			{Name: "closed", Port: 81, TargetPort: ptr.To[int32](closedPort)},
		}
		framework.Create(t, xb)
		c := waitProbed(t, xb, metav1.ConditionFalse, v1alpha1.ReasonProbesFailing)
		framework.WaitStates(t, ns, name, states(notServing, "c"))
		conditions[name] = c.Message
		events[name] = eventNote(framework.WaitEvent(t, xb, corev1.EventTypeWarning, v1alpha1.ReasonProbesFailing))
	}
	for name := range failing {
		if conditions[name] != conditions["refused"] || events[name] != events["refused"] {
			t.Errorf("%s says %q (event %q); refused says %q (event %q): want one message", name,
				conditions[name], events[name], conditions["refused"], events["refused"])
		}
		for _, leak := range []string{"500", "404", "refused", "Internal", "Not Found", "connect"} {
			if strings.Contains(conditions[name]+events[name], leak) {
				t.Errorf("%s: %q / %q tells %q", name, conditions[name], events[name], leak)
			}
		}
	}
}

// TestAllowedPortsAdmission: the API server refuses a provider's
// allowedPorts that are no ports, an inverted range, or more than 32
// entries, naming the field; it takes ports and ranges.
func TestAllowedPortsAdmission(t *testing.T) {
	provider := func(ports ...v1alpha1.PortRange) *v1alpha1.BackendProvider {
		return &v1alpha1.BackendProvider{ObjectMeta: metav1.ObjectMeta{Name: "ports"}, Spec: v1alpha1.BackendProviderSpec{
			Static: &v1alpha1.StaticProvider{}, AllowedCIDRs: []string{"192.0.2.0/24"},
			Namespaces: v1alpha1.NamespaceSelection{Names: []string{"default"}},
			Probes:     &v1alpha1.ProviderProbes{AllowedPorts: ports},
		}}
	}
	many := make([]v1alpha1.PortRange, 33)
	for i := range many {
		many[i] = v1alpha1.PortRange{Port: int32(8000 + i)}
	}
	for _, c := range []struct {
		name  string
		ports []v1alpha1.PortRange
		says  string
	}{
		{"inverted range", []v1alpha1.PortRange{{Port: 9000, EndPort: ptr.To[int32](8000)}}, "spec.probes.allowedPorts[].endPort: must be at least port"},
		{"port 0", []v1alpha1.PortRange{{Port: 0}}, "spec.probes.allowedPorts[0].port"},
		{"past 65535", []v1alpha1.PortRange{{Port: 8000, EndPort: ptr.To[int32](70000)}}, "spec.probes.allowedPorts[0].endPort"},
		{"33 entries", many, "must have at most 32 items"},
	} {
		err := framework.E().Client.Create(t.Context(), provider(c.ports...), client.DryRunAll)
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want refused saying %q", c.name, err, c.says)
		}
	}
	ok := provider(v1alpha1.PortRange{Port: 8008}, v1alpha1.PortRange{Port: 9000, EndPort: ptr.To[int32](9099)}, v1alpha1.PortRange{Port: 65535})
	if err := framework.E().Client.Create(t.Context(), ok, client.DryRunAll); err != nil {
		t.Errorf("ports and ranges refused: %v", err)
	}
}

// eventNote is an event's message.
func eventNote(e *eventsv1.Event) string { return e.Note }
