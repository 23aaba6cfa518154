package plugin

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/providers/plugin/protocol"
)

// connID names a BackendProvider's connection at one version of its spec
// (and CA): two providers never share a client, nor one provider's old
// and new settings.
type connID struct{ name, key string }

// conn is one plugin as the watches through one BackendProvider reach it:
// a client of its own, the token, and the bounds the platform team set.
// Its fields but watches are safe for concurrent use; watches is guarded
// by the provider's mutex.
type conn struct {
	id connID
	// who names the plugin in messages: its BackendProvider and url.
	who     string
	url     string
	client  *http.Client
	token   func() (string, error)
	timeout time.Duration
	// maxEndpoints bounds an answer's endpoints, maxBytes its size.
	maxEndpoints int
	maxBytes     int64
	// slots bound the requests in flight that are not long-polls.
	slots chan struct{}
	// requests counts the requests sent, for the provider's Stats.
	requests *atomic.Uint64

	mu sync.Mutex
	// negotiated is set once the plugin's info listed our version; a
	// failed request unsets it, since a plugin that went away may come
	// back as another version.
	negotiated bool
	// failing is the last failure to reach the plugin, nil after an answer.
	failing error

	watches int
}

// newConn makes the client of cc, a plugin connection.
func newConn(cc *providers.Connection, requests *atomic.Uint64) (*conn, error) {
	pc := cc.Plugin
	client, err := NewHTTPClient(pc)
	if err != nil {
		return nil, providers.Terminalf(v1alpha1.ReasonProviderNotAvailable, "BackendProvider %s: %v", cc.Name, err)
	}
	token := pc.Token
	if token == nil {
		token = func() (string, error) { return "", nil }
	}
	return &conn{
		id:           connID{cc.Name, cc.Key},
		who:          fmt.Sprintf("the plugin of BackendProvider %s (%s)", cc.Name, pc.URL),
		url:          strings.TrimSuffix(pc.URL, "/"),
		client:       client,
		token:        token,
		timeout:      pc.Timeout,
		maxEndpoints: pc.MaxEndpoints,
		maxBytes:     protocol.MaxResponseBytes(pc.MaxEndpoints),
		slots:        make(chan struct{}, max(pc.MaxConcurrentRequests, 1)),
		requests:     requests,
	}, nil
}

// NewHTTPClient is the HTTP client the controller reaches a plugin with:
// its CA and server name, no proxy, no redirects followed, connections
// kept for the long-polls.
func NewHTTPClient(pc *providers.PluginConnection) (*http.Client, error) {
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: pc.ServerName}
	if len(pc.CAPEM) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pc.CAPEM) {
			return nil, errors.New("spec.plugin.tls.caSecretRef holds no PEM certificate")
		}
		tlsCfg.RootCAs = pool
	}
	tr := &http.Transport{
		// A plugin is a sidecar or a Service of the cluster: never reached
		// through the proxy that the environment names for the clouds.
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: pc.Timeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     tlsCfg,
		TLSHandshakeTimeout: pc.Timeout,
		ForceAttemptHTTP2:   true,
		// Every watch keeps a request open: let them keep their
		// connections between requests instead of dialling each time.
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     90 * time.Second,
	}
	return &http.Client{
		Transport: tr,
		// A plugin that redirects is refused, not followed: the url is the
		// platform team's, and a redirect would take the token elsewhere.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}, nil
}

// closeIdle closes the client's idle connections, once nothing uses it.
func (c *conn) closeIdle() { c.client.CloseIdleConnections() }

// failure is the last failure to reach the plugin, nil while it answers.
func (c *conn) failure() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failing
}

// reached records whether the last request reached the plugin.
func (c *conn) reached(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failing = err
	if err != nil {
		c.negotiated = false
	}
}

// reply is an HTTP answer of the plugin, its body bounded.
type reply struct {
	status int
	body   []byte
}

// do sends one request, bounded by the connection's timeout past wait (a
// long-poll's own wait), and reads at most maxBytes of the answer. A
// long-poll takes no slot: the watches bound those.
func (c *conn) do(ctx context.Context, method, path string, body any, wait time.Duration) (reply, error) {
	if wait == 0 {
		select {
		case c.slots <- struct{}{}:
			defer func() { <-c.slots }()
		case <-ctx.Done():
			return reply{}, providers.Transient(fmt.Errorf("%s: waiting for one of its spec.plugin.maxConcurrentRequests (%d) requests to end: %w",
				c.who, cap(c.slots), ctx.Err()))
		}
	}
	ctx, cancel := context.WithTimeout(ctx, wait+wait/16+c.timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return reply{}, providers.Terminal(v1alpha1.ReasonInvalidSpec, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.url+path, rd)
	if err != nil {
		return reply{}, providers.Terminalf(v1alpha1.ReasonProviderNotAvailable, "%s: %v", c.who, err)
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	tok, err := c.token()
	if err != nil {
		return reply{}, providers.Transient(fmt.Errorf("%s: reading the token: %w", c.who, err))
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	c.requests.Add(1)
	resp, err := c.client.Do(req)
	if err != nil {
		err = providers.Transient(fmt.Errorf("%s: %s %s: %w", c.who, method, path, err))
		c.reached(err)
		return reply{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, c.maxBytes+1))
	if err != nil {
		err = providers.Transient(fmt.Errorf("%s: reading the answer to %s %s: %w", c.who, method, path, err))
		c.reached(err)
		return reply{}, err
	}
	c.reached(nil)
	if int64(len(data)) > c.maxBytes {
		return reply{}, garbage(c.who, path, fmt.Sprintf("an answer larger than %d bytes (64 KiB and 512 bytes for each of spec.plugin.maxEndpoints=%d)", c.maxBytes, c.maxEndpoints))
	}
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		return reply{}, garbage(c.who, path, fmt.Sprintf("a redirect (%d to %q), which is never followed", resp.StatusCode,
			providers.Printable(resp.Header.Get("Location"), protocol.MaxMessageLength)))
	}
	return reply{status: resp.StatusCode, body: data}, nil
}

// garbage is an answer the protocol does not allow: a failure of the
// plugin, so that what its sources published stays.
func garbage(who, path, what string) error {
	return providers.Transient(fmt.Errorf("%s answered %s with %s; what the source published is kept", who, path, what))
}

// info asks the plugin which protocol versions it speaks, and refuses one
// that does not speak ours (terminal, UnsupportedProtocol).
func (c *conn) info(ctx context.Context) error {
	r, err := c.do(ctx, http.MethodGet, protocol.InfoPath, nil, 0)
	if err != nil {
		return err
	}
	if r.status != http.StatusOK {
		return c.refusal(protocol.InfoPath, r)
	}
	var info protocol.Info
	if err := json.Unmarshal(r.body, &info); err != nil {
		return garbage(c.who, protocol.InfoPath, "something that is not the protocol's JSON: "+providers.Printable(err.Error(), protocol.MaxMessageLength))
	}
	if !slices.Contains(info.ProtocolVersions, protocol.Version) {
		return providers.Terminalf(v1alpha1.ReasonUnsupportedProtocol,
			"%s speaks plugin protocol versions %q, and this controller speaks %s; upgrade the plugin (or the controller) so that both speak one version",
			c.who, printables(info.ProtocolVersions), protocol.Version)
	}
	return nil
}

// printables are vs, each bounded and printable, at most 8 of them.
func printables(vs []string) []string {
	out := make([]string, 0, min(len(vs), 8))
	for _, v := range vs[:min(len(vs), 8)] {
		out = append(out, providers.Printable(v, 32))
	}
	return out
}

// negotiate makes sure the plugin speaks our version before the first
// resolve through c, and again after it could not be reached.
func (c *conn) negotiate(ctx context.Context) error {
	c.mu.Lock()
	done := c.negotiated
	c.mu.Unlock()
	if done {
		return nil
	}
	if err := c.info(ctx); err != nil {
		return err
	}
	c.mu.Lock()
	c.negotiated = true
	c.mu.Unlock()
	return nil
}

// answer is one resolve's answer, checked.
type answer struct {
	endpoints []providers.Endpoint
	// index is set when the plugin pushes; refresh when it does not.
	index   string
	refresh time.Duration
}

// resolve sends one resolve request: a long-poll when req carries an index.
func (c *conn) resolve(ctx context.Context, req protocol.ResolveRequest) (answer, error) {
	wait := time.Duration(req.WaitSeconds) * time.Second
	r, err := c.do(ctx, http.MethodPost, protocol.ResolvePath, req, wait)
	if err != nil {
		return answer{}, err
	}
	if r.status != http.StatusOK {
		return answer{}, c.refusal(protocol.ResolvePath, r)
	}
	var resp protocol.ResolveResponse
	if err := json.Unmarshal(r.body, &resp); err != nil {
		return answer{}, garbage(c.who, protocol.ResolvePath, "something that is not the protocol's JSON: "+providers.Printable(err.Error(), protocol.MaxMessageLength))
	}
	eps, err := endpointsOf(resp, c.maxEndpoints)
	if err != nil {
		return answer{}, garbage(c.who, protocol.ResolvePath, err.Error())
	}
	return answer{endpoints: eps, index: resp.Index, refresh: refreshOf(resp.RefreshAfterSeconds)}, nil
}

// refresh is when a plugin that does not push is asked again.
func refreshOf(seconds int) time.Duration {
	if seconds == 0 {
		seconds = protocol.DefaultRefreshSeconds
	}
	return time.Duration(min(max(seconds, protocol.MinRefreshSeconds), protocol.MaxRefreshSeconds)) * time.Second
}

// endpointsOf checks an answer against the protocol's bounds and the
// provider's maxEndpoints, and returns its endpoints. What an address may
// be is normalisation's to decide, as for every source: here only what
// would cost memory or make no sense.
func endpointsOf(resp protocol.ResolveResponse, most int) ([]providers.Endpoint, error) {
	if n := len(resp.Endpoints); n > most {
		return nil, fmt.Errorf("%d endpoints, more than spec.plugin.maxEndpoints=%d", n, most)
	}
	if len(resp.Index) > protocol.MaxIndexLength {
		return nil, fmt.Errorf("an index of %d bytes, more than %d", len(resp.Index), protocol.MaxIndexLength)
	}
	out := make([]providers.Endpoint, 0, len(resp.Endpoints))
	for i, e := range resp.Endpoints {
		switch {
		case e.Address == "" || len(e.Address) > protocol.MaxAddressLength:
			return nil, fmt.Errorf("endpoints[%d].address of %d bytes; 1 to %d", i, len(e.Address), protocol.MaxAddressLength)
		case len(e.Zone) > protocol.MaxZoneLength:
			return nil, fmt.Errorf("endpoints[%d].zone of %d bytes; at most %d", i, len(e.Zone), protocol.MaxZoneLength)
		case len(e.Hostname) > protocol.MaxHostnameLength:
			return nil, fmt.Errorf("endpoints[%d].hostname of %d bytes; at most %d", i, len(e.Hostname), protocol.MaxHostnameLength)
		case e.Port < 0 || e.Port > 65535:
			return nil, fmt.Errorf("endpoints[%d].port %d; 0 to 65535", i, e.Port)
		}
		out = append(out, providers.Endpoint{Address: e.Address, Zone: e.Zone, Hostname: e.Hostname,
			Serving: e.Serving, Terminating: e.Terminating, Port: e.Port})
	}
	return out, nil
}

// refusal is the failure an answer other than 200 says, by its code.
func (c *conn) refusal(path string, r reply) error {
	if r.status == http.StatusUnauthorized {
		return providers.Terminalf(v1alpha1.ReasonAccessDenied,
			"%s refused the controller's token (401 to %s); put the token the plugin expects into the Secret spec.plugin.tokenSecretRef names",
			c.who, path)
	}
	var er protocol.ErrorResponse
	if err := json.Unmarshal(r.body, &er); err != nil || er.Error.Code == "" {
		return garbage(c.who, path, fmt.Sprintf("status %d without the protocol's error body", r.status))
	}
	msg := providers.Printable(er.Error.Message, protocol.MaxMessageLength)
	switch er.Error.Code {
	case protocol.CodeInvalidParameters:
		return providers.Terminal(v1alpha1.ReasonInvalidSpec, fmt.Errorf("%s refused the parameters: %s; fix the parameters as it says", c.who, msg))
	case protocol.CodeNotFound:
		return providers.Gone(v1alpha1.ReasonBackendNotFound, fmt.Errorf("%s says the backend does not exist: %s", c.who, msg))
	case protocol.CodeForbidden:
		return providers.Terminal(v1alpha1.ReasonAccessDenied, fmt.Errorf("%s refuses this namespace or backend: %s", c.who, msg))
	}
	return providers.Transient(fmt.Errorf("%s cannot answer (%d %s): %s", c.who, r.status,
		providers.Printable(er.Error.Code, 32), msg))
}

// errNoAnswer says a watch stopped before the plugin answered it.
var errNoAnswer = errors.New("the watch stopped before the plugin answered")
