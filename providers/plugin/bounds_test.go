package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/providers/plugin/protocol"
	"github.com/backendslice/backendslice/providers/plugin/sdk"
)

// turncoat is a plugin that pushes good answers until it turns hostile:
// then every resolve request, the next long-poll first, gets the hostile
// handler; in hold mode it never finishes a TLS handshake.
type turncoat struct {
	srv *httptest.Server
	inv *inventory

	mu      sync.Mutex
	hostile http.HandlerFunc
	hold    bool
	held    []net.Conn
}

func newTurncoat(t *testing.T, tlsOn bool) *turncoat {
	tc := &turncoat{inv: newInventory(true)}
	tc.inv.set("web", sdk.Endpoint{Address: "192.0.2.10", Serving: true})
	tc.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tc.mu.Lock()
		h := tc.hostile
		tc.mu.Unlock()
		if h != nil && r.URL.Path == protocol.ResolvePath {
			h(w, r)
			return
		}
		tc.inv.plugin.Handler().ServeHTTP(w, r)
	}))
	tc.srv.Listener = &holdingListener{Listener: tc.srv.Listener, tc: tc}
	if tlsOn {
		tc.srv.EnableHTTP2 = true
		tc.srv.StartTLS()
	} else {
		tc.srv.Start()
	}
	t.Cleanup(func() {
		tc.mu.Lock()
		for _, c := range tc.held {
			_ = c.Close()
		}
		tc.mu.Unlock()
		tc.srv.Close()
	})
	return tc
}

// turn makes the plugin hostile: the long-poll it holds ends at its
// wait, with nothing changed, and the next one, a long-poll too, gets h.
// In hold mode every connection is cut, so that the next request dials.
func (tc *turncoat) turn(h http.HandlerFunc, hold bool) {
	tc.mu.Lock()
	tc.hostile, tc.hold = h, hold
	tc.mu.Unlock()
	if hold {
		tc.srv.CloseClientConnections()
	}
}

// holdingListener keeps the connections it accepts in hold mode, saying
// nothing on them: a TLS handshake on one never ends.
type holdingListener struct {
	net.Listener
	tc *turncoat
}

func (l *holdingListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.tc.mu.Lock()
		hold := l.tc.hold
		if hold {
			l.tc.held = append(l.tc.held, c)
		}
		l.tc.mu.Unlock()
		if !hold {
			return c, nil
		}
	}
}

// hijacked writes what raw says on the request's connection, itself.
func hijacked(raw func(conn net.Conn)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer func() { _ = conn.Close() }()
		raw(conn)
	}
}

// TestHostileReadsAreBounded: a plugin that turns hostile while it holds
// long-polls (headers that never end, a body that never ends, headers
// that trickle, a TLS handshake that never ends) fails the source with a
// clear, transient error naming the bound, and the watch keeps the last
// endpoints it had.
func TestHostileReadsAreBounded(t *testing.T) {
	endless := func(line string) func(net.Conn) {
		return func(conn net.Conn) {
			_, _ = conn.Write([]byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"))
			for {
				if _, err := conn.Write([]byte(line)); err != nil {
					return
				}
			}
		}
	}
	cases := []struct {
		name    string
		tls     bool
		hostile http.HandlerFunc
		hold    bool
		says    string
	}{
		{"headers that never end", false, hijacked(endless("X-Pad: " + strings.Repeat("a", 1000) + "\r\n")), false,
			"server response headers exceeded 32768 bytes"},
		{"a body that never ends", false, func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte(`{"endpoints":[`))
			pad := []byte(strings.Repeat(" ", 4096))
			for r.Context().Err() == nil {
				if _, err := w.Write(pad); err != nil {
					return
				}
			}
		}, false, "an answer larger than 70656 bytes"},
		{"headers that trickle", false, hijacked(func(conn net.Conn) {
			_, _ = conn.Write([]byte("HTTP/1.1 200 OK\r\n"))
			for range 200 {
				if _, err := conn.Write([]byte("X")); err != nil {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}), false, "(no whole answer within the long-poll's 2s wait, a 16th of it and spec.plugin.timeout, 300ms)"},
		{"a TLS handshake that never ends", true, nil, true, "TLS handshake timeout"},
		{"headers that never end, over HTTP/2", true, func(w http.ResponseWriter, _ *http.Request) {
			for i := range 100 {
				w.Header().Set("X-Pad-"+strings.Repeat("b", i%50)+string(rune('a'+i%26)), strings.Repeat("a", 1000))
			}
			w.WriteHeader(http.StatusOK)
		}, false, "PROTOCOL_ERROR"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tc := newTurncoat(t, c.tls)
			conn := connection(tc.srv.URL)
			settingsOf(conn).Timeout = 300 * time.Millisecond
			if c.tls {
				settingsOf(conn).CAPEM = caOf(tc.srv)
			}
			p := newProvider(t, newWakes())
			req := source("web", "web", conn)
			res, err := p.Resolve(context.Background(), req)
			if err != nil || len(res.Endpoints) != 1 {
				t.Fatalf("before: %+v, %v", res, err)
			}
			tc.turn(c.hostile, c.hold)
			var last error
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) {
				if _, last = p.Resolve(context.Background(), req); last != nil && strings.Contains(last.Error(), c.says) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if last == nil || !strings.Contains(last.Error(), c.says) {
				t.Fatalf("Resolve = %v; want a failure that says %q", last, c.says)
			}
			t.Logf("%s: %v", c.name, last)
			if providers.IsTerminal(last) {
				t.Errorf("Resolve = %v: terminal; a hostile answer is the plugin's failure, transient", last)
			}
			if eps := p.endpointsOf(req); len(eps) != 1 || eps[0].Address != "192.0.2.10" {
				t.Errorf("the watch holds %+v; want the last endpoints, 192.0.2.10", eps)
			}
		})
	}
}

// caOf is the PEM of the test server's certificate, its own CA.
func caOf(srv *httptest.Server) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
}

// endpointsOf are the endpoints req's watch keeps.
func (p *Provider) endpointsOf(req providers.Request) []providers.Endpoint {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w, ok := p.watches[providers.SourceKeyOf(req)]; ok {
		return w.endpoints
	}
	return nil
}

// TestFailingLongPollsBackOff: a plugin whose long-polls fail while its
// other answers are good is asked with a backoff that keeps growing, not
// again and again at the first retry's pace: the good answer between two
// failed long-polls does not end the run of failures.
func TestFailingLongPollsBackOff(t *testing.T) {
	var mu sync.Mutex
	longPolls := 0
	inv := newInventory(true)
	inv.set("web", sdk.Endpoint{Address: "192.0.2.10", Serving: true})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == protocol.ResolvePath {
			var req protocol.ResolveRequest
			body, _ := io.ReadAll(r.Body)
			if json.Unmarshal(body, &req) == nil && req.Index != "" {
				mu.Lock()
				longPolls++
				mu.Unlock()
				w.WriteHeader(http.StatusOK)
				_, _ = w.Write([]byte(`{}`))
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		inv.plugin.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	p, err := New(Options{RetryDelay: 100 * time.Millisecond, MaxRetryDelay: 2 * time.Second, Wait: 2 * time.Second}, newWakes())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	if _, err := p.Resolve(context.Background(), source("web", "web", connection(srv.URL))); err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * time.Second)
	mu.Lock()
	defer mu.Unlock()
	// Pauses of 100 ms doubling to 2 s (each between half and the whole)
	// sum past 4 s within 8 failed long-polls; at the first retry's pace,
	// and the rate limit's 10 requests a second, it would be about 20.
	if longPolls > 8 {
		t.Errorf("%d failed long-polls in 4s; want the backoff to grow across them (at most 8)", longPolls)
	}
}
