package consul_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/providers/consul"
	"github.com/backendslice/backendslice/test/consultest"
)

// checkWithin bounds one check in these tests: a check of an agent that
// answers takes milliseconds, and one of a closed port fails at once.
const checkWithin = 10 * time.Second

// check runs the provider's connection check of c.
func check(t *testing.T, p *consul.Provider, c *providers.Connection) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), checkWithin)
	defer cancel()
	return p.CheckConnection(ctx, c)
}

// wantCheck fails the test unless err is nil (no parts) or holds every part.
func wantCheck(t *testing.T, what string, err error, parts ...string) {
	t.Helper()
	switch {
	case len(parts) == 0 && err != nil:
		t.Errorf("%s: check failed: %v", what, err)
	case len(parts) > 0 && err == nil:
		t.Errorf("%s: check passed, want a failure naming %q", what, parts)
	case err != nil:
		t.Logf("%s: %v", what, err)
		for _, p := range parts {
			if !strings.Contains(err.Error(), p) {
				t.Errorf("%s: %q does not name %q", what, err, p)
			}
		}
	}
}

// closedPort is a 127.0.0.1 address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := l.Addr().String()
	must(t, l.Close())
	return addr
}

// TestCheckConnectionACLs checks connections to an agent with ACLs on
// (default deny): a token the agent knows passes, whatever it may read (a
// token without any policy too: the check needs none); a token it does not
// know, or one revoked, fails naming the agent's address and Consul's
// answer. Both requests carry the provider's token, and nothing else is
// asked.
func TestCheckConnectionACLs(t *testing.T) {
	t.Parallel()
	a := aclAgents(t, "check")[0]
	proxy := consultest.NewProxy(t, a.Addr)
	p := newProvider(t, newWakes(), consul.Options{Address: closedPort(t)})
	reader := readToken(t, a)
	nothing, err := a.CreateToken(`node "nowhere" { policy = "deny" }`)
	must(t, err)
	for _, c := range []struct {
		name, token string
		parts       []string
	}{
		{"a token that reads", reader.Secret, nil},
		{"a token without rights", nothing.Secret, nil},
		{"an unknown token", unknownToken, []string{"Consul at " + proxy.Addr, "refuses the ACL token of BackendProvider acl",
			"GET /v1/acl/token/self", "Consul answered 403 ACL not found"}},
	} {
		before := len(proxy.Requests())
		wantCheck(t, c.name, check(t, p, connection("acl", proxy.Addr, "", fixed(c.token))), c.parts...)
		var paths []string
		for _, r := range proxy.Requests()[before:] {
			paths = append(paths, r.Path)
			if r.Token != c.token {
				t.Errorf("%s: %s asked with token %q, not the provider's", c.name, r.Path, r.Token)
			}
		}
		if want := []string{"/v1/status/leader", "/v1/acl/token/self"}; !slices.Equal(paths, want) {
			t.Errorf("%s: asked %v, want %v", c.name, paths, want)
		}
	}
	must(t, a.RevokeToken(reader))
	wantCheck(t, "a revoked token", check(t, p, connection("acl", proxy.Addr, "", fixed(reader.Secret))), "ACL not found")
}

// TestCheckConnectionStoppedAndStarted checks a connection to an agent
// that is stopped and started again: it passes, fails naming the address
// and the refused connection while the agent is away, and passes again.
// An agent without ACLs answers any token: reading the token itself says
// "ACL support disabled", which passes; a connection without a token asks
// only for the leader.
func TestCheckConnectionStoppedAndStarted(t *testing.T) {
	t.Parallel()
	a := consultest.Run(t, consultest.Config{Node: "check-restart"})
	p := newProvider(t, newWakes(), consul.Options{Address: closedPort(t)})
	withToken := connection("restart", a.Addr, "", fixed("some-token"))
	wantCheck(t, "running, with a token", check(t, p, withToken))
	wantCheck(t, "running, without a token", check(t, p, connection("restart", a.Addr, "", nil)))

	must(t, a.Stop())
	wantCheck(t, "stopped", check(t, p, withToken), "Consul at "+a.Addr, "GET /v1/status/leader", "connection refused")
	must(t, a.Restart())
	wantCheck(t, "started again", check(t, p, withToken))

	// Asked without a token, the anonymous token goes, and only the leader is asked.
	proxy := consultest.NewProxy(t, a.Addr)
	wantCheck(t, "without a token", check(t, p, connection("anon", proxy.Addr, "", nil)))
	if reqs := proxy.Requests(); len(reqs) != 1 || reqs[0].Path != "/v1/status/leader" || reqs[0].Token != "anonymous" {
		t.Errorf("without a token, asked %+v; want the leader only, as the anonymous token", reqs)
	}
}

// TestCheckConnectionTLS checks connections to an agent over TLS: the
// provider's CA and server name verify it, and a missing server name or
// CA fails the check as it fails the sources.
func TestCheckConnectionTLS(t *testing.T) {
	t.Parallel()
	a := consultest.Run(t, consultest.Config{Node: "check-tls", TLS: true})
	ca, err := os.ReadFile(a.CAFile)
	must(t, err)
	p := newProvider(t, newWakes(), consul.Options{Address: closedPort(t)})
	withTLS := func(addr string, ca []byte, serverName string) *providers.Connection {
		c := connection("tls", addr, "", nil)
		s := settingsOf(c)
		s.CAPEM, s.ServerName = ca, serverName
		return c
	}
	wantCheck(t, "CA and server name", check(t, p, withTLS(a.HTTPSAddr, ca, consultest.TLSServerName)))
	wantCheck(t, "no server name", check(t, p, withTLS(a.HTTPSAddr, ca, "")), "Consul at "+a.HTTPSAddr, "cannot validate certificate for 127.0.0.1")
	wantCheck(t, "no CA", check(t, p, withTLS("https://"+a.HTTPSAddr, nil, consultest.TLSServerName)), "certificate signed by unknown authority")
}

// TestCheckConnectionAnswers puts servers that are not a healthy Consul
// where the agent should be: one whose cluster has no leader, one that
// answers a long page full of control characters. Each fails the check,
// and what the server sent is quoted bounded and printable.
func TestCheckConnectionAnswers(t *testing.T) {
	t.Parallel()
	body := "\x1b[2J\x1b[31mboom\r\n" + strings.Repeat("<html>page of another server</html>\n", 300)
	for _, c := range []struct {
		name    string
		handler http.HandlerFunc
		parts   []string
	}{
		{"no leader", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`""`)) },
			[]string{"the cluster has no leader"}},
		{"another server", func(w http.ResponseWriter, _ *http.Request) { http.Error(w, body, http.StatusInternalServerError) },
			[]string{"GET /v1/status/leader", "Consul answered 500 [2J[31mboom <html>page of another server"}},
	} {
		srv := httptest.NewServer(c.handler)
		t.Cleanup(srv.Close)
		p := newProvider(t, newWakes(), consul.Options{Address: closedPort(t)})
		err := check(t, p, connection("odd", srv.Listener.Addr().String(), "", nil))
		wantCheck(t, c.name, err, append(c.parts, "Consul at "+srv.Listener.Addr().String())...)
		if err != nil && (len(err.Error()) > 400 || strings.ContainsFunc(err.Error(), func(r rune) bool { return !unicode.IsPrint(r) })) {
			t.Errorf("%s: failure of %d bytes, or with characters that do not print: %q", c.name, len(err.Error()), err)
		}
	}
}

// TestCheckConnectionRefusesOtherKinds: a connection that is no Consul
// connection is refused before anything is asked.
func TestCheckConnectionRefusesOtherKinds(t *testing.T) {
	p := newProvider(t, newWakes(), consul.Options{Address: closedPort(t)})
	notConsul := &providers.Connection{Name: "dns", Key: "v1", Settings: struct{ Resolvers []string }{[]string{"192.0.2.53"}}}
	wantCheck(t, "a DNS connection", check(t, p, notConsul), "BackendProvider dns is not a Consul connection")
	wantCheck(t, "no address", check(t, p, connection("team", "", "", nil)), "BackendProvider team: no Consul address")
}
