package plugin

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/providers/plugin/protocol"
	"github.com/backendslice/backendslice/providers/plugin/sdk"
	"github.com/backendslice/backendslice/providers/providertest"
)

// wakes records the backends a provider wakes.
type wakes struct {
	ch chan types.NamespacedName
}

func newWakes() *wakes { return &wakes{ch: make(chan types.NamespacedName, 1024)} }

func (w *wakes) Wake(b types.NamespacedName) {
	select {
	case w.ch <- b:
	default:
	}
}

// inventory is an SDK plugin over a map of groups, each admitting the
// namespaces it lists.
type inventory struct {
	mu     sync.Mutex
	groups map[string][]sdk.Endpoint
	admits map[string]string
	plugin *sdk.Plugin
}

func newInventory(push bool) *inventory {
	inv := &inventory{groups: map[string][]sdk.Endpoint{}, admits: map[string]string{}}
	inv.plugin = &sdk.Plugin{Name: "inventory", Push: push,
		Validate: func(r sdk.Request) error {
			for k := range r.Parameters {
				if k != "group" {
					return sdk.InvalidParameters("unknown parameter %q; the only one is group", k)
				}
			}
			if r.Parameters["group"] == "" {
				return sdk.InvalidParameters("group is required")
			}
			return nil
		},
		// A group admits every namespace but the one it is kept for.
		Admit: func(_ context.Context, r sdk.Request) error {
			inv.mu.Lock()
			defer inv.mu.Unlock()
			g := r.Parameters["group"]
			if ns := inv.admits[g]; ns != "" && ns != r.Namespace {
				return sdk.Forbidden("group %q is for namespace %s only", g, ns)
			}
			return nil
		},
		Resolve: func(_ context.Context, r sdk.Request) (sdk.Answer, error) {
			inv.mu.Lock()
			defer inv.mu.Unlock()
			g := r.Parameters["group"]
			eps, ok := inv.groups[g]
			if !ok {
				return sdk.Answer{}, sdk.NotFound("no group %q", g)
			}
			return sdk.Answer{Endpoints: append([]sdk.Endpoint(nil), eps...), RefreshAfter: time.Second}, nil
		}}
	return inv
}

func (inv *inventory) set(group string, eps ...sdk.Endpoint) {
	inv.mu.Lock()
	inv.groups[group] = eps
	inv.mu.Unlock()
	inv.plugin.Changed()
}

// connection is a plugin connection to url, as a BackendProvider's row builds it.
func connection(url string) *providers.Connection {
	return &providers.Connection{Name: "inventory", Key: "k1", Settings: &Settings{
		URL: url, Timeout: 2 * time.Second, MaxEndpoints: 10, MaxConcurrentRequests: 4}}
}

// source is a plugin source of group through conn.
func source(name, group string, conn *providers.Connection) providers.Request {
	req := providertest.NewRequest(v1alpha1.Source{Name: name, ProviderRef: &v1alpha1.ProviderReference{Name: conn.Name},
		Plugin: &v1alpha1.PluginSource{Parameters: map[string]string{"group": group}}})
	req.Connection = conn
	return req
}

func newProvider(t *testing.T, w providers.Waker) *Provider {
	t.Helper()
	p, err := New(Options{RetryDelay: 10 * time.Millisecond, MaxRetryDelay: 100 * time.Millisecond, Wait: 2 * time.Second}, w)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func TestConformance(t *testing.T) {
	for _, push := range []bool{false, true} {
		t.Run(fmt.Sprintf("push=%v", push), func(t *testing.T) {
			inv := newInventory(push)
			web := []sdk.Endpoint{{Address: "192.0.2.10", Serving: true, Zone: "a", Hostname: "web-0", Port: 8080},
				{Address: "2001:db8::10", Serving: false, Terminating: true}}
			inv.set("web", web...)
			inv.set("empty")
			inv.set("private", sdk.Endpoint{Address: "192.0.2.20", Serving: true})
			inv.admits["private"] = "elsewhere"
			srv := httptest.NewServer(inv.plugin.Handler())
			t.Cleanup(srv.Close)
			conn := connection(srv.URL)
			providertest.Run(t, providertest.Harness{
				Kind:     Kind,
				Kinds:    Kinds(),
				Provider: newProvider(t, newWakes()),
				Good: func(*testing.T) []providertest.Case {
					return []providertest.Case{
						{Name: "web", Request: source("web", "web", conn), Want: []providers.Endpoint{
							{Address: "192.0.2.10", Serving: true, Zone: "a", Hostname: "web-0", Port: 8080},
							{Address: "2001:db8::10", Terminating: true}}},
						{Name: "empty", Request: source("empty", "empty", conn)},
					}
				},
				Missing: func(*testing.T) providertest.MissingCase {
					return providertest.MissingCase{Request: source("gone", "nope", conn),
						Fail: &providertest.Failure{Terminal: true, Gone: true, Reason: v1alpha1.ReasonBackendNotFound}}
				},
				Broken: func(*testing.T) []providertest.FailCase {
					bad := source("bad", "web", conn)
					bad.Source.Plugin.Parameters["colour"] = "blue"
					other := source("other", "web", conn)
					other.Connection = nil
					return []providertest.FailCase{
						{Name: "invalid parameters", Request: bad, Failure: providertest.Failure{Terminal: true, Reason: v1alpha1.ReasonInvalidSpec,
							MessageContains: []string{"spec.sources[bad].plugin", `unknown parameter "colour"`, "refused the parameters"}}},
						{Name: "consent", Request: source("private", "private", conn), Failure: providertest.Failure{Terminal: true,
							Reason: v1alpha1.ReasonAccessDenied, MessageContains: []string{"for namespace elsewhere only"}}},
						{Name: "no provider", Request: other, Failure: providertest.Failure{Terminal: true,
							Reason: v1alpha1.ReasonProviderNotAvailable, MessageContains: []string{"spec.sources[other].providerRef"}}},
						{Name: "not a plugin source", Request: providertest.NewRequest(v1alpha1.Source{Name: "s", Static: &v1alpha1.StaticSource{}}),
							Failure: providertest.Failure{Terminal: true, Reason: v1alpha1.ReasonInvalidSpec}},
					}
				},
			})
		})
	}
}

// TestPushWakes: a change the plugin pushes wakes the backend, and the
// next Resolve has it; the long-poll carried the index.
func TestPushWakes(t *testing.T) {
	inv := newInventory(true)
	inv.set("web", sdk.Endpoint{Address: "192.0.2.10", Serving: true})
	var polls sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == protocol.ResolvePath {
			polls.Store(r.Header.Get("Authorization"), true)
		}
		inv.plugin.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	wk := newWakes()
	p := newProvider(t, wk)
	req := source("web", "web", connection(srv.URL))
	if _, err := p.Resolve(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	drain(wk)
	inv.set("web", sdk.Endpoint{Address: "192.0.2.10", Serving: false})
	select {
	case b := <-wk.ch:
		if b.Name != req.Backend {
			t.Errorf("woke %v", b)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no wake-up after the plugin pushed a change")
	}
	res, err := p.Resolve(context.Background(), req)
	if err != nil || len(res.Endpoints) != 1 || res.Endpoints[0].Serving {
		t.Fatalf("after the push: %+v, %v; want 192.0.2.10 not serving", res, err)
	}
	if res.RefreshAfter != 0 {
		t.Errorf("RefreshAfter = %v; a watched answer holds until a wake-up", res.RefreshAfter)
	}
}

func drain(w *wakes) {
	for {
		select {
		case <-w.ch:
		case <-time.After(100 * time.Millisecond):
			return
		}
	}
}

// hostile answers every request with one fixed reply.
func hostile(status int, header http.Header, body string) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == protocol.InfoPath {
			_, _ = w.Write([]byte(`{"protocolVersions":["v1"]}`))
			return
		}
		for k, v := range header {
			w.Header()[k] = v
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
}

// TestMisbehaving: what a broken or hostile plugin answers is a failure
// of the kind the table says, naming what was wrong.
func TestMisbehaving(t *testing.T) {
	many := `{"endpoints":[` + strings.Repeat(`{"address":"192.0.2.1","serving":true},`, 10) + `{"address":"192.0.2.2","serving":true}]}`
	cases := []struct {
		name     string
		status   int
		header   http.Header
		body     string
		terminal bool
		gone     bool
		reason   string
		says     string
	}{
		{"not JSON", 200, nil, "<html>hello</html>", false, false, v1alpha1.ReasonSourceFailed, "not the protocol's JSON"},
		{"too many endpoints", 200, nil, many, false, false, v1alpha1.ReasonSourceFailed, "11 endpoints, more than spec.plugin.maxEndpoints=10"},
		{"too large", 200, nil, `{"endpoints":[],"x":"` + strings.Repeat("a", 80<<10) + `"}`, false, false, v1alpha1.ReasonSourceFailed, "an answer larger than"},
		{"redirect", 307, http.Header{"Location": {"http://192.0.2.66/steal"}}, "", false, false, v1alpha1.ReasonSourceFailed, "a redirect (307"},
		{"bad port", 200, nil, `{"endpoints":[{"address":"192.0.2.1","serving":true,"port":70000}]}`, false, false, v1alpha1.ReasonSourceFailed, "endpoints[0].port 70000"},
		{"long address", 200, nil, `{"endpoints":[{"address":"` + strings.Repeat("a", 300) + `","serving":true}]}`, false, false, v1alpha1.ReasonSourceFailed, "endpoints[0].address of 300 bytes"},
		{"error without body", 500, nil, "oops", false, false, v1alpha1.ReasonSourceFailed, "status 500 without the protocol's error body"},
		{"unavailable", 503, nil, `{"error":{"code":"Unavailable","message":"inventory \u001b[31mdown\u001b[0m"}}`, false, false, v1alpha1.ReasonSourceFailed, "inventory [31mdown[0m"},
		{"unknown code", 500, nil, `{"error":{"code":"Boom","message":"x"}}`, false, false, v1alpha1.ReasonSourceFailed, "cannot answer (500 Boom)"},
		{"token refused", 401, nil, "", true, false, v1alpha1.ReasonAccessDenied, "refused the controller's token"},
		{"not found", 404, nil, `{"error":{"code":"NotFound","message":"no such group"}}`, true, true, v1alpha1.ReasonBackendNotFound, "no such group"},
		{"empty object", 200, nil, `{}`, false, false, v1alpha1.ReasonSourceFailed, `plugin answer has no "endpoints" field: answer "endpoints": [] to mean none`},
		{"null endpoints", 200, nil, `{"endpoints":null}`, false, false, v1alpha1.ReasonSourceFailed, `plugin answer has a null "endpoints" field: answer "endpoints": [] to mean none`},
		{"misspelt endpoints", 200, nil, `{"endpoint":[{"address":"192.0.2.1","serving":true}]}`, false, false, v1alpha1.ReasonSourceFailed,
			`plugin answer has no "endpoints" field: answer "endpoints": [] to mean none (it has "endpoint", which the protocol does not)`},
		{"capitalised endpoints", 200, nil, `{"Endpoints":[]}`, false, false, v1alpha1.ReasonSourceFailed, `has no "endpoints" field`},
		{"endpoints not an array", 200, nil, `{"endpoints":{}}`, false, false, v1alpha1.ReasonSourceFailed, "plugin answer's endpoints is a JSON object, not an array"},
		{"no serving", 200, nil, `{"endpoints":[{"address":"192.0.2.1","serving":true},{"address":"192.0.2.2"}]}`, false, false, v1alpha1.ReasonSourceFailed,
			`plugin answer's endpoints[1] has no "serving" field: say "serving": true or false`},
		{"null serving", 200, nil, `{"endpoints":[{"address":"192.0.2.1","serving":null}]}`, false, false, v1alpha1.ReasonSourceFailed, `endpoints[0] has a null "serving" field`},
		{"serving a string", 200, nil, `{"endpoints":[{"address":"192.0.2.1","serving":"yes"}]}`, false, false, v1alpha1.ReasonSourceFailed,
			"plugin answer's endpoints[0].serving is a JSON string, not true or false"},
		{"no address", 200, nil, `{"endpoints":[{"serving":true}]}`, false, false, v1alpha1.ReasonSourceFailed, `endpoints[0] has no "address" field`},
		{"endpoint not an object", 200, nil, `{"endpoints":[null]}`, false, false, v1alpha1.ReasonSourceFailed, "plugin answer's endpoints[0] is not a JSON object"},
		{"negative refresh", 200, nil, `{"endpoints":[],"refreshAfterSeconds":-1}`, false, false, v1alpha1.ReasonSourceFailed, "refreshAfterSeconds -1"},
		{"array answer", 200, nil, `[]`, false, false, v1alpha1.ReasonSourceFailed, "plugin answer is not a JSON object of the protocol"},
		{"token refused, with why", 401, nil, `{"error":{"code":"Unauthorized","message":"token expired at noon"}}`, true, false, v1alpha1.ReasonAccessDenied,
			"refused the controller's token (401 to /backendslice/v1/resolve): token expired at noon"},
		{"status not the code's", 500, nil, `{"error":{"code":"NotFound","message":"no such group"}}`, true, true, v1alpha1.ReasonBackendNotFound,
			"no such group (answered with status 500; the protocol's status for NotFound is 404)"},
		{"error without message", 404, nil, `{"error":{"code":"NotFound"}}`, false, false, v1alpha1.ReasonSourceFailed,
			`status 404 without the protocol's error body (plugin answer's error has no "message" field`},
		{"long message", 422, nil, `{"error":{"code":"InvalidParameters","message":"` + strings.Repeat("x", 2000) + `"}}`, true, false, v1alpha1.ReasonInvalidSpec, strings.Repeat("x", 512) + "..."},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := hostile(c.status, c.header, c.body)
			t.Cleanup(srv.Close)
			p := newProvider(t, newWakes())
			_, err := p.Resolve(context.Background(), source("s", "web", connection(srv.URL)))
			if err == nil {
				t.Fatal("Resolve succeeded")
			}
			pe := providers.AsError(err)
			if pe.Terminal != c.terminal || pe.Gone != c.gone || pe.Reason != c.reason {
				t.Errorf("failed as terminal=%v gone=%v %s, want %v %v %s: %v", pe.Terminal, pe.Gone, pe.Reason, c.terminal, c.gone, c.reason, err)
			}
			if !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), "spec.sources[s].plugin") {
				t.Errorf("error %q does not say %q and name the field", err, c.says)
			}
			if strings.ContainsAny(err.Error(), "\x1b\n") {
				t.Errorf("error %q carries what does not print", err)
			}
		})
	}
}

// TestUnsupportedProtocol: a plugin speaking another version fails its
// connection check at once (UnsupportedProtocol), and its sources say
// ProviderNotAvailable, asking it nothing else.
func TestUnsupportedProtocol(t *testing.T) {
	var resolves sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != protocol.InfoPath {
			resolves.Store(r.URL.Path, true)
		}
		_, _ = w.Write([]byte(`{"protocolVersions":["v2","v3"]}`))
	}))
	t.Cleanup(srv.Close)
	p := newProvider(t, newWakes())
	err := p.CheckConnection(context.Background(), connection(srv.URL))
	if pe := providers.AsError(err); err == nil || !pe.Terminal || pe.Reason != v1alpha1.ReasonUnsupportedProtocol ||
		!strings.Contains(err.Error(), `["v2" "v3"]`) {
		t.Errorf("CheckConnection = %v, want terminal UnsupportedProtocol naming the versions", err)
	}
	_, err = p.Resolve(context.Background(), source("s", "web", connection(srv.URL)))
	if pe := providers.AsError(err); err == nil || !pe.Terminal || pe.Reason != v1alpha1.ReasonProviderNotAvailable {
		t.Errorf("Resolve = %v, want terminal ProviderNotAvailable", err)
	}
	resolves.Range(func(k, _ any) bool {
		t.Errorf("a plugin of another version was asked %v", k)
		return true
	})
}

// TestSlowPluginHoldsNoReconcile: a plugin that never answers holds a new
// source's first Resolve for the provider's timeout at most, and once it
// is known not to answer, not at all.
func TestSlowPluginHoldsNoReconcile(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	conn := connection(srv.URL)
	settingsOf(conn).Timeout = 300 * time.Millisecond
	p := newProvider(t, newWakes())
	_, err := p.Resolve(context.Background(), source("a", "web", conn))
	if err == nil || providers.IsTerminal(err) || !strings.Contains(err.Error(), "within spec.plugin.timeout (300ms)") {
		t.Fatalf("Resolve = %v, want a transient failure at the provider's timeout", err)
	}
	// Once the plugin is known not to answer, other sources do not wait.
	deadline := time.Now().Add(5 * time.Second)
	for n := 0; time.Now().Before(deadline); n++ {
		if _, err := p.Resolve(context.Background(), source(fmt.Sprintf("b%d", n), "web", conn)); err != nil && strings.Contains(err.Error(), "asked again in the background") && strings.Contains(err.Error(), "no answer yet;") {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Error("a new source kept waiting on a plugin known not to answer")
}

// TestChangeThenFailure: a plugin that pushes a change and fails at once
// has its change returned by the next Resolve, then its failure (after
// another wake-up), so that what is held is its last answer.
func TestChangeThenFailure(t *testing.T) {
	inv := newInventory(true)
	inv.set("web", sdk.Endpoint{Address: "192.0.2.10", Serving: true})
	var broken sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := broken.Load("yes"); ok && r.URL.Path == protocol.ResolvePath {
			answer := `{"error":{"code":"Unavailable","message":"gone away"}}`
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(answer))
			return
		}
		inv.plugin.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	wk := newWakes()
	p := newProvider(t, wk)
	req := source("web", "web", connection(srv.URL))
	if _, err := p.Resolve(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	drain(wk)
	// The change is answered to the held long-poll; every request after it fails.
	broken.Store("yes", true)
	inv.set("web", sdk.Endpoint{Address: "192.0.2.11", Serving: true})
	<-wk.ch
	// Let the failure that follows the change arrive before the controller looks.
	deadline := time.Now().Add(5 * time.Second)
	for p.pendingOf(req) == nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	res, err := p.Resolve(context.Background(), req)
	if err != nil || len(res.Endpoints) != 1 || res.Endpoints[0].Address != "192.0.2.11" {
		t.Fatalf("first Resolve after the change: %+v, %v; want the change", res, err)
	}
	select {
	case <-wk.ch:
	case <-time.After(5 * time.Second):
		t.Fatal("no wake-up for the failure that followed")
	}
	if _, err := p.Resolve(context.Background(), req); err == nil || !strings.Contains(err.Error(), "gone away") {
		t.Fatalf("second Resolve: %v; want the failure", err)
	}
}

// pendingOf is the failure waiting behind req's unseen answer.
func (p *Provider) pendingOf(req providers.Request) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w, ok := p.watches[providers.SourceKeyOf(req)]; ok {
		return w.pending
	}
	return nil
}

// TestIgnoredIsNamed: fields the protocol does not have and a hostname
// that cannot be published do not fail the answer, but are named in the
// result's note (status), so that a misspelt optional field is seen.
func TestIgnoredIsNamed(t *testing.T) {
	srv := hostile(200, nil, `{"endpoints":[{"address":"192.0.2.1","serving":true,"terminting":true,"hostname":"web_0"},`+
		`{"address":"192.0.2.2","serving":false,"hostname":"web-1"}],"refreshAfterSecond":5}`)
	t.Cleanup(srv.Close)
	p := newProvider(t, newWakes())
	res, err := p.Resolve(context.Background(), source("s", "web", connection(srv.URL)))
	if err != nil {
		t.Fatal(err)
	}
	want := []providers.Endpoint{{Address: "192.0.2.1", Serving: true}, {Address: "192.0.2.2", Hostname: "web-1"}}
	if fmt.Sprint(res.Endpoints) != fmt.Sprint(want) {
		t.Errorf("endpoints %+v, want %+v", res.Endpoints, want)
	}
	for _, says := range []string{"spec.sources[s].plugin: the plugin's answer has", `endpoints[0].hostname "web_0", not a DNS-1123 label: published without it`,
		`"endpoints[0].terminting", "refreshAfterSecond" not in the protocol, ignored`} {
		if !strings.Contains(res.Limit, says) {
			t.Errorf("note %q does not say %q", res.Limit, says)
		}
	}
}
