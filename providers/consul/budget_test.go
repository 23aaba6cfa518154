package consul_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/providers/consul"
	"github.com/backendslice/backendslice/test/consultest"
)

// in is req of namespace ns.
func in(ns string, req providers.Request) providers.Request {
	req.Namespace = ns
	return req
}

// fill resolves n sources of namespace ns through c (the controller's own
// connection when nil), each a service of its own that need not exist,
// and returns their requests.
func fill(t *testing.T, p *consul.Provider, ns string, c *providers.Connection, n int) []providers.Request {
	t.Helper()
	var reqs []providers.Request
	for i := range n {
		name := fmt.Sprintf("%s-filler-%d", ns, i)
		if c != nil {
			name = fmt.Sprintf("%s-%s-filler-%d", ns, c.Name, i)
		}
		req := in(ns, request(name, "consul", v1alpha1.ConsulSource{Service: name}))
		if c != nil {
			req = through(req, c)
		}
		if _, err := p.Resolve(context.Background(), req); err != nil {
			t.Fatalf("%s's source %d of %d: %v", ns, i+1, n, err)
		}
		reqs = append(reqs, req)
	}
	return reqs
}

// TestNamespaceShareOfAConnection: a namespace alone fills
// --consul-max-watches; another namespace's new source then gets a watch,
// taken back from the first (whose stopped source is woken), and the
// first, now past its share, is refused with a message naming the budget
// and its share, without taking the second's watch.
func TestNamespaceShareOfAConnection(t *testing.T) {
	w := newWakes()
	p := newProvider(t, w, consul.Options{Address: shared.Addr, MaxWatches: 4, NamespaceWatchFloor: 1})
	must(t, shared.Register(consultest.Service{ID: "share-victim", Name: "share-victim", Address: "192.0.2.81"}))
	t.Cleanup(func() { _ = shared.Deregister("share-victim") })

	hog := fill(t, p, "hog", nil, 4)
	victim := in("quiet", request("victim", "consul", v1alpha1.ConsulSource{Service: "share-victim"}))
	before := w.count(backendOf(hog[3]))
	resolveUntil(t, p, w, victim, endpoints(providers.Endpoint{Address: "192.0.2.81", Serving: true, Hostname: agentNode}))
	if n := p.Watches(); n != 4 {
		t.Errorf("Watches() = %d, want the limit, 4", n)
	}
	// The newest watch of the namespace over its share was stopped, and
	// its backend woken to say so.
	w.await(t, backendOf(hog[3]), before, fmt.Errorf("the stopped source's backend was not woken"))
	_, err := p.Resolve(context.Background(), hog[3])
	want := "namespace hog holds 3 of the 4 watches of the controller's --consul-* flags (--consul-max-watches), and its share is 2 while 2 namespaces hold watches there"
	if err == nil || providers.AsError(err).Terminal || !strings.Contains(err.Error(), want) {
		t.Fatalf("the stopped source again: %v, want a transient error saying %q", err, want)
	}
	// Its running watches are not disturbed.
	if _, err := p.Resolve(context.Background(), hog[0]); err != nil {
		t.Errorf("a running watch of the namespace over its share: %v", err)
	}
	// The second namespace may grow to its share, taking watches back.
	fill(t, p, "quiet", nil, 1)
	if n := p.Watches(); n != 4 {
		t.Errorf("Watches() = %d, want the limit, 4", n)
	}
	_, err = p.Resolve(context.Background(), in("quiet", request("third", "consul", v1alpha1.ConsulSource{Service: "quiet-third"})))
	if err == nil || !strings.Contains(err.Error(), "namespace quiet holds 2 of the 4 watches") {
		t.Errorf("a third watch of the second namespace: %v, want it held to its share, 2", err)
	}
	// Alone again, the first namespace may use the whole budget.
	p.Forget(backendOf(victim))
	p.Forget(types.NamespacedName{Namespace: "quiet", Name: "quiet-filler-0"})
	if _, err := p.Resolve(context.Background(), hog[3]); err != nil {
		t.Errorf("the first namespace alone again: %v", err)
	}
}

// TestSharedWatchChangesHolder: a watch two namespaces use is charged to
// the second once the first's sources leave it, so that the first is not
// held to (nor stopped for) a watch it no longer uses.
func TestSharedWatchChangesHolder(t *testing.T) {
	w := newWakes()
	p := newProvider(t, w, consul.Options{Address: shared.Addr, MaxWatches: 2, NamespaceWatchFloor: 1})
	svc := v1alpha1.ConsulSource{Service: "shared-holder"}
	first, second := in("one", request("a", "consul", svc)), in("two", request("b", "consul", svc))
	for _, r := range []providers.Request{first, second} {
		if _, err := p.Resolve(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	fill(t, p, "one", nil, 1)
	p.Forget(backendOf(first))
	// "one" and "two" hold one watch each now, their share of 2 with a
	// third namespace asking: the budget is full and no namespace is over
	// its share. Had the shared watch stayed "one"'s, "one" would be over
	// its share and give its other watch back.
	_, err := p.Resolve(context.Background(), in("three", request("c", "consul", v1alpha1.ConsulSource{Service: "holder-third"})))
	if err == nil || !strings.Contains(err.Error(), "already watches 2 Consul services, its limit (--consul-max-watches)") {
		t.Fatalf("a third namespace with the budget full: %v", err)
	}
	if _, err := p.Resolve(context.Background(), in("one", request("one-filler-0", "consul", v1alpha1.ConsulSource{Service: "one-filler-0"}))); err != nil {
		t.Errorf("the first namespace's own watch: %v", err)
	}
	if n := p.Watches(); n != 2 {
		t.Errorf("Watches() = %d, want 2", n)
	}
}

// TestAgentBudget: connections that reach one agent, whatever the spelling
// of its address, share --consul-max-watches-per-agent: a namespace that
// fills it through two BackendProviders leaves another namespace's new
// source a watch (taken back from it), and is then held to its share of
// the agent's budget, named in the refusal.
func TestAgentBudget(t *testing.T) {
	w := newWakes()
	p := newProvider(t, w, consul.Options{Address: shared.Addr, MaxWatches: 10, MaxWatchesPerAgent: 4, NamespaceWatchFloor: 1})
	_, port, _ := strings.Cut(shared.Addr, ":")
	byIP := connection("by-ip", shared.Addr, "", nil)
	byName := connection("by-name", "localhost:"+port, "", nil)
	third := connection("third", "http://localhost:"+port, "", nil)
	must(t, shared.Register(consultest.Service{ID: "agent-victim", Name: "agent-victim", Address: "192.0.2.82"}))
	t.Cleanup(func() { _ = shared.Deregister("agent-victim") })

	fill(t, p, "hog", byIP, 2)
	hog := fill(t, p, "hog", byName, 2)
	_, err := p.Resolve(context.Background(), through(in("hog", request("more", "consul", v1alpha1.ConsulSource{Service: "hog-more"})), byIP))
	if err == nil || !strings.Contains(err.Error(), "the Consul agent at "+shared.Addr+" already watches 4 Consul services, its limit (--consul-max-watches-per-agent)") {
		t.Fatalf("a fifth watch on the agent: %v, want the agent's limit named", err)
	}
	victim := through(in("quiet", request("victim", "consul", v1alpha1.ConsulSource{Service: "agent-victim"})), third)
	resolveUntil(t, p, w, victim, endpoints(providers.Endpoint{Address: "192.0.2.82", Serving: true, Hostname: agentNode}))
	if n := p.Watches(); n != 4 {
		t.Errorf("Watches() = %d, want the agent's limit, 4", n)
	}
	_, err = p.Resolve(context.Background(), hog[1])
	want := "namespace hog holds 3 of the 4 watches of the Consul agent at " + shared.Addr + " (--consul-max-watches-per-agent), and its share is 2"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("the stopped source again: %v, want %q", err, want)
	}
}

// TestWatchesSharedWithAnotherNamespaceAreTakenBack: a namespace over its
// share cannot keep its watches by having a second namespace of its own
// use them too: another namespace's new source still gets a watch, taken
// back from the first, preferring none that the newcomer uses.
func TestWatchesSharedWithAnotherNamespaceAreTakenBack(t *testing.T) {
	w := newWakes()
	p := newProvider(t, w, consul.Options{Address: shared.Addr, MaxWatches: 2, NamespaceWatchFloor: 1})
	must(t, shared.Register(consultest.Service{ID: "taken-back", Name: "taken-back", Address: "192.0.2.83"}))
	t.Cleanup(func() { _ = shared.Deregister("taken-back") })
	var accomplice []providers.Request
	for _, svc := range []string{"pair-a", "pair-b"} {
		for _, ns := range []string{"hog", "accomplice"} {
			req := in(ns, request("b-"+svc, "consul", v1alpha1.ConsulSource{Service: svc}))
			if _, err := p.Resolve(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			if ns == "accomplice" {
				accomplice = append(accomplice, req)
			}
		}
	}
	before := w.count(backendOf(accomplice[1]))
	victim := in("quiet", request("victim", "consul", v1alpha1.ConsulSource{Service: "taken-back"}))
	resolveUntil(t, p, w, victim, endpoints(providers.Endpoint{Address: "192.0.2.83", Serving: true, Hostname: agentNode}))
	if n := p.Watches(); n != 2 {
		t.Errorf("Watches() = %d, want the limit, 2", n)
	}
	// The newest shared watch (pair-b) was stopped, for both its users.
	w.await(t, backendOf(accomplice[1]), before, fmt.Errorf("the second namespace's source of the stopped watch was not woken"))
	if _, err := p.Resolve(context.Background(), accomplice[0]); err != nil {
		t.Errorf("the shared watch left running: %v", err)
	}
}
