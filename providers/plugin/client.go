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
	// metrics count the requests by outcome; nil counts none (a check).
	metrics *metrics

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
func newConn(cc *providers.Connection, requests *atomic.Uint64, m *metrics) (*conn, error) {
	pc := settingsOf(cc)
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
		metrics:      m,
	}, nil
}

// IdleConnTimeout is how long the controller keeps a connection to a
// plugin that carries no request; a plugin's server keeps idle
// connections longer.
const IdleConnTimeout = 4 * time.Second

// HTTP/2 flow-control windows: the largest the protocol allows, and the
// smallest a connection's may be.
const (
	maxHTTP2Window     = 4<<20 - 1
	minHTTP2ConnWindow = 64 << 10
)

// NewHTTPClient is the HTTP client the controller reaches a plugin with:
// its CA and server name, no proxy, no redirects followed, connections
// kept for the long-polls, and every read bounded: the TLS handshake by
// the provider's timeout, the headers by MaxResponseHeaderBytes (the body
// is bounded where it is read, and the whole answer by the request's
// deadline).
func NewHTTPClient(pc *Settings) (*http.Client, error) {
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: pc.ServerName}
	if len(pc.CAPEM) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pc.CAPEM) {
			return nil, errors.New("spec.plugin.tls.caSecretRef holds no PEM certificate")
		}
		tlsCfg.RootCAs = pool
	}
	// What the transport buffers of an answer before the client reads it
	// is bounded as the answer is: its headers by MaxResponseHeaderBytes
	// (Go's default is 10 MiB, and each long-poll in flight could hold
	// that much), an HTTP/2 stream's unread data by its window.
	window := int(min(protocol.MaxResponseBytes(pc.MaxEndpoints)+1, maxHTTP2Window))
	tr := &http.Transport{
		// A plugin is a sidecar or a Service of the cluster: never reached
		// through the proxy that the environment names for the clouds.
		Proxy:                  nil,
		DialContext:            (&net.Dialer{Timeout: pc.Timeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:        tlsCfg,
		TLSHandshakeTimeout:    pc.Timeout,
		MaxResponseHeaderBytes: protocol.MaxResponseHeaderBytes,
		ForceAttemptHTTP2:      true,
		HTTP2: &http.HTTP2Config{
			MaxReceiveBufferPerStream:     window,
			MaxReceiveBufferPerConnection: max(window, minHTTP2ConnWindow),
		},
		// Every watch keeps a request open: let them keep their
		// connections between requests instead of dialling each time.
		// A pushed source's next long-poll goes out at once; a polled
		// source's connection is closed before the common server
		// defaults close it (Node's 5 s), so that a request never races
		// the plugin closing the connection it is sent on.
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     IdleConnTimeout,
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
	parent := ctx
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
		err = providers.Transient(fmt.Errorf("%s: %s %s%s: %w", c.who, method, path, c.late(parent, ctx, wait), err))
		// A request cancelled by its watch's end (its source gone, or its
		// watch given to another namespace) says nothing of the plugin.
		if !errors.Is(err, context.Canceled) {
			c.reached(err)
		}
		return reply{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, c.maxBytes+1))
	if err != nil {
		err = providers.Transient(fmt.Errorf("%s: reading the answer to %s %s%s: %w", c.who, method, path, c.late(parent, ctx, wait), err))
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

// late says why a request failed when its own deadline passed (and not
// its caller's): the plugin did not answer whole in time.
func (c *conn) late(parent, ctx context.Context, wait time.Duration) string {
	if parent.Err() != nil || !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return ""
	}
	if wait == 0 {
		return fmt.Sprintf(" (no whole answer within spec.plugin.timeout, %s)", c.timeout)
	}
	return fmt.Sprintf(" (no whole answer within the long-poll's %s wait, a 16th of it and spec.plugin.timeout, %s)", wait, c.timeout)
}

// garbage is an answer the protocol does not allow: a failure of the
// plugin, so that what its sources published stays.
func garbage(who, path, what string) error {
	return providers.Transient(&badAnswer{fmt.Sprintf("%s answered %s with %s; what the source published is kept", who, path, what)})
}

// badAnswer is a failure of the plugin to answer as the protocol says
// (garbage, a broken answer), as the metrics tell it apart.
type badAnswer struct{ msg string }

func (b *badAnswer) Error() string { return b.msg }

// unavailable is the plugin's own Unavailable (or unknown) error code.
type unavailable struct{ error }

func (u unavailable) Unwrap() error { return u.error }

// info asks the plugin which protocol versions it speaks, and refuses one
// that does not speak ours (terminal, UnsupportedProtocol).
func (c *conn) info(ctx context.Context) (err error) {
	start := time.Now()
	defer func() { c.metrics.observe(c.id.name, opInfo, err, time.Since(start), ctx.Err() != nil) }()
	r, err := c.do(ctx, http.MethodGet, protocol.InfoPath, nil, 0)
	if err != nil {
		return err
	}
	if r.status != http.StatusOK {
		return c.refusal(protocol.InfoPath, r)
	}
	info, err := readInfo(r.body)
	if err != nil {
		return c.broken(protocol.InfoPath, err)
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
	// note names what the controller ignored or left out of the answer
	// (unknown fields, a hostname it cannot publish), for status; "" when
	// the answer was taken whole.
	note string
}

// resolve sends one resolve request: a long-poll when req carries an index.
func (c *conn) resolve(ctx context.Context, req protocol.ResolveRequest) (_ answer, err error) {
	wait := time.Duration(req.WaitSeconds) * time.Second
	op, start := opResolve, time.Now()
	if wait > 0 {
		op = opLongPoll
		c.metrics.holding(c.id.name, 1)
		defer c.metrics.holding(c.id.name, -1)
	}
	defer func() { c.metrics.observe(c.id.name, op, err, time.Since(start), ctx.Err() != nil) }()
	r, err := c.do(ctx, http.MethodPost, protocol.ResolvePath, req, wait)
	if err != nil {
		return answer{}, err
	}
	if r.status != http.StatusOK {
		return answer{}, c.refusal(protocol.ResolvePath, r)
	}
	ans, err := readAnswer(r.body, c.maxEndpoints)
	if err != nil {
		return answer{}, c.broken(protocol.ResolvePath, err)
	}
	return ans, nil
}

// broken is the failure of an answer to path that readAnswer, readInfo or
// readRefusal refused: a brokenAnswer names the field, anything else is
// not JSON at all.
func (c *conn) broken(path string, err error) error {
	var b *brokenAnswer
	if errors.As(err, &b) {
		return providers.Transient(&badAnswer{fmt.Sprintf("%s answered %s with a broken answer: %s; what the source published is kept",
			c.who, path, b.msg)})
	}
	return garbage(c.who, path, "something that is not the protocol's JSON: "+providers.Printable(err.Error(), protocol.MaxMessageLength))
}

// refusal is the failure an answer other than 200 says, by its code.
func (c *conn) refusal(path string, r reply) error {
	refusal, err := readRefusal(r.body)
	if r.status == http.StatusUnauthorized {
		// The status decides; the body, when it is the protocol's, says why.
		why := ""
		if err == nil {
			why = ": " + providers.Printable(refusal.Message, protocol.MaxMessageLength)
		}
		return providers.Terminalf(v1alpha1.ReasonAccessDenied,
			"%s refused the controller's token (401 to %s)%s; put the token the plugin expects into the Secret spec.plugin.tokenSecretRef names",
			c.who, path, why)
	}
	if err != nil {
		var b *brokenAnswer
		if errors.As(err, &b) {
			return garbage(c.who, path, fmt.Sprintf("status %d without the protocol's error body (%s)", r.status, b.msg))
		}
		return garbage(c.who, path, fmt.Sprintf("status %d without the protocol's error body", r.status))
	}
	msg := providers.Printable(refusal.Message, protocol.MaxMessageLength)
	if want := protocol.StatusOf(refusal.Code); want != 0 && want != r.status {
		// The code decides; the status the protocol gives it is named,
		// so that the plugin's author sees the mismatch.
		msg += fmt.Sprintf(" (answered with status %d; the protocol's status for %s is %d)", r.status, refusal.Code, want)
	}
	switch refusal.Code {
	case protocol.CodeInvalidParameters:
		return providers.Terminal(v1alpha1.ReasonInvalidSpec, fmt.Errorf("%s refused the parameters: %s; fix the parameters as it says", c.who, msg))
	case protocol.CodeNotFound:
		return providers.Gone(v1alpha1.ReasonBackendNotFound, fmt.Errorf("%s says the backend does not exist: %s", c.who, msg))
	case protocol.CodeForbidden, protocol.CodeUnauthorized:
		err := fmt.Errorf("%s refuses this namespace or backend: %s", c.who, msg)
		if refusal.Code == protocol.CodeForbidden {
			// The plugin's consent rules, not its token: backed off long.
			err = forbidden{err}
		}
		return providers.Terminal(v1alpha1.ReasonAccessDenied, err)
	}
	return providers.Transient(unavailable{fmt.Errorf("%s cannot answer (%d %s): %s", c.who, r.status,
		providers.Printable(refusal.Code, 32), msg)})
}

// forbidden is a refusal of the plugin's consent rules (its forbidden
// code): the source backs off long and holds no watch (Provider.refuse).
type forbidden struct{ error }

func (f forbidden) Unwrap() error { return f.error }

// errNoAnswer says a watch stopped before the plugin answered it.
var errNoAnswer = errors.New("the watch stopped before the plugin answered")
