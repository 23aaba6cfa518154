package plugintest

import (
	"bytes"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"

	"github.com/backendslice/backendslice/providers/plugin/protocol"
)

// Counter is a reverse proxy in front of a plugin that counts each
// namespace's resolve requests: the tests point a BackendProvider at URL
// and read how often a namespace asked.
type Counter struct {
	// URL is the proxy's address.
	URL   string
	mu    sync.Mutex
	asked map[string]int
}

// NewCounter proxies to the plugin at target until the test ends.
func NewCounter(t testing.TB, target string) *Counter {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	c := &Counter{asked: map[string]int{}}
	proxy := httputil.NewSingleHostReverseProxy(u)
	// A long-poll the controller gives up on is no error worth a line.
	proxy.ErrorLog = log.New(io.Discard, "", 0)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == protocol.ResolvePath {
			body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
			var req protocol.ResolveRequest
			_ = json.Unmarshal(body, &req)
			c.mu.Lock()
			c.asked[req.Namespace]++
			c.mu.Unlock()
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	c.URL = srv.URL
	return c
}

// Requests is how many resolve requests namespace ns made.
func (c *Counter) Requests(ns string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.asked[ns]
}
