package consul_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"unicode"

	"github.com/hashicorp/consul/api"
	"k8s.io/apimachinery/pkg/types"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/providers/consul"
	"github.com/backendslice/backendslice/test/consultest"
)

// managementToken is the management token of the agents started with ACLs.
const managementToken = "6f1e4c2a-8b3d-4e5f-9a0b-1c2d3e4f5a6b"

// unknownToken is a token no agent knows.
const unknownToken = "00000000-0000-4000-8000-000000000000"

// aclAgents start one agent per datacenter, at once, each with ACLs on
// (default deny) and its node named after its datacenter; they stop when t
// ends.
func aclAgents(t *testing.T, datacenters ...string) []*consultest.Agent {
	t.Helper()
	agents, err := consultest.StartClusters(managementToken, datacenters...)
	for _, a := range agents {
		if a != nil {
			t.Cleanup(func() {
				if err := a.Close(); err != nil {
					t.Errorf("stopping the Consul agent: %v", err)
				}
			})
		}
	}
	must(t, err)
	return agents
}

// readToken makes a token of a that reads every service and node.
func readToken(t *testing.T, a *consultest.Agent) consultest.Token {
	t.Helper()
	tok, err := a.CreateToken(consultest.ReadAll)
	must(t, err)
	return tok
}

// connection is BackendProvider name at addr, at version v1 of its spec.
func connection(name, addr, datacenter string, token func() (string, error)) *providers.Connection {
	return &providers.Connection{Name: name, Key: "v1", Settings: &consul.Settings{
		Address: addr, Datacenter: datacenter, Token: token,
	}}
}

// through is req asked through the BackendProvider c.
func through(req providers.Request, c *providers.Connection) providers.Request {
	req.Connection = c
	return req
}

// fixed is a token reader that always reads token.
func fixed(token string) func() (string, error) {
	return func() (string, error) { return token, nil }
}

// wantCounts checks the provider's watches and BackendProvider clients.
func wantCounts(t *testing.T, p *consul.Provider, why string, watches, conns int) {
	t.Helper()
	if w, c := p.Watches(), p.Connections(); w != watches || c != conns {
		t.Fatalf("%s: %d watches and %d connections, want %d and %d", why, w, c, watches, conns)
	}
}

// TestConnectionsAreIsolated reads one service name through two
// BackendProviders, at two agents of two datacenters with a token each:
// each answers its own instances with its own token, a third
// BackendProvider with a token its agent does not know is refused as
// AccessDenied while the others go on, and a source's own datacenter wins
// over its connection's.
func TestConnectionsAreIsolated(t *testing.T) {
	agents := aclAgents(t, "east", "west")
	east, west := agents[0], agents[1]
	eastToken, westToken := readToken(t, east), readToken(t, west)
	must(t, east.Register(consultest.Service{Name: "db", Address: "192.0.2.81"}))
	must(t, west.Register(consultest.Service{Name: "db", Address: "198.51.100.81"}))
	eastProxy, westProxy := consultest.NewProxy(t, east.Addr), consultest.NewProxy(t, west.Addr)

	w := newWakes()
	p := newProvider(t, w, consul.Options{Address: shared.Addr})
	db := v1alpha1.ConsulSource{Service: "db"}
	a := through(request("a", "consul", db), connection("east", eastProxy.Addr, "east", fixed(eastToken.Secret)))
	b := through(request("b", "consul", db), connection("west", westProxy.Addr, "west", fixed(westToken.Secret)))
	fromEast := endpoints(providers.Endpoint{Address: "192.0.2.81", Hostname: "east", Serving: true})
	fromWest := endpoints(providers.Endpoint{Address: "198.51.100.81", Hostname: "west", Serving: true})
	resolveUntil(t, p, w, a, fromEast)
	resolveUntil(t, p, w, b, fromWest)

	// Same agent, datacenter and service as b: only the BackendProvider,
	// and so the token, differs.
	c := through(request("c", "consul", db), connection("west-stale", westProxy.Addr, "west", fixed(unknownToken)))
	resolveUntil(t, p, w, c, refused("ACL not found", "BackendProvider west-stale"))
	for _, check := range []struct {
		req  providers.Request
		want func(providers.Result, error) error
	}{{a, fromEast}, {b, fromWest}} {
		res, err := p.Resolve(context.Background(), check.req)
		if problem := check.want(res, err); problem != nil {
			t.Errorf("backend %s, after another BackendProvider was refused: %v", check.req.Backend, problem)
		}
	}
	wantCounts(t, p, "three BackendProviders on one service", 3, 3)

	for _, r := range eastProxy.Requests() {
		if r.Token != eastToken.Secret {
			t.Errorf("the east agent was asked %s with token %q, not east's", r.Path, r.Token)
		}
	}
	for _, r := range westProxy.Requests() {
		if r.Token != westToken.Secret && r.Token != unknownToken {
			t.Errorf("the west agent was asked %s with token %q, not a west BackendProvider's", r.Path, r.Token)
		}
	}

	// The east agent knows no path to west: asking it proves the source's
	// datacenter was asked, not the connection's.
	d := through(request("d", "consul", v1alpha1.ConsulSource{Service: "db", Datacenter: "west"}),
		connection("east", eastProxy.Addr, "east", fixed(eastToken.Secret)))
	resolveUntil(t, p, w, d, failing("No path to datacenter"))
}

// TestTokenRotation revokes the token a watch queries with, sees Consul
// refuse the next query, then lets the token reader return a new token: the
// watch's next query uses it and recovers, without a new Resolve or a
// restart.
func TestTokenRotation(t *testing.T) {
	a := aclAgents(t, "rotate")[0]
	old, next := readToken(t, a), readToken(t, a)
	var current atomic.Pointer[string]
	current.Store(&old.Secret)
	proxy := consultest.NewProxy(t, a.Addr)
	w := newWakes()
	p := newProvider(t, w, consul.Options{Address: shared.Addr})
	req := through(request("rotate", "consul", v1alpha1.ConsulSource{Service: "rot"}),
		connection("rotating", proxy.Addr, "", func() (string, error) { return *current.Load(), nil }))
	first := providers.Endpoint{Address: "192.0.2.91", Hostname: "rotate", Serving: true}
	second := providers.Endpoint{Address: "192.0.2.92", Hostname: "rotate", Serving: true}
	must(t, a.Register(consultest.Service{ID: "rot-1", Name: "rot", Address: first.Address}))
	resolveUntil(t, p, w, req, endpoints(first))

	must(t, a.RevokeToken(old))
	// The blocking query in flight was let in before: a change ends it, and
	// the query after it carries the revoked token.
	must(t, a.Register(consultest.Service{ID: "rot-2", Name: "rot", Address: second.Address}))
	resolveUntil(t, p, w, req, refused("ACL not found", "BackendProvider rotating"))

	current.Store(&next.Secret)
	resolveUntil(t, p, w, req, endpoints(first, second))
	reqs := proxy.Requests()
	if last := reqs[len(reqs)-1]; last.Token != next.Secret {
		t.Errorf("the last query carried token %q, want the rotated one", last.Token)
	}
}

// TestConnectionClientsFollowTheirWatches counts watches and clients as
// sources move between the controller's connection and a BackendProvider's,
// the BackendProvider is edited (a new key) and backends are forgotten: a
// client lives exactly as long as a watch uses it.
func TestConnectionClientsFollowTheirWatches(t *testing.T) {
	p := newProvider(t, newWakes(), consul.Options{Address: shared.Addr})
	v1 := connection("team", shared.Addr, "", nil)
	v2 := connection("team", shared.Addr, "", nil)
	v2.Key = "v2"
	src := v1alpha1.ConsulSource{Service: "conn-count"}
	resolve := func(backend string, c *providers.Connection) {
		t.Helper()
		if _, err := p.Resolve(context.Background(), through(request(backend, "consul", src), c)); err != nil {
			t.Fatal(err)
		}
	}
	forget := func(backend string) { p.Forget(types.NamespacedName{Namespace: "test", Name: backend}) }

	resolve("one", v1)
	resolve("two", v1)
	wantCounts(t, p, "two backends through one BackendProvider", 1, 1)
	resolve("three", nil)
	wantCounts(t, p, "and one through the controller's connection", 2, 1)
	resolve("one", v2)
	wantCounts(t, p, "the BackendProvider edited, one backend resolved since", 3, 2)
	resolve("two", v2)
	wantCounts(t, p, "both backends moved to the new key", 2, 1)
	forget("one")
	wantCounts(t, p, "backend one deleted", 2, 1)
	forget("two")
	wantCounts(t, p, "backend two deleted", 1, 0)
	forget("three")
	wantCounts(t, p, "every backend deleted", 0, 0)
}

// TestConnectionDoesNotSendTheControllersToken gives the controller a token
// in its environment, as the consul CLI takes one: a BackendProvider
// without a token asks as the anonymous token, never with the controller's.
func TestConnectionDoesNotSendTheControllersToken(t *testing.T) {
	t.Setenv(api.HTTPTokenEnvName, "controller-token")
	proxy := consultest.NewProxy(t, shared.Addr)
	p := newProvider(t, newWakes(), consul.Options{Address: shared.Addr})
	for _, c := range []*providers.Connection{
		connection("no-secret", proxy.Addr, "", nil),
		connection("empty-secret", proxy.Addr, "", fixed("")),
	} {
		if _, err := p.Resolve(context.Background(), through(request(c.Name, "consul", v1alpha1.ConsulSource{Service: "anon"}), c)); err != nil {
			t.Fatal(err)
		}
	}
	reqs := proxy.Requests()
	if len(reqs) == 0 {
		t.Fatal("no request reached the agent")
	}
	for _, r := range reqs {
		if r.Token != "anonymous" {
			t.Errorf("%s asked with token %q, want the anonymous token", r.Path, r.Token)
		}
	}
}

// TestRefusedRequestsAskNothing gives sources and BackendProviders that
// cannot be queried: each is refused as InvalidSpec before any client,
// watch or request is made.
func TestRefusedRequestsAskNothing(t *testing.T) {
	proxy := consultest.NewProxy(t, shared.Addr)
	p := newProvider(t, newWakes(), consul.Options{Address: proxy.Addr})
	good := connection("team", proxy.Addr, "", nil)
	notConsul := &providers.Connection{Name: "dns", Key: "v1", Settings: struct{ Resolvers []string }{[]string{"192.0.2.53"}}}
	noKey := connection("team", proxy.Addr, "", nil)
	noKey.Key = ""
	badCA := connection("team", proxy.Addr, "", nil)
	settingsOf(badCA).CAPEM = []byte("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
	badScheme := connection("team", "ftp://"+proxy.Addr, "", nil)
	cases := []struct {
		name    string
		service string
		conn    *providers.Connection
		want    string
	}{
		{"path up", "../../agent/self", nil, "spec.sources[consul].consul.service"},
		{"path up through a BackendProvider", "../../acl/tokens", good, "spec.sources[consul].consul.service"},
		{"slash", "db/x", good, "spec.sources[consul].consul.service"},
		{"query", "db?dc=other", good, "spec.sources[consul].consul.service"},
		{"fragment", "db#x", nil, "spec.sources[consul].consul.service"},
		{"escape", "db%2F..", nil, "spec.sources[consul].consul.service"},
		{"space", "db x", nil, "spec.sources[consul].consul.service"},
		{"newline", "db\n", nil, "spec.sources[consul].consul.service"},
		{"not a Consul BackendProvider", "db", notConsul, "BackendProvider dns is not a Consul connection"},
		{"no key", "db", noKey, "BackendProvider team: connection without a key"},
		{"no address", "db", connection("team", "", "", nil), "BackendProvider team: no Consul address"},
		{"CA that does not parse", "db", badCA, "BackendProvider team: the Consul TLS settings"},
		{"unknown scheme", "db", badScheme, "BackendProvider team: the Consul address"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := p.Resolve(context.Background(), through(request("refused", "consul", v1alpha1.ConsulSource{Service: c.service}), c.conn))
			pe := providers.AsError(err)
			if err == nil || !pe.Terminal || pe.Reason != v1alpha1.ReasonInvalidSpec || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Resolve = %v, want a terminal %s failure saying %q", err, v1alpha1.ReasonInvalidSpec, c.want)
			}
		})
	}
	if reqs := proxy.Requests(); len(reqs) > 0 {
		t.Errorf("refused sources reached the agent: %+v", reqs)
	}
	wantCounts(t, p, "after refused sources only", 0, 0)
}

// TestErrorBodyIsBounded puts a server that answers every query with a
// long body full of control characters where Consul should be: the failure
// quotes at most a bounded, printable part of it.
func TestErrorBodyIsBounded(t *testing.T) {
	body := "\x1b[2J\x1b[31mboom\r\n" + strings.Repeat("<html>page of another server</html>\n", 300)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, body, http.StatusInternalServerError)
	}))
	t.Cleanup(srv.Close)
	w := newWakes()
	p := newProvider(t, w, consul.Options{Address: shared.Addr})
	req := through(request("loud", "consul", v1alpha1.ConsulSource{Service: "loud"}), connection("loud", srv.Listener.Addr().String(), "", nil))
	resolveUntil(t, p, w, req, failing("Consul answered 500 [2J[31mboom <html>page of another server"))
	_, err := p.Resolve(context.Background(), req)
	msg := err.Error()
	if strings.ContainsFunc(msg, func(r rune) bool { return !unicode.IsPrint(r) }) {
		t.Errorf("failure carries characters that do not print: %q", msg)
	}
	if len(msg) > 400 {
		t.Errorf("failure is %d bytes long, want Consul's body cut to about 200: %s", len(msg), msg)
	}
}

// TestConnectionTLS reaches an agent over TLS through BackendProviders that
// carry the CA as PEM and the server name; the controller's own TLS
// settings play no part.
func TestConnectionTLS(t *testing.T) {
	a := consultest.Run(t, consultest.Config{Node: "tls-conn", TLS: true})
	must(t, a.Register(consultest.Service{Name: "tls", Address: "192.0.2.72"}))
	ca, err := os.ReadFile(a.CAFile)
	must(t, err)
	withTLS := func(addr string, ca []byte, serverName string) *providers.Connection {
		c := connection("tls", addr, "", nil)
		s := settingsOf(c)
		s.CAPEM, s.ServerName = ca, serverName
		return c
	}
	cases := []struct {
		name  string
		conn  *providers.Connection
		check func(providers.Result, error) error
	}{
		{
			name:  "CA and server name",
			conn:  withTLS(a.HTTPSAddr, ca, consultest.TLSServerName),
			check: endpoints(providers.Endpoint{Address: "192.0.2.72", Hostname: "tls-conn", Serving: true}),
		},
		{
			// The CA alone turns https on; the certificate does not name 127.0.0.1.
			name:  "no server name",
			conn:  withTLS(a.HTTPSAddr, ca, ""),
			check: failing("cannot validate certificate for 127.0.0.1"),
		},
		{
			name:  "no CA",
			conn:  withTLS("https://"+a.HTTPSAddr, nil, consultest.TLSServerName),
			check: failing("certificate signed by unknown authority"),
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// The controller's own TLS settings must not help the connection.
			t.Setenv(api.HTTPCAFile, a.CAFile)
			w := newWakes()
			p := newProvider(t, w, consul.Options{Address: shared.Addr})
			resolveUntil(t, p, w, through(request("tls", "consul", v1alpha1.ConsulSource{Service: "tls"}), c.conn), c.check)
		})
	}
}

// settingsOf are the Consul settings of c, which the test built as such.
func settingsOf(c *providers.Connection) *consul.Settings {
	s, _ := providers.SettingsOf[*consul.Settings](c)
	return s
}
