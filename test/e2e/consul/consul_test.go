// Package consul_test runs the controller with the consul provider against a
// real kube-apiserver and a real Consul agent (bin/consul, `make consul`), and
// checks that each Consul behaviour ends in the right EndpointSlices and
// status.
package consul_test

import (
	"cmp"
	"fmt"
	"maps"
	"os"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers/consul"
	"github.com/backendslice/backendslice/test/consultest"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

var (
	// agent is the Consul agent the controller's consul provider asks.
	agent *consultest.Agent
	// provider is the controller's consul provider, for its watch count.
	provider *consul.Provider
)

// agentNode is the agent's node name, published as the hostname of the
// instances registered on it; its meta gives them a zone.
const agentNode = "e2e-node"

func TestMain(m *testing.M) {
	os.Exit(framework.RunWithConsul(m,
		consultest.Config{Node: agentNode, NodeMeta: map[string]string{"zone": "zone-node"}},
		// Short retries let a restarted agent be found again within the
		// framework's waits.
		consul.Options{RetryDelay: 100 * time.Millisecond, MaxRetryDelay: time.Second},
		framework.Options{},
		func(c framework.Consul) { agent, provider = c.Agent, c.Provider }))
}

// catalog is a consul source named "catalog" of service, zones from the
// "zone" meta key.
func catalog(service string) v1alpha1.Source {
	return v1alpha1.Source{Name: "catalog", Consul: &v1alpha1.ConsulSource{Service: service, ZoneMetaKey: "zone"}}
}

// newBackend is an ExternalBackend name in ns with one port, IPv4 and IPv6,
// a 2s drain period and the given sources.
func newBackend(ns, name string, sources ...v1alpha1.Source) *v1alpha1.ExternalBackend {
	return &v1alpha1.ExternalBackend{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.ExternalBackendSpec{
			Service:     v1alpha1.ServiceSpec{Ports: []v1alpha1.ServicePort{{Name: "http", Port: 80, TargetPort: ptr.To[int32](8080)}}},
			Sources:     sources,
			DrainPeriod: &metav1.Duration{Duration: 2 * time.Second},
		},
	}
}

// ep is what a test expects of a published endpoint.
type ep struct {
	ready, serving, terminating bool
	zone, hostname              string
}

// ready is a serving endpoint in zone on hostname.
func ready(zone, hostname string) ep {
	return ep{ready: true, serving: true, zone: zone, hostname: hostname}
}

// notServing is an endpoint that takes no traffic.
func notServing(zone, hostname string) ep { return ep{zone: zone, hostname: hostname} }

// draining is an endpoint going away while its health is good: the API
// writes ready=false, serving=true, terminating=true.
func draining(zone, hostname string) ep {
	return ep{serving: true, terminating: true, zone: zone, hostname: hostname}
}

// published reads what the slices of svc in ns publish, by address.
func published(t *testing.T, ns, svc string) (map[string]ep, error) {
	all, err := framework.Published(framework.Slices(t, ns, svc))
	if err != nil {
		return nil, err
	}
	out := make(map[string]ep, len(all))
	for addr, e := range all {
		out[addr] = ep{
			ready:       ptr.Deref(e.Conditions.Ready, false),
			serving:     ptr.Deref(e.Conditions.Serving, false),
			terminating: ptr.Deref(e.Conditions.Terminating, false),
			zone:        ptr.Deref(e.Zone, ""),
			hostname:    ptr.Deref(e.Hostname, ""),
		}
	}
	return out, nil
}

// waitPublished waits until the slices of svc in ns publish exactly want.
func waitPublished(t *testing.T, ns, svc string, want map[string]ep) {
	t.Helper()
	framework.Eventually(t, framework.Timeout, fmt.Sprintf("slices of %s publishing %+v", svc, want), func() error {
		got, err := published(t, ns, svc)
		if err != nil {
			return err
		}
		if !maps.Equal(got, framework.ServedOf(want)) {
			return fmt.Errorf("published %+v", got)
		}
		return nil
	})
}

// sources maps xb's status.sources by name; a source without status reads
// as the zero value, which every check below refuses.
func sources(xb *v1alpha1.ExternalBackend) map[string]v1alpha1.SourceStatus {
	out := make(map[string]v1alpha1.SourceStatus, len(xb.Status.Sources))
	for _, s := range xb.Status.Sources {
		out[s.Name] = s
	}
	return out
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// register registers instances on the agent, deregistered when t ends.
func register(t *testing.T, services ...consultest.Service) {
	t.Helper()
	for _, s := range services {
		must(t, agent.Register(s))
		t.Cleanup(func() { _ = agent.Deregister(cmp.Or(s.ID, s.Name)) })
	}
}

// TestHealthZonesAndHostnames publishes a service whose instances are in
// every state Consul has: the slices carry their health, zone (service meta,
// else node meta) and hostname (the node name), an instance without a
// service address is reached on its node's address, and onlyPassing takes a
// warning instance out of service. A deregistered instance drains, then
// leaves.
func TestHealthZonesAndHostnames(t *testing.T) {
	t.Parallel()
	ns := framework.Namespace(t)
	register(t,
		consultest.Service{ID: "states-1", Name: "states", Address: "192.0.2.10", Meta: map[string]string{"zone": "zone-a"}},
		consultest.Service{ID: "states-2", Name: "states", Address: "192.0.2.11", Status: api.HealthWarning},
		consultest.Service{ID: "states-3", Name: "states", Address: "192.0.2.12", Status: api.HealthCritical},
		consultest.Service{ID: "states-4", Name: "states", Address: "2001:db8::13"},
	)
	must(t, agent.Maintenance("states-4", true))
	must(t, agent.RegisterOn("vm-7", "198.51.100.7", map[string]string{"zone": "zone-b"}, consultest.Service{ID: "states-7", Name: "states"}))
	t.Cleanup(func() { _, _ = agent.Client.Catalog().Deregister(&api.CatalogDeregistration{Node: "vm-7"}, nil) })

	xb := newBackend(ns, "states", catalog("states"))
	framework.Create(t, xb)
	cur := framework.WaitReady(t, xb)
	want := map[string]ep{
		"192.0.2.10":   ready("zone-a", agentNode),
		"192.0.2.11":   ready("zone-node", agentNode),
		"192.0.2.12":   notServing("zone-node", agentNode),
		"2001:db8::13": draining("zone-node", agentNode),
		"198.51.100.7": ready("zone-b", "vm-7"),
	}
	waitPublished(t, ns, "states", want)
	if src := sources(cur)["catalog"]; src.Kind != "consul" || src.Endpoints != 5 || src.LastSuccessTime == nil || src.Stale || src.LastError != "" {
		t.Errorf("status.sources[catalog] = %+v, want kind consul, 5 endpoints, a success time, not stale", src)
	}

	must(t, framework.Update(t, xb, func(xb *v1alpha1.ExternalBackend) { xb.Spec.Sources[0].Consul.OnlyPassing = true }))
	want["192.0.2.11"] = notServing("zone-node", agentNode)
	waitPublished(t, ns, "states", want)

	must(t, agent.Deregister("states-1"))
	want["192.0.2.10"] = draining("zone-a", agentNode)
	waitPublished(t, ns, "states", want)
	delete(want, "192.0.2.10")
	waitPublished(t, ns, "states", want)
	// The status patch follows the slice write of the same reconcile.
	framework.Eventually(t, framework.Timeout, "status.draining empty after the drain period", func() error {
		if d := framework.WaitReady(t, xb).Status.Draining; len(d) != 0 {
			return fmt.Errorf("status.draining = %+v", d)
		}
		return nil
	})
}

// TestCriticalCheckWakesTheController turns a check critical: the slice
// shows the endpoint not ready. Consul answers hold until a watch says
// otherwise (RefreshAfter is zero) and nothing else changes the backend, so
// only the provider's wake-up can bring the reconcile that does it.
func TestCriticalCheckWakesTheController(t *testing.T) {
	t.Parallel()
	ns := framework.Namespace(t)
	register(t, consultest.Service{ID: "wake-1", Name: "wake", Address: "192.0.2.20"})
	xb := newBackend(ns, "wake", catalog("wake"))
	framework.Create(t, xb)
	framework.WaitReady(t, xb)
	waitPublished(t, ns, "wake", map[string]ep{"192.0.2.20": ready("zone-node", agentNode)})

	must(t, agent.SetCheck("wake-1", api.HealthCritical))
	waitPublished(t, ns, "wake", map[string]ep{"192.0.2.20": notServing("zone-node", agentNode)})
	must(t, agent.SetCheck("wake-1", api.HealthPassing))
	waitPublished(t, ns, "wake", map[string]ep{"192.0.2.20": ready("zone-node", agentNode)})
}

// TestStaticDisasterRecoveryNextToConsul merges a Consul service with a
// static disaster-recovery address: both are published, each with the
// health its source gives, and each source has its own status.
func TestStaticDisasterRecoveryNextToConsul(t *testing.T) {
	t.Parallel()
	ns := framework.Namespace(t)
	register(t, consultest.Service{ID: "merged-1", Name: "merged", Address: "192.0.2.40"})
	dr := v1alpha1.Source{Name: "dr", Static: &v1alpha1.StaticSource{Endpoints: []v1alpha1.StaticEndpoint{
		{Address: "198.51.100.40", Zone: "zone-dr", Health: v1alpha1.HealthUnhealthy},
	}}}
	xb := newBackend(ns, "merged", catalog("merged"), dr)
	framework.Create(t, xb)
	cur := framework.WaitReady(t, xb)
	want := map[string]ep{"192.0.2.40": ready("zone-node", agentNode), "198.51.100.40": notServing("zone-dr", "")}
	waitPublished(t, ns, "merged", want)
	if c, s := sources(cur)["catalog"], sources(cur)["dr"]; c.Kind != "consul" || c.Endpoints != 1 || s.Kind != "static" || s.Endpoints != 1 {
		t.Errorf("status.sources: catalog %+v, dr %+v; want one endpoint each, of kinds consul and static", c, s)
	}

	must(t, agent.SetCheck("merged-1", api.HealthCritical))
	want["192.0.2.40"] = notServing("zone-node", agentNode)
	waitPublished(t, ns, "merged", want)
}

// TestTwoBackendsShareOneWatch points two ExternalBackends at one Consul
// service (with different mappings): one watch serves both, and a check
// turning critical reaches both slices. It is not parallel, so that no
// other test starts a watch meanwhile.
func TestTwoBackendsShareOneWatch(t *testing.T) {
	ns := framework.Namespace(t)
	// A service of this run's own: the provider keeps the watches of
	// earlier runs (-count), whose backends it was never told are gone.
	service := "shared-" + ns
	register(t, consultest.Service{Name: service, Address: "192.0.2.30"})
	before := provider.Watches()
	strict := catalog(service)
	strict.Consul.OnlyPassing = true
	one, two := newBackend(ns, "one", catalog(service)), newBackend(ns, "two", strict)
	framework.Create(t, one)
	framework.Create(t, two)
	framework.WaitReady(t, one)
	framework.WaitReady(t, two)
	for _, svc := range []string{"one", "two"} {
		waitPublished(t, ns, svc, map[string]ep{"192.0.2.30": ready("zone-node", agentNode)})
	}
	if n := provider.Watches() - before; n != 1 {
		t.Errorf("two backends on one Consul service started %d watches, want 1", n)
	}

	must(t, agent.SetCheck(service, api.HealthCritical))
	for _, svc := range []string{"one", "two"} {
		waitPublished(t, ns, svc, map[string]ep{"192.0.2.30": notServing("zone-node", agentNode)})
	}
}

// TestConsulOutageKeepsEndpoints stops the Consul agent: the endpoints stay
// as they were and status says the source is stale, keeping its last
// success time; once the agent is back (and its service registered again,
// as a dev agent keeps nothing) the backend recovers by itself. It is not
// parallel: the other tests would see Consul gone.
func TestConsulOutageKeepsEndpoints(t *testing.T) {
	ns := framework.Namespace(t)
	svc := consultest.Service{ID: "outage-1", Name: "outage", Address: "192.0.2.50"}
	register(t, svc)
	xb := newBackend(ns, "outage", catalog("outage"))
	framework.Create(t, xb)
	framework.WaitReady(t, xb)
	want := map[string]ep{"192.0.2.50": ready("zone-node", agentNode)}
	waitPublished(t, ns, "outage", want)
	before := sources(framework.Get(t, xb))["catalog"].LastSuccessTime
	if before == nil {
		t.Fatalf("no lastSuccessTime on status.sources[catalog] of a Ready backend: %+v", framework.Get(t, xb).Status.Sources)
	}

	must(t, agent.Stop())
	restarted := false
	defer func() {
		if !restarted {
			_ = agent.Restart()
		}
	}()
	cur := framework.WaitCondition(t, xb, v1alpha1.ConditionResolved, metav1.ConditionFalse, v1alpha1.ReasonSourceFailed)
	src := sources(cur)["catalog"]
	if !src.Stale || src.LastError == "" || src.LastSuccessTime == nil || !src.LastSuccessTime.Equal(before) || src.Endpoints != 1 {
		t.Errorf("status.sources[catalog] = %+v, want stale with an error, lastSuccessTime %v and 1 endpoint kept", src, before)
	}
	if got, err := published(t, ns, "outage"); err != nil || !maps.Equal(got, want) {
		t.Errorf("while Consul is away the slices publish %+v (%v), want the last known %+v", got, err, want)
	}

	must(t, agent.Restart())
	restarted = true
	must(t, agent.Register(svc))
	waitPublished(t, ns, "outage", want)
	framework.WaitReady(t, xb)
	// The restarted agent answers before the instance is registered again:
	// a pass can find the source fresh with no endpoint, and the pass that
	// finds it again writes the slices before its status.
	framework.Eventually(t, framework.Timeout, "status.sources[catalog] fresh with 1 endpoint after recovery", func() error {
		if src := sources(framework.Get(t, xb))["catalog"]; src.Stale || src.LastError != "" || src.Endpoints != 1 {
			return fmt.Errorf("status.sources[catalog] = %+v", src)
		}
		return nil
	})
}
