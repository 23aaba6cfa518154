//go:build bench

package hostile

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backendslice/backendslice/providers/plugin/protocol"
	"github.com/backendslice/backendslice/providers/plugin/sdk"
	"github.com/backendslice/backendslice/test/hostiletest"
)

// hostileBytes is the most a hostile server sends on one connection: the
// issue's 10 MiB of headers, or of body.
const hostileBytes = 10 << 20

// Kinds of peer, in the order of the report's rows.
const (
	endlessHeaders  = "headers of 10 MiB that never end"
	trickledHeaders = "headers that trickle (a byte every 100 ms, never ending)"
	hugeBody        = "a body of 10 MiB"
	silentTLS       = "a TLS handshake that never ends"
)

// probeKinds are the kinds of hostile probe target, a quarter of the fleet
// each; the well-behaved fleet has a counterpart of each (plain HTTP for
// the first three, HTTPS for the last).
var probeKinds = []string{endlessHeaders, trickledHeaders, hugeBody, silentTLS}

// pluginKinds are the kinds of hostile long-poll, in turn by source.
var pluginKinds = []string{endlessHeaders, trickledHeaders, hugeBody}

// servers are every peer of both fleets, on 127.0.0.1.
type servers struct {
	size int
	// web serves the well-behaved HTTP targets, secure the HTTPS ones;
	// caPEM verifies secure's certificate (for example.com).
	web, secure *httptest.Server
	caPEM       string
	// hostile are the hostile probe targets' ports, by kind.
	hostile map[string]int32
	// plugin is the well-behaved plugin, turncoat the hostile one.
	plugin, turncoat *httptest.Server
	// written counts the bytes the hostile peers managed to send, by kind.
	mu      sync.Mutex
	written map[string]*atomic.Int64
}

// startServers starts the peers of fleets of size targets and long-polls;
// they stop when the test ends.
func startServers(t *testing.T, size int) *servers {
	t.Helper()
	s := &servers{size: size, hostile: map[string]int32{}, written: map[string]*atomic.Int64{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("/body/", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(bytes.Repeat([]byte("b"), 1024)) })
	s.web = httptest.NewServer(mux)
	t.Cleanup(s.web.Close)
	s.secure = httptest.NewTLSServer(mux)
	t.Cleanup(s.secure.Close)
	s.caPEM = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.secure.Certificate().Raw}))

	s.hostile[endlessHeaders] = s.listen(t, endlessHeaders, func(c net.Conn, sent *atomic.Int64) {
		if hostiletest.ReadRequest(c) {
			hostiletest.WriteEndless(c, "HTTP/1.1 200 OK\r\n", "X-Pad: "+strings.Repeat("a", 1016)+"\r\n", hostileBytes, sent)
		}
	})
	s.hostile[trickledHeaders] = s.listen(t, trickledHeaders, func(c net.Conn, sent *atomic.Int64) {
		if hostiletest.ReadRequest(c) {
			hostiletest.Trickle(c, "HTTP/1.1 200 OK\r\n", 100*time.Millisecond, 600, sent)
		}
	})
	s.hostile[hugeBody] = s.listen(t, hugeBody, func(c net.Conn, sent *atomic.Int64) {
		if hostiletest.ReadRequest(c) {
			hostiletest.WriteEndless(c, fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", hostileBytes), strings.Repeat("b", 1024), hostileBytes, sent)
		}
	})
	s.hostile[silentTLS] = s.listen(t, silentTLS, func(c net.Conn, _ *atomic.Int64) { hostiletest.Silent(c) })

	s.plugin = httptest.NewServer(newPlugin(size).Handler())
	t.Cleanup(s.plugin.Close)
	s.turncoat = httptest.NewServer(s.turncoatHandler(newPlugin(size).Handler()))
	t.Cleanup(s.turncoat.Close)
	return s
}

// newPlugin is a pushing plugin of groups g0 to g<size-1>, one endpoint
// each: its long-polls are held until their wait ends.
func newPlugin(size int) *sdk.Plugin {
	return &sdk.Plugin{Name: "fleet", Push: true,
		Resolve: func(_ context.Context, r sdk.Request) (sdk.Answer, error) {
			var i int
			if _, err := fmt.Sscanf(r.Parameters["group"], "g%d", &i); err != nil || i >= size {
				return sdk.Answer{}, sdk.NotFound("no group %q", r.Parameters["group"])
			}
			return sdk.Answer{Endpoints: []sdk.Endpoint{{Address: fmt.Sprintf("192.0.2.%d", 1+i%250), Serving: true}}}, nil
		}}
}

// turncoatHandler answers a source's first request as good, which starts
// its watch, and each of its long-polls as a hostile peer of the source's
// kind (pluginKinds, in turn by group).
func (s *servers) turncoatHandler(good http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != protocol.ResolvePath {
			good.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		var req protocol.ResolveRequest
		if err != nil || json.Unmarshal(body, &req) != nil || req.Index == "" {
			r.Body = io.NopCloser(bytes.NewReader(body))
			good.ServeHTTP(w, r)
			return
		}
		var i int
		_, _ = fmt.Sscanf(req.Parameters["group"], "g%d", &i)
		kind := pluginKinds[i%len(pluginKinds)]
		sent := s.counter("plugin: " + kind)
		if kind == hugeBody {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			chunk := []byte(`{"endpoints":[` + strings.Repeat(`{"address":"192.0.2.1","serving":true},`, 25))
			for n := 0; n < hostileBytes; n += len(chunk) {
				if _, err := w.Write(chunk); err != nil {
					return
				}
				sent.Add(int64(len(chunk)))
			}
			return
		}
		c, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		if kind == endlessHeaders {
			hostiletest.WriteEndless(c, "HTTP/1.1 200 OK\r\n", "X-Pad: "+strings.Repeat("a", 1016)+"\r\n", hostileBytes, sent)
		} else {
			hostiletest.Trickle(c, "HTTP/1.1 200 OK\r\n", 100*time.Millisecond, 600, sent)
		}
	})
}

// fleets are the well-behaved fleet and the hostile one.
func (s *servers) fleets() []fleetConfig {
	quarter := s.size / 4
	well := fleetConfig{Name: "well-behaved", CAPEM: s.caPEM, PluginURL: s.plugin.URL}
	bad := fleetConfig{Name: "hostile", CAPEM: s.caPEM, PluginURL: s.turncoat.URL}
	webPort, securePort := port(s.web), port(s.secure)
	for k, kind := range probeKinds {
		for i := range quarter {
			// Each target is its own: another path, or another port.
			path := fmt.Sprintf("/t/%d", i)
			if kind == hugeBody {
				path = fmt.Sprintf("/body/%d", i)
			}
			g := probeTarget{Kind: "http", Port: webPort, Path: path}
			h := probeTarget{Kind: "http", Port: s.hostile[kind], Path: path}
			if k == len(probeKinds)-1 {
				g = probeTarget{Kind: "https", Port: securePort, Path: path, ServerName: "example.com"}
				h = probeTarget{Kind: "https", Port: s.hostile[kind], Path: path, ServerName: "example.com"}
			}
			well.Probes, bad.Probes = append(well.Probes, g), append(bad.Probes, h)
		}
	}
	for i := range s.size {
		g := fmt.Sprintf("g%d", i)
		well.Sources, bad.Sources = append(well.Sources, g), append(bad.Sources, g)
	}
	return []fleetConfig{well, bad}
}

// sent is what the hostile peers managed to send, by kind, in bytes.
func (s *servers) sent() map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int64{}
	for k, n := range s.written {
		out[k] = n.Load()
	}
	return out
}

// counter is the byte counter of kind.
func (s *servers) counter(kind string) *atomic.Int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.written[kind] == nil {
		s.written[kind] = &atomic.Int64{}
	}
	return s.written[kind]
}

// listen serves each connection on a new port of 127.0.0.1 with serve,
// counting what it sends under kind, until the test ends.
func (s *servers) listen(t *testing.T, kind string, serve func(net.Conn, *atomic.Int64)) int32 {
	t.Helper()
	sent := s.counter("probe: " + kind)
	return hostiletest.Serve(t, func(c net.Conn) { serve(c, sent) })
}

// port is the port srv listens on.
func port(srv *httptest.Server) int32 {
	a, _ := srv.Listener.Addr().(*net.TCPAddr)
	return int32(a.Port)
}
