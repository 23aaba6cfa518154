package kinds_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/cmd/backendslice/wiring"
	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// kindInventory is the made-up kind, of sources and of BackendProviders.
const kindInventory providers.Kind = "inventory"

// inventoryDatacenter is the consul datacenter an inventory claims (see
// the package comment).
const inventoryDatacenter = "inventory"

// ruleListed refuses a service the inventory provider does not list.
const ruleListed = "Listed"

// kindsWithInventory is the built-in table with the inventory row ahead.
func kindsWithInventory() providers.Kinds {
	provider := &providers.ProviderKind{
		Name: string(kindInventory),
		Of: func(s v1alpha1.BackendProviderSpec) bool {
			return s.Consul != nil && s.Consul.Datacenter == inventoryDatacenter
		},
		// The inventory needs nothing but the provider's name: no Secret,
		// no address of its own.
		Connect: func(_ context.Context, bp *v1alpha1.BackendProvider, _ providers.SecretReader) (*providers.Connection, error) {
			return providers.NewConnection(bp), nil
		},
	}
	row := providers.SourceKind{
		Kind: kindInventory,
		Of: func(s v1alpha1.Source) bool {
			return s.Consul != nil && s.Consul.Datacenter == inventoryDatacenter
		},
		Provider: provider,
		Admit:    admitListed,
	}
	return append(providers.Kinds{row}, wiring.Kinds()...)
}

// admitListed is the inventory's own rule: it serves the services its
// provider lists, by name (where consul's rule matches globs).
func admitListed(p *v1alpha1.BackendProvider, src v1alpha1.Source) *providers.Denial {
	if slices.Contains(p.Spec.Consul.AllowedServices, src.Consul.Service) {
		return nil
	}
	return &providers.Denial{Rule: ruleListed, Message: fmt.Sprintf(
		"spec.sources[%s].consul.service: %q is not listed in BackendProvider %q (spec.consul.allowedServices); the inventory serves listed services only",
		src.Name, src.Consul.Service, p.Name)}
}

// fakeInventory is the inventory's Provider: the addresses of each
// service, and the requests it answered, by namespace.
type fakeInventory struct {
	mu       sync.Mutex
	services map[string][]string
	asked    map[string][]providers.Request
}

func newInventory() *fakeInventory {
	return &fakeInventory{services: map[string][]string{}, asked: map[string][]providers.Request{}}
}

func (f *fakeInventory) Kind() providers.Kind { return kindInventory }

// Resolve answers with the service's addresses, through the inventory
// row's connection only: any other is a wiring error, terminal.
func (f *fakeInventory) Resolve(_ context.Context, req providers.Request) (providers.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked[req.Namespace] = append(f.asked[req.Namespace], req)
	if c := req.Connection; c == nil || c.Settings != nil || c.Name != req.Source.ProviderRef.Name {
		return providers.Result{}, providers.Terminalf(v1alpha1.ReasonInvalidSpec, "inventory asked through %+v, not the inventory row's connection", c)
	}
	var res providers.Result
	for _, a := range f.services[req.Source.Consul.Service] {
		res.Endpoints = append(res.Endpoints, providers.Endpoint{Address: a, Serving: true})
	}
	// Asked again soon, so that a changed inventory shows within a test.
	res.RefreshAfter = time.Second
	return res, nil
}

// set lists the addresses of service.
func (f *fakeInventory) set(service string, addrs ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.services[service] = addrs
}

// requests are the requests the inventory answered for namespace ns.
func (f *fakeInventory) requests(ns string) []providers.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.asked[ns])
}

// inventoryProvider is an inventory BackendProvider admitting namespaces
// and listing services; it is deleted when the test ends.
func inventoryProvider(t *testing.T, name string, namespaces []string, services ...string) {
	t.Helper()
	createProvider(t, name, namespaces, &v1alpha1.ConsulProvider{
		Address: "inventory.test:8500", Datacenter: inventoryDatacenter, AllowedServices: services})
}

// createProvider creates a BackendProvider of the consul field admitting
// namespaces, deleted when the test ends.
func createProvider(t *testing.T, name string, namespaces []string, consul *v1alpha1.ConsulProvider) {
	t.Helper()
	bp := &v1alpha1.BackendProvider{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.BackendProviderSpec{
		Consul: consul, Namespaces: v1alpha1.NamespaceSelection{Names: namespaces}}}
	framework.Create(t, bp)
	t.Cleanup(func() { _ = framework.E().Client.Delete(context.Background(), bp) })
}

// backend is an ExternalBackend of one TCP port, both IP families and no
// drain period, with one source of the consul field.
func backend(ns, provider, service, datacenter string) *v1alpha1.ExternalBackend {
	return &v1alpha1.ExternalBackend{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "assets"},
		Spec: v1alpha1.ExternalBackendSpec{
			Service:      v1alpha1.ServiceSpec{Ports: []v1alpha1.ServicePort{{Name: "tcp", Port: 5432}}},
			AddressTypes: []v1alpha1.AddressType{v1alpha1.AddressTypeIPv4, v1alpha1.AddressTypeIPv6},
			DrainPeriod:  &metav1.Duration{},
			Sources: []v1alpha1.Source{{Name: "assets", ProviderRef: &v1alpha1.ProviderReference{Name: provider},
				Consul: &v1alpha1.ConsulSource{Service: service, Datacenter: datacenter}}},
		},
	}
}

// TestInventoryPublishes: an inventory source through an inventory
// provider is admitted, resolved by the inventory's Provider with the
// inventory row's connection, and published; a change in the inventory is
// published too.
func TestInventoryPublishes(t *testing.T) {
	t.Parallel()
	ns := framework.Namespace(t)
	provider := "inventory-" + ns
	inventoryProvider(t, provider, []string{ns}, ns)
	inventory.set(ns, "192.0.2.41", "2001:db8::41")
	xb := backend(ns, provider, ns, inventoryDatacenter)
	framework.Create(t, xb)

	framework.WaitReady(t, xb)
	framework.WaitAddresses(t, ns, xb.Name, framework.Served("192.0.2.41", "2001:db8::41")...)
	reqs := inventory.requests(ns)
	if len(reqs) == 0 {
		t.Fatal("published, but the inventory was never asked")
	}
	if c := reqs[0].Connection; c.Name != provider || c.Key == "" || c.Settings != nil {
		t.Errorf("inventory asked through %+v, want the inventory row's connection of %s", c, provider)
	}

	inventory.set(ns, "192.0.2.42")
	framework.WaitAddresses(t, ns, xb.Name, "192.0.2.42")
}

// TestInventoryRefusals: the table's rows decide admission. An inventory
// source through a consul provider and a consul source through an
// inventory provider are refused by kind, naming the kinds the table
// gives; a service the inventory does not list is refused by the row's
// own rule; a namespace the provider does not admit is refused as for
// every kind. Refused sources publish nothing and ask the inventory
// nothing.
func TestInventoryRefusals(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		// setup creates the provider of namespace ns and returns the
		// backend's source: provider, service and datacenter.
		setup func(t *testing.T, ns string) (provider, service, datacenter string)
		says  []string
	}{
		{"inventory through consul", func(t *testing.T, ns string) (string, string, string) {
			createProvider(t, "consul-"+ns, []string{ns}, &v1alpha1.ConsulProvider{Address: "consul.test:8500", Datacenter: "eu"})
			return "consul-" + ns, ns, inventoryDatacenter
		}, []string{fmt.Sprintf("is of kind consul and cannot serve %s sources; name a BackendProvider of kind %s", kindInventory, kindInventory)}},
		{"consul through inventory", func(t *testing.T, ns string) (string, string, string) {
			inventoryProvider(t, "inventory-"+ns, []string{ns}, ns)
			return "inventory-" + ns, ns, ""
		}, []string{"is of kind inventory and cannot serve consul sources; name a BackendProvider of kind consul"}},
		{"service not listed", func(t *testing.T, ns string) (string, string, string) {
			inventoryProvider(t, "inventory-"+ns, []string{ns}, "another")
			return "inventory-" + ns, ns, inventoryDatacenter
		}, []string{"is not listed in BackendProvider", "the inventory serves listed services only", ruleListed}},
		{"namespace not admitted", func(t *testing.T, ns string) (string, string, string) {
			inventoryProvider(t, "inventory-"+ns, []string{"elsewhere"}, ns)
			return "inventory-" + ns, ns, inventoryDatacenter
		}, []string{"is not admitted to BackendProvider"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ns := framework.Namespace(t)
			provider, service, datacenter := c.setup(t, ns)
			inventory.set(service, "192.0.2.43")
			xb := backend(ns, provider, service, datacenter)
			framework.Create(t, xb)
			waitRefused(t, xb, c.says...)
			if got := framework.Slices(t, ns, xb.Name); len(got) != 0 {
				t.Errorf("a refused source published %d slice(s)", len(got))
			}
			if n := len(inventory.requests(ns)); n != 0 {
				t.Errorf("the inventory was asked %d time(s) for a refused source", n)
			}
		})
	}
}

// waitRefused waits until Resolved and Ready are False with reason
// ProviderNotAdmitted for xb's generation, their messages holding parts.
func waitRefused(t *testing.T, xb *v1alpha1.ExternalBackend, parts ...string) {
	t.Helper()
	framework.Eventually(t, framework.Timeout, fmt.Sprintf("%s/%s refused saying %q", xb.Namespace, xb.Name, parts), func() error {
		cur := framework.Get(t, xb)
		for _, typ := range []string{v1alpha1.ConditionResolved, v1alpha1.ConditionReady} {
			c := meta.FindStatusCondition(cur.Status.Conditions, typ)
			switch {
			case c == nil:
				return fmt.Errorf("no %s condition yet", typ)
			case c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonProviderNotAdmitted || c.ObservedGeneration != cur.Generation:
				return fmt.Errorf("%s is %s/%s (generation %d of %d): %s", typ, c.Status, c.Reason, c.ObservedGeneration, cur.Generation, c.Message)
			}
			for _, p := range parts {
				if !strings.Contains(c.Message, p) {
					return fmt.Errorf("%s message %q lacks %q", typ, c.Message, p)
				}
			}
		}
		return nil
	})
}
