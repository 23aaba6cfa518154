package consultest

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"sync"
	"testing"
)

// Request is one request a Proxy passed on.
type Request struct {
	// Path is the URL path asked for.
	Path string
	// Token is the X-Consul-Token the request carried, "" for none.
	Token string
}

// Proxy is a reverse proxy on 127.0.0.1 in front of an agent. It records
// every request passing through it, so that a test can tell how often, for
// what and with which token a client asked the agent.
type Proxy struct {
	// Addr is the proxy's host:port: give it to the client instead of the
	// agent's.
	Addr string

	mu       sync.Mutex
	requests []Request
}

// NewProxy starts a proxy to the agent HTTP API at addr (host:port) for t,
// stopped when t ends.
func NewProxy(t testing.TB, addr string) *Proxy {
	t.Helper()
	p := &Proxy{}
	forward := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: addr})
	// A client ending a blocking query is no error worth a log line.
	forward.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, _ error) { w.WriteHeader(http.StatusBadGateway) }
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.requests = append(p.requests, Request{Path: r.URL.Path, Token: r.Header.Get("X-Consul-Token")})
		p.mu.Unlock()
		forward.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		// Close waits for the requests in flight: end blocking queries
		// that a client still holds open.
		srv.CloseClientConnections()
		srv.Close()
	})
	p.Addr = srv.Listener.Addr().String()
	return p
}

// Requests are the requests passed on so far, oldest first.
func (p *Proxy) Requests() []Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.requests)
}
