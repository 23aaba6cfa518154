package consul_test

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/types"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/providers/consul"
	"github.com/backendslice/backendslice/providers/providertest"
	"github.com/backendslice/backendslice/test/consultest"
)

// shared is the agent the tests share; tests that stop the agent or turn
// ACLs on run their own.
var shared *consultest.Agent

// agentNode is the shared agent's node: its name is a hostname, its meta a zone.
const agentNode = "consul-test"

func TestMain(m *testing.M) {
	a, err := consultest.Start(consultest.Config{Node: agentNode, NodeMeta: map[string]string{"zone": "node-zone", "rack": "r1"}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	shared = a
	code := m.Run()
	if err := a.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

// wakeBound is how long a test waits for a wake-up before failing: a
// safety bound for a broken watch, not a measurement.
const wakeBound = 30 * time.Second

// wakes is a providers.Waker that records wake-ups and lets tests wait for them.
type wakes struct {
	mu     sync.Mutex
	log    []types.NamespacedName
	notify chan struct{}
}

func newWakes() *wakes { return &wakes{notify: make(chan struct{})} }

// Wake records a wake-up; it never blocks.
func (w *wakes) Wake(b types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.log = append(w.log, b)
	close(w.notify)
	w.notify = make(chan struct{})
}

// count is how many wake-ups b has had.
func (w *wakes) count(b types.NamespacedName) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, x := range w.log {
		if x == b {
			n++
		}
	}
	return n
}

// reset forgets the wake-ups so far.
func (w *wakes) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.log = nil
}

// await waits until b has had more than n wake-ups; why says what the test
// is waiting for.
func (w *wakes) await(t *testing.T, b types.NamespacedName, n int, why error) {
	t.Helper()
	timeout := time.NewTimer(wakeBound)
	defer timeout.Stop()
	for {
		w.mu.Lock()
		ch := w.notify
		w.mu.Unlock()
		if w.count(b) > n {
			return
		}
		select {
		case <-ch:
		case <-timeout.C:
			t.Fatalf("no wake-up for %s in %s while waiting: %v", b, wakeBound, why)
		}
	}
}

// newProvider returns a provider for the agent at addr, stopped when t ends.
func newProvider(t *testing.T, w providers.Waker, opts consul.Options) *consul.Provider {
	t.Helper()
	opts.RetryDelay, opts.MaxRetryDelay = 20*time.Millisecond, 200*time.Millisecond
	p, err := consul.New(opts, w)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// request asks for source name of backend.
func request(backend, name string, src v1alpha1.ConsulSource) providers.Request {
	return providers.Request{
		Namespace: "test", Backend: backend,
		Source:       v1alpha1.Source{Name: name, Consul: &src},
		AddressTypes: []v1alpha1.AddressType{v1alpha1.AddressTypeIPv4, v1alpha1.AddressTypeIPv6},
	}
}

func backendOf(req providers.Request) types.NamespacedName {
	return types.NamespacedName{Namespace: req.Namespace, Name: req.Backend}
}

// resolveUntil resolves req until check accepts the answer, resolving again
// at each wake-up of the backend and never otherwise: a change that does
// not wake the backend fails the test.
func resolveUntil(t *testing.T, p *consul.Provider, w *wakes, req providers.Request, check func(providers.Result, error) error) providers.Result {
	t.Helper()
	b := backendOf(req)
	for {
		n := w.count(b)
		res, err := p.Resolve(context.Background(), req)
		problem := check(res, err)
		if problem == nil {
			return res
		}
		w.await(t, b, n, problem)
	}
}

// endpoints accepts an answer of exactly want, in any order.
func endpoints(want ...providers.Endpoint) func(providers.Result, error) error {
	return func(res providers.Result, err error) error {
		if err != nil {
			return err
		}
		got := slices.Clone(res.Endpoints)
		sortEndpoints(got)
		want := slices.Clone(want)
		sortEndpoints(want)
		if len(got)+len(want) > 0 && !reflect.DeepEqual(got, want) {
			return fmt.Errorf("endpoints\n %+v\nwant\n %+v", got, want)
		}
		return nil
	}
}

func sortEndpoints(eps []providers.Endpoint) {
	slices.SortFunc(eps, func(a, b providers.Endpoint) int { return cmp.Compare(a.Address, b.Address) })
}

// failing accepts a failure that is transient and whose message contains text.
func failing(text string) func(providers.Result, error) error {
	return func(res providers.Result, err error) error {
		switch {
		case err == nil:
			return fmt.Errorf("resolved %+v, want a failure", res.Endpoints)
		case providers.IsTerminal(err):
			return fmt.Errorf("terminal failure, want a transient one: %w", err)
		case !strings.Contains(err.Error(), text):
			return fmt.Errorf("failure does not say %q: %w", text, err)
		}
		return nil
	}
}

// refused accepts a terminal AccessDenied failure whose message contains
// every text.
func refused(texts ...string) func(providers.Result, error) error {
	return func(res providers.Result, err error) error {
		switch {
		case err == nil:
			return fmt.Errorf("resolved %+v, want Consul to refuse the token", res.Endpoints)
		case !providers.IsTerminal(err) || providers.AsError(err).Reason != v1alpha1.ReasonAccessDenied:
			return fmt.Errorf("failure %+v, want a terminal %s: %w", *providers.AsError(err), v1alpha1.ReasonAccessDenied, err)
		}
		for _, text := range texts {
			if !strings.Contains(err.Error(), text) {
				return fmt.Errorf("failure does not say %q: %w", text, err)
			}
		}
		return nil
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// registerConformance registers the instances the conformance cases read:
// four on the agent's node (one per health state), two on external nodes.
func registerConformance(t *testing.T) {
	t.Helper()
	for _, s := range []consultest.Service{
		{ID: "conf-1", Name: "conf", Address: "192.0.2.1", Tags: []string{"primary"}, Meta: map[string]string{"zone": "svc-a"}},
		{ID: "conf-2", Name: "conf", Address: "192.0.2.2", Status: api.HealthWarning},
		{ID: "conf-3", Name: "conf", Address: "192.0.2.3", Status: api.HealthCritical},
		{ID: "conf-4", Name: "conf", Address: "2001:db8::4", Tags: []string{"primary"}},
	} {
		must(t, shared.Register(s))
	}
	must(t, shared.Maintenance("conf-4", true))
	// No service address: the node's is used; the zone is in the node meta.
	must(t, shared.RegisterOn("vm-7", "198.51.100.7", map[string]string{"zone": "ext-b", "rack": "r2"},
		consultest.Service{ID: "conf-7", Name: "conf", Tags: []string{"primary"}}))
	// A node name that is no DNS label gives no hostname.
	must(t, shared.RegisterOn("VM_8", "198.51.100.8", map[string]string{"rack": "r2"},
		consultest.Service{ID: "conf-8", Name: "conf", Address: "203.0.113.8", Status: api.HealthCritical}))
}

func TestConformance(t *testing.T) {
	conf := func(name string, src v1alpha1.ConsulSource) providers.Request {
		src.Service = "conf"
		return providertest.NewRequest(v1alpha1.Source{Name: name, Consul: &src})
	}
	providertest.Run(t, providertest.Harness{
		Kind:     consul.Kind,
		Kinds:    consul.Kinds(),
		Provider: newProvider(t, newWakes(), consul.Options{Address: shared.Addr}),
		Good: func(t *testing.T) []providertest.Case {
			registerConformance(t)
			return []providertest.Case{
				{
					Name:    "every health state, zones from service then node meta",
					Request: conf("all", v1alpha1.ConsulSource{ZoneMetaKey: "zone"}),
					Want: []providers.Endpoint{
						{Address: "192.0.2.1", Zone: "svc-a", Hostname: agentNode, Serving: true},
						{Address: "192.0.2.2", Zone: "node-zone", Hostname: agentNode, Serving: true},
						{Address: "192.0.2.3", Zone: "node-zone", Hostname: agentNode},
						{Address: "2001:db8::4", Zone: "node-zone", Hostname: agentNode, Serving: true, Terminating: true},
						{Address: "198.51.100.7", Zone: "ext-b", Hostname: "vm-7", Serving: true},
						{Address: "203.0.113.8"},
					},
				},
				{
					Name:    "only passing",
					Request: conf("passing", v1alpha1.ConsulSource{OnlyPassing: true}),
					Want: []providers.Endpoint{
						{Address: "192.0.2.1", Hostname: agentNode, Serving: true},
						{Address: "192.0.2.2", Hostname: agentNode},
						{Address: "192.0.2.3", Hostname: agentNode},
						{Address: "2001:db8::4", Hostname: agentNode, Serving: true, Terminating: true},
						{Address: "198.51.100.7", Hostname: "vm-7", Serving: true},
						{Address: "203.0.113.8"},
					},
				},
				{
					Name:    "tag filter",
					Request: conf("tagged", v1alpha1.ConsulSource{Tags: []string{"primary"}}),
					Want: []providers.Endpoint{
						{Address: "192.0.2.1", Hostname: agentNode, Serving: true},
						{Address: "2001:db8::4", Hostname: agentNode, Serving: true, Terminating: true},
						{Address: "198.51.100.7", Hostname: "vm-7", Serving: true},
					},
				},
				{
					Name:    "node meta filter",
					Request: conf("rack", v1alpha1.ConsulSource{NodeMeta: map[string]string{"rack": "r2"}, ZoneMetaKey: "zone"}),
					Want: []providers.Endpoint{
						{Address: "198.51.100.7", Zone: "ext-b", Hostname: "vm-7", Serving: true},
						{Address: "203.0.113.8"},
					},
				},
			}
		},
		Missing: func(*testing.T) providertest.MissingCase {
			// Consul answers an unknown service with no instances.
			return providertest.MissingCase{Request: conf("missing", v1alpha1.ConsulSource{Tags: []string{"no-such-tag"}})}
		},
		Broken: func(*testing.T) []providertest.FailCase {
			return []providertest.FailCase{
				{
					Name:    "no consul field",
					Request: providertest.NewRequest(v1alpha1.Source{Name: "none"}),
					Failure: providertest.Failure{Terminal: true, Reason: v1alpha1.ReasonInvalidSpec, MessageContains: []string{"spec.sources[none]"}},
				},
				{
					Name:    "another kind",
					Request: providertest.NewRequest(v1alpha1.Source{Name: "dns", DNS: &v1alpha1.DNSSource{Name: "db.example.com"}}),
					Failure: providertest.Failure{Terminal: true, Reason: v1alpha1.ReasonInvalidSpec, MessageContains: []string{"spec.sources[dns]: not a consul source"}},
				},
				{
					Name:    "no service",
					Request: providertest.NewRequest(v1alpha1.Source{Name: "empty", Consul: &v1alpha1.ConsulSource{}}),
					Failure: providertest.Failure{Terminal: true, Reason: v1alpha1.ReasonInvalidSpec, MessageContains: []string{"spec.sources[empty].consul.service"}},
				},
				{
					// It would be a path of the agent's API, asked with the controller's token.
					Name:    "service name climbing out of the health path",
					Request: providertest.NewRequest(v1alpha1.Source{Name: "climb", Consul: &v1alpha1.ConsulSource{Service: "../../agent/self"}}),
					Failure: providertest.Failure{Terminal: true, Reason: v1alpha1.ReasonInvalidSpec,
						MessageContains: []string{"spec.sources[climb].consul.service", "is not a Consul service name"}},
				},
				{
					// Consul CE refuses namespaces: the spec is wrong for this Consul.
					Name:    "namespace on Consul CE",
					Request: conf("ns", v1alpha1.ConsulSource{Namespace: "team-a"}),
					Failure: providertest.Failure{Terminal: true, Reason: v1alpha1.ReasonInvalidSpec,
						MessageContains: []string{"spec.sources[ns].consul", "Namespaces are a Consul Enterprise feature"}},
				},
				{
					// A datacenter may be unreachable for a while: retried.
					Name:    "unknown datacenter",
					Request: conf("dc", v1alpha1.ConsulSource{Datacenter: "nowhere"}),
					Failure: providertest.Failure{Terminal: false, Reason: v1alpha1.ReasonSourceFailed,
						MessageContains: []string{"spec.sources[dc].consul", "No path to datacenter"}},
				},
			}
		},
	})
}

func TestHealthFollowsChecks(t *testing.T) {
	w := newWakes()
	p := newProvider(t, w, consul.Options{Address: shared.Addr})
	must(t, shared.Register(consultest.Service{ID: "flip-1", Name: "flip", Address: "192.0.2.21"}))
	must(t, shared.Register(consultest.Service{ID: "flip-2", Name: "flip", Address: "192.0.2.22"}))
	t.Cleanup(func() { _ = shared.Deregister("flip-1"); _ = shared.Deregister("flip-2") })
	req := request("flip", "consul", v1alpha1.ConsulSource{Service: "flip"})
	onlyPassing := request("flip-strict", "consul", v1alpha1.ConsulSource{Service: "flip", OnlyPassing: true})
	up := providers.Endpoint{Address: "192.0.2.21", Hostname: agentNode, Serving: true}
	other := providers.Endpoint{Address: "192.0.2.22", Hostname: agentNode, Serving: true}
	resolveUntil(t, p, w, req, endpoints(up, other))
	resolveUntil(t, p, w, onlyPassing, endpoints(up, other))

	steps := []struct {
		name             string
		change           func() error
		want, wantStrict providers.Endpoint
		wantAbsent       bool
	}{
		{name: "warning serves unless only passing", change: func() error { return shared.SetCheck("flip-1", api.HealthWarning) },
			want:       providers.Endpoint{Address: "192.0.2.21", Hostname: agentNode, Serving: true},
			wantStrict: providers.Endpoint{Address: "192.0.2.21", Hostname: agentNode}},
		{name: "critical does not serve", change: func() error { return shared.SetCheck("flip-1", api.HealthCritical) },
			want:       providers.Endpoint{Address: "192.0.2.21", Hostname: agentNode},
			wantStrict: providers.Endpoint{Address: "192.0.2.21", Hostname: agentNode}},
		{name: "passing again", change: func() error { return shared.SetCheck("flip-1", api.HealthPassing) },
			want: up, wantStrict: up},
		{name: "service maintenance drains", change: func() error { return shared.Maintenance("flip-1", true) },
			want:       providers.Endpoint{Address: "192.0.2.21", Hostname: agentNode, Serving: true, Terminating: true},
			wantStrict: providers.Endpoint{Address: "192.0.2.21", Hostname: agentNode, Serving: true, Terminating: true}},
		{name: "out of maintenance", change: func() error { return shared.Maintenance("flip-1", false) },
			want: up, wantStrict: up},
		{name: "deregistered instance leaves the answer", change: func() error { return shared.Deregister("flip-1") },
			wantAbsent: true},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			must(t, s.change())
			if s.wantAbsent {
				resolveUntil(t, p, w, req, endpoints(other))
				resolveUntil(t, p, w, onlyPassing, endpoints(other))
				return
			}
			resolveUntil(t, p, w, req, endpoints(s.want, other))
			resolveUntil(t, p, w, onlyPassing, endpoints(s.wantStrict, other))
		})
	}
}

func TestNodeMaintenanceDrainsEveryInstance(t *testing.T) {
	w := newWakes()
	p := newProvider(t, w, consul.Options{Address: shared.Addr})
	must(t, shared.Register(consultest.Service{ID: "node-maint-1", Name: "node-maint", Address: "192.0.2.31", Status: api.HealthCritical}))
	must(t, shared.Register(consultest.Service{ID: "node-maint-2", Name: "node-maint", Address: "192.0.2.32"}))
	t.Cleanup(func() { _ = shared.Deregister("node-maint-1"); _ = shared.Deregister("node-maint-2") })
	req := request("node-maint", "consul", v1alpha1.ConsulSource{Service: "node-maint"})
	resolveUntil(t, p, w, req, endpoints(
		providers.Endpoint{Address: "192.0.2.31", Hostname: agentNode},
		providers.Endpoint{Address: "192.0.2.32", Hostname: agentNode, Serving: true}))
	must(t, shared.NodeMaintenance(true))
	t.Cleanup(func() { _ = shared.NodeMaintenance(false) })
	// Each keeps the health of its own checks while it drains.
	resolveUntil(t, p, w, req, endpoints(
		providers.Endpoint{Address: "192.0.2.31", Hostname: agentNode, Terminating: true},
		providers.Endpoint{Address: "192.0.2.32", Hostname: agentNode, Serving: true, Terminating: true}))
}

func TestWatchesAreShared(t *testing.T) {
	w := newWakes()
	p := newProvider(t, w, consul.Options{Address: shared.Addr})
	for _, s := range []consultest.Service{
		{ID: "share-a", Name: "share-a", Address: "192.0.2.41", Tags: []string{"x", "y"}},
		{ID: "share-b", Name: "share-b", Address: "192.0.2.42"},
	} {
		must(t, shared.Register(s))
		t.Cleanup(func() { _ = shared.Deregister(s.ID) })
	}
	// Three sources in two backends on one key (tags in another order, another
	// mapping), and one backend on another service.
	a1 := request("a1", "consul", v1alpha1.ConsulSource{Service: "share-a", Tags: []string{"x", "y"}})
	a1b := request("a1", "consul-strict", v1alpha1.ConsulSource{Service: "share-a", Tags: []string{"y", "x"}, OnlyPassing: true})
	a2 := request("a2", "catalog", v1alpha1.ConsulSource{Service: "share-a", Tags: []string{"x", "y", "x"}, ZoneMetaKey: "zone"})
	b := request("b", "consul", v1alpha1.ConsulSource{Service: "share-b"})
	for _, req := range []providers.Request{a1, a1b, a2, b} {
		resolveUntil(t, p, w, req, func(res providers.Result, err error) error { return err })
	}
	if n := p.Watches(); n != 2 {
		t.Fatalf("Watches() = %d for two keys, want 2", n)
	}
	// The first answer of each watch woke the backend that started it
	// (a2 came later); wait for those wake-ups before forgetting them.
	for _, req := range []providers.Request{a1, b} {
		w.await(t, backendOf(req), 0, fmt.Errorf("first answer for %s", req.Backend))
	}
	w.reset()

	must(t, shared.SetCheck("share-a", api.HealthCritical))
	w.await(t, backendOf(a1), 0, fmt.Errorf("a change of share-a"))
	w.await(t, backendOf(a2), 0, fmt.Errorf("a change of share-a"))
	// Close waits for the watches, so every wake-up they made is in.
	p.Close()
	if n := w.count(backendOf(b)); n != 0 {
		t.Errorf("backend b, on another service, was woken %d time(s) by a change of share-a", n)
	}
	if n := w.count(backendOf(a1)); n != 1 {
		t.Errorf("backend a1 was woken %d times by one change, want once for its two sources", n)
	}
}

// TestFiltersShareOneWatch is the red-team attack on the agent's
// connections: 240 sources of one service that differ only in their node
// meta and tags once held 240 long-polls open, and the agent's limit per
// client (200) then answered 429 to another namespace's new source. Now
// they share one watch and each filters its answer, and the other
// namespace's source is answered.
func TestFiltersShareOneWatch(t *testing.T) {
	w := newWakes()
	p := newProvider(t, w, consul.Options{Address: shared.Addr})
	for _, s := range []consultest.Service{
		{ID: "flood-1", Name: "flood", Address: "192.0.2.61", Tags: []string{"primary"}},
		{ID: "flood-2", Name: "flood", Address: "192.0.2.62"},
		{ID: "victim", Name: "victim", Address: "192.0.2.63"},
	} {
		must(t, shared.Register(s))
		t.Cleanup(func() { _ = shared.Deregister(s.ID) })
	}
	for i := range 240 {
		req := request(fmt.Sprintf("attacker-%d", i), "consul",
			v1alpha1.ConsulSource{Service: "flood", NodeMeta: map[string]string{"rack": fmt.Sprint(i)}})
		if _, err := p.Resolve(context.Background(), req); err != nil {
			t.Fatalf("source %d: %v", i, err)
		}
	}
	if n := p.Watches(); n != 1 {
		t.Fatalf("Watches() = %d for 240 filters of one service, want 1", n)
	}
	// Each source still gets only what its filter selects.
	resolveUntil(t, p, w, request("tagged", "consul", v1alpha1.ConsulSource{Service: "flood", Tags: []string{"primary"}}),
		endpoints(providers.Endpoint{Address: "192.0.2.61", Serving: true, Hostname: agentNode}))
	resolveUntil(t, p, w, request("rack", "consul", v1alpha1.ConsulSource{Service: "flood", NodeMeta: map[string]string{"rack": "r1"}}),
		endpoints(providers.Endpoint{Address: "192.0.2.61", Serving: true, Hostname: agentNode},
			providers.Endpoint{Address: "192.0.2.62", Serving: true, Hostname: agentNode}))
	resolveUntil(t, p, w, request("none", "consul", v1alpha1.ConsulSource{Service: "flood", NodeMeta: map[string]string{"rack": "0"}}),
		endpoints())
	victim := request("victim", "consul", v1alpha1.ConsulSource{Service: "victim"})
	victim.Namespace = "other-tenant"
	resolveUntil(t, p, w, victim, endpoints(providers.Endpoint{Address: "192.0.2.63", Serving: true, Hostname: agentNode}))
}

// TestWatchLimit: past --consul-max-watches a connection starts no more
// watches; the source fails transiently, naming the limit, and gets its
// watch once another is let go.
func TestWatchLimit(t *testing.T) {
	w := newWakes()
	p := newProvider(t, w, consul.Options{Address: shared.Addr, MaxWatches: 2})
	for _, s := range []string{"limit-a", "limit-b", "limit-c"} {
		must(t, shared.Register(consultest.Service{ID: s, Name: s, Address: "192.0.2.71"}))
		t.Cleanup(func() { _ = shared.Deregister(s) })
	}
	for _, s := range []string{"limit-a", "limit-b"} {
		if _, err := p.Resolve(context.Background(), request(s, "consul", v1alpha1.ConsulSource{Service: s})); err != nil {
			t.Fatal(err)
		}
	}
	third := request("limit-c", "consul", v1alpha1.ConsulSource{Service: "limit-c"})
	_, err := p.Resolve(context.Background(), third)
	if err == nil || providers.AsError(err).Terminal || !strings.Contains(err.Error(), "already watches 2 Consul services, its limit (--consul-max-watches)") {
		t.Fatalf("a third service's source: %v, want a transient error naming the limit", err)
	}
	if n := p.Watches(); n != 2 {
		t.Fatalf("Watches() = %d, want the limit, 2", n)
	}
	p.Forget(types.NamespacedName{Namespace: "test", Name: "limit-a"})
	resolveUntil(t, p, w, third, endpoints(providers.Endpoint{Address: "192.0.2.71", Serving: true, Hostname: agentNode}))
}

func TestInterestsFollowTheSpec(t *testing.T) {
	w := newWakes()
	p := newProvider(t, w, consul.Options{Address: shared.Addr})
	resolve := func(req providers.Request) {
		t.Helper()
		if _, err := p.Resolve(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	watches := func(want int, why string) {
		t.Helper()
		if n := p.Watches(); n != want {
			t.Fatalf("%s: Watches() = %d, want %d", why, n, want)
		}
	}
	resolve(request("one", "consul", v1alpha1.ConsulSource{Service: "interest-a"}))
	watches(1, "one source")
	// The same source now names another service: the old watch has no user left.
	resolve(request("one", "consul", v1alpha1.ConsulSource{Service: "interest-b"}))
	watches(1, "the source moved to another service")
	resolve(request("two", "consul", v1alpha1.ConsulSource{Service: "interest-b"}))
	resolve(request("two", "other", v1alpha1.ConsulSource{Service: "interest-c"}))
	watches(2, "two backends on interest-b, one on interest-c")
	p.Forget(types.NamespacedName{Namespace: "test", Name: "two"}, "consul")
	watches(1, "backend two dropped its source on interest-c")
	p.Forget(types.NamespacedName{Namespace: "test", Name: "one"})
	watches(1, "backend one deleted; two still uses interest-b")
	p.Forget(types.NamespacedName{Namespace: "test", Name: "two"})
	watches(0, "every backend deleted")
	// Forgotten and closed: Resolve starts again, then fails after Close.
	resolve(request("one", "consul", v1alpha1.ConsulSource{Service: "interest-a"}))
	watches(1, "resolved again")
	p.Close()
	watches(0, "closed")
	_, err := p.Resolve(context.Background(), request("one", "consul", v1alpha1.ConsulSource{Service: "interest-a"}))
	if err == nil || providers.IsTerminal(err) || !strings.Contains(err.Error(), "stopped") {
		t.Errorf("Resolve after Close: %v, want a transient failure saying the provider is stopped", err)
	}
}

func TestOutageKeepsFailingUntilConsulIsBack(t *testing.T) {
	a := consultest.Run(t, consultest.Config{Node: "outage"})
	w := newWakes()
	p := newProvider(t, w, consul.Options{Address: a.Addr})
	svc := consultest.Service{Name: "outage", Address: "192.0.2.51"}
	must(t, a.Register(svc))
	req := request("outage", "consul", v1alpha1.ConsulSource{Service: "outage"})
	up := providers.Endpoint{Address: "192.0.2.51", Hostname: "outage", Serving: true}
	resolveUntil(t, p, w, req, endpoints(up))

	must(t, a.Stop())
	// The watch fails, wakes the backend, and Resolve says why, transiently,
	// so that the controller keeps the endpoints.
	resolveUntil(t, p, w, req, failing(`querying service "outage"`))

	must(t, a.Restart())
	// A dev agent comes back empty: register again, as the service's own
	// agent would after a restart.
	must(t, a.Register(svc))
	resolveUntil(t, p, w, req, endpoints(up))
}

func TestFirstAnswerWaitIsBoundedByTheContext(t *testing.T) {
	// A listener that never answers stands in for a Consul that hangs.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	p := newProvider(t, newWakes(), consul.Options{Address: l.Addr().String()})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req := request("hang", "consul", v1alpha1.ConsulSource{Service: "hang"})
	_, err = p.Resolve(ctx, req)
	if err == nil || providers.IsTerminal(err) || !strings.Contains(err.Error(), "no answer from Consul yet") {
		t.Errorf("Resolve = %v, want a transient failure saying Consul has not answered", err)
	}

	// Without a deadline, Resolve waits until the watch stops.
	done := make(chan error, 1)
	go func() {
		_, err := p.Resolve(context.Background(), req)
		done <- err
	}()
	p.Close()
	select {
	case err := <-done:
		if err == nil || providers.IsTerminal(err) || !strings.Contains(err.Error(), "stopped") {
			t.Errorf("Resolve during Close = %v, want a transient failure saying the watch or provider stopped", err)
		}
	case <-time.After(wakeBound):
		t.Fatalf("Resolve still waits %s after Close", wakeBound)
	}
}

func TestTokenFileIsReadAgainWhenItChanges(t *testing.T) {
	const token = "9b3a8c0e-5f1d-4a6b-8e2f-1c7d3e5a9b0f"
	a := consultest.Run(t, consultest.Config{Node: "acl", ACLToken: token})
	must(t, a.Register(consultest.Service{Name: "secret", Address: "192.0.2.61"}))
	file := filepath.Join(t.TempDir(), "token")
	must(t, os.WriteFile(file, []byte("00000000-0000-0000-0000-000000000000\n"), 0o600))
	w := newWakes()
	p := newProvider(t, w, consul.Options{Address: a.Addr, TokenFile: file})
	req := request("secret", "consul", v1alpha1.ConsulSource{Service: "secret"})
	resolveUntil(t, p, w, req, refused("ACL not found", "--consul-* flags"))

	// A rotated token is picked up by the next query, without a restart.
	must(t, os.WriteFile(file, []byte(token+"\n"), 0o600))
	resolveUntil(t, p, w, req, endpoints(providers.Endpoint{Address: "192.0.2.61", Hostname: "acl", Serving: true}))
}

func TestTLSWithCAFileAndServerName(t *testing.T) {
	a := consultest.Run(t, consultest.Config{Node: "tls", TLS: true})
	must(t, a.Register(consultest.Service{Name: "tls", Address: "192.0.2.71"}))
	req := request("tls", "consul", v1alpha1.ConsulSource{Service: "tls"})
	cases := []struct {
		name  string
		opts  consul.Options
		check func(providers.Result, error) error
	}{
		{
			// The agent's certificate names consul.test only, not 127.0.0.1.
			name:  "CA file and server name",
			opts:  consul.Options{Address: a.HTTPSAddr, CAFile: a.CAFile, TLSServerName: consultest.TLSServerName},
			check: endpoints(providers.Endpoint{Address: "192.0.2.71", Hostname: "tls", Serving: true}),
		},
		{
			name:  "no server name",
			opts:  consul.Options{Address: a.HTTPSAddr, CAFile: a.CAFile},
			check: failing("cannot validate certificate for 127.0.0.1"),
		},
		{
			name:  "no CA file",
			opts:  consul.Options{Address: "https://" + a.HTTPSAddr, TLSServerName: consultest.TLSServerName},
			check: failing("certificate signed by unknown authority"),
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWakes()
			resolveUntil(t, newProvider(t, w, c.opts), w, req, c.check)
		})
	}
}

func TestBindFlags(t *testing.T) {
	var o consul.Options
	fs := pflag.NewFlagSet("controller", pflag.ContinueOnError)
	o.BindFlags(fs)
	if o.WaitTime != consul.DefaultWaitTime {
		t.Errorf("default --consul-wait-time = %v, want %v", o.WaitTime, consul.DefaultWaitTime)
	}
	must(t, fs.Parse([]string{
		"--consul-address=https://consul.example.com:8501", "--consul-token-file=/var/run/consul/token",
		"--consul-ca-file=/etc/consul/ca.pem", "--consul-tls-server-name=server.dc1.consul", "--consul-wait-time=30s",
		"--consul-max-watches=40", "--consul-max-watches-per-agent=120",
	}))
	want := consul.Options{
		Address: "https://consul.example.com:8501", TokenFile: "/var/run/consul/token",
		CAFile: "/etc/consul/ca.pem", TLSServerName: "server.dc1.consul", WaitTime: 30 * time.Second,
		MaxWatches: 40, MaxWatchesPerAgent: 120,
	}
	if o != want {
		t.Errorf("flags gave %+v, want %+v", o, want)
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	must(t, os.WriteFile(empty, []byte(" \n"), 0o600))
	cases := []struct {
		name  string
		opts  consul.Options
		waker providers.Waker
		want  string
	}{
		{name: "no waker", want: "waker is required"},
		{name: "wait time too long", waker: newWakes(), opts: consul.Options{WaitTime: 11 * time.Minute}, want: "--consul-wait-time=11m0s"},
		{name: "wait time too short", waker: newWakes(), opts: consul.Options{WaitTime: time.Millisecond}, want: "--consul-wait-time=1ms"},
		{name: "missing token file", waker: newWakes(), opts: consul.Options{TokenFile: filepath.Join(dir, "nope")}, want: "--consul-token-file"},
		{name: "empty token file", waker: newWakes(), opts: consul.Options{TokenFile: empty}, want: "is empty"},
		{name: "missing CA file", waker: newWakes(), opts: consul.Options{CAFile: filepath.Join(dir, "nope.pem")}, want: "--consul-ca-file"},
		{name: "unknown scheme", waker: newWakes(), opts: consul.Options{Address: "ftp://consul:8500"}, want: "--consul-address"},
		{name: "no watches", waker: newWakes(), opts: consul.Options{MaxWatches: -1}, want: "--consul-max-watches=-1: must be at least 1"},
		{name: "no watches per agent", waker: newWakes(), opts: consul.Options{MaxWatchesPerAgent: -1}, want: "--consul-max-watches-per-agent=-1: must be at least 1"},
		{name: "a negative floor", waker: newWakes(), opts: consul.Options{NamespaceWatchFloor: -1}, want: "--namespace-watch-floor=-1: must be at least 1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := consul.New(c.opts, c.waker)
			if err == nil {
				p.Close()
				t.Fatalf("New accepted %+v", c.opts)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("New: %v, want it to say %q", err, c.want)
			}
		})
	}
}
