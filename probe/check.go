// Package probe checks endpoints from the controller (TCP, HTTP(S) and the
// gRPC health protocol) for backends whose sources say nothing of their
// health. One Prober serves every backend: a target (an address and what to
// check there) asked for by two backends is probed once, probes run on a
// bounded pool with jitter, shared fairly between namespaces, and only a
// verdict that changes wakes the backends that use it.
package probe

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// Kind is the protocol of a check.
type Kind string

// Kinds of check.
const (
	TCP   Kind = "tcp"
	HTTP  Kind = "http"
	HTTPS Kind = "https"
	GRPC  Kind = "grpc"
)

// Check is what to probe at an address and how often: everything of a
// target but the address. It is comparable, so that equal checks of one
// address, asked for by several backends, are one target.
type Check struct {
	Kind Kind
	Port int32
	// Path, StatusCodes (codes and ranges, "200-399,404"; empty means
	// DefaultStatusCodes), ServerName and CAPEM are for HTTP and HTTPS;
	// CAPEM empty means the system's roots.
	Path        string
	StatusCodes string
	ServerName  string
	CAPEM       string
	// GRPCService is the service the gRPC health check asks about.
	GRPCService string

	Period, Timeout                    time.Duration
	SuccessThreshold, FailureThreshold int
	// InitialReady is the verdict before the first results.
	InitialReady bool
}

// Target is one address and its check.
type Target struct {
	Address string
	Check   Check
}

// String names the target in logs: kind://address:port.
func (t Target) String() string {
	return string(t.Check.Kind) + "://" + net.JoinHostPort(t.Address, strconv.Itoa(int(t.Check.Port)))
}

// Dialer opens connections for probes; a test passes one that dials from
// inside a network namespace.
type Dialer func(ctx context.Context, network, address string) (net.Conn, error)

// errStatus is an HTTP answer whose code statusCodes does not accept.
var errStatus = errors.New("status not accepted")

// Failure is the category of a failed probe: the controller's own metric
// label and log field. Nothing a tenant reads (status, events, slices)
// carries it: a tenant learns pass or fail, never why, so a probe cannot
// tell it which code an address answered or whether a port refused or
// dropped the connection.
type Failure string

// Categories of failure.
const (
	FailureRefused     Failure = "refused"
	FailureTimeout     Failure = "timeout"
	FailureUnreachable Failure = "unreachable"
	FailureReset       Failure = "reset"
	FailureTLS         Failure = "tls"
	FailureConfig      Failure = "config"
	FailureStatus      Failure = "status"
	FailureNotServing  Failure = "not_serving"
	FailureUnavailable Failure = "unavailable"
	FailureTooLarge    Failure = "too_large"
	FailureOther       Failure = "other"
)

// Bounds on what a probe reads from its target. A target's address is the
// tenant's choice, so whatever answers there may answer anything; each
// probe keeps what it has read until it ends, and --probe-concurrency
// (256) probes run at once. Without these, net/http reads up to 10 MiB of
// headers and gRPC up to 4 MiB a message and 16 MiB of headers, and a
// server that never ends its answer holds that for the probe's timeout:
// 64 such targets took the controller to 1.4 GiB.
const (
	// maxProbeHeaderBytes bounds an HTTP answer's status line and headers.
	// A health check needs only the status line; 16 KiB leaves room for
	// the cookies and security headers an ordinary web server adds. An
	// answer whose headers go past it fails the probe at once (too_large).
	maxProbeHeaderBytes = 16 << 10
	// maxProbeBodyBytes is the most of an HTTP body a probe reads before it
	// closes the connection. The body is not judged (the status code is);
	// reading a small page to its end only spares the server a reset.
	maxProbeBodyBytes = 4 << 10
	// probeTLSHandshakeTimeout bounds an HTTPS probe's TLS handshake, well
	// under a probe's usual timeout: a handshake takes a few round trips,
	// and a server that starts one and never finishes it otherwise holds
	// the probe's slot and the handshake's buffers for the whole timeout.
	// A probe's own timeout, when shorter, still applies.
	probeTLSHandshakeTimeout = 3 * time.Second
	// maxProbeGRPCMessageBytes bounds a gRPC health answer, whose message
	// is one enum: a few bytes. A larger one fails the probe (too_large).
	maxProbeGRPCMessageBytes = 1 << 10
	// maxProbeGRPCHeaderBytes bounds a gRPC answer's headers and trailers,
	// as maxProbeHeaderBytes does HTTP's; the client announces it, so a
	// conforming server refuses to send more.
	maxProbeGRPCHeaderBytes = maxProbeHeaderBytes
	// probeGRPCWindowBytes is the HTTP/2 flow-control window of a gRPC
	// probe, for the stream and the connection: the most a server may send
	// before the probe reads it. Fixing it also turns off gRPC's window
	// growth (up to 16 MiB), which a fast sender would otherwise earn.
	probeGRPCWindowBytes = 64 << 10
)

// errTooLarge is an answer larger than a probe reads (see the bounds above).
var errTooLarge = errors.New("answer larger than a probe reads")

// headersTooLarge tells whether err is net/http refusing headers past
// MaxResponseHeaderBytes: net/http exports no error value for it, only
// this text (TestHostileTargets fails if it changes).
func headersTooLarge(err error) bool {
	return err != nil && strings.Contains(err.Error(), "server response headers exceeded")
}

// failureOf is err's category; "" for no error.
func failureOf(err error) Failure {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, errStatus):
		return FailureStatus
	case errors.Is(err, errNotServing):
		return FailureNotServing
	case errors.Is(err, errNoCA):
		return FailureConfig
	case errors.Is(err, errTooLarge):
		return FailureTooLarge
	case errors.Is(err, syscall.ECONNREFUSED):
		return FailureRefused
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return FailureUnreachable
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return FailureReset
	case isTLSFailure(err):
		return FailureTLS
	case isTimeout(err):
		return FailureTimeout
	}
	return grpcFailure(err)
}

// isTLSFailure tells whether err is a failed TLS handshake or certificate.
func isTLSFailure(err error) bool {
	var (
		alert    tls.AlertError
		header   tls.RecordHeaderError
		verify   *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		roots    x509.SystemRootsError
	)
	return errors.As(err, &alert) || errors.As(err, &header) || errors.As(err, &verify) ||
		errors.As(err, &unknown) || errors.As(err, &hostname) || errors.As(err, &invalid) || errors.As(err, &roots)
}

// isTimeout tells whether err is a probe that ran out of time.
func isTimeout(err error) bool {
	var netErr net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &netErr) && netErr.Timeout()
}

// grpcFailure is the category of a gRPC call's error status.
func grpcFailure(err error) Failure {
	st, ok := status.FromError(err)
	switch {
	case !ok:
		return FailureOther
	case st.Code() == codes.DeadlineExceeded:
		return FailureTimeout
	case st.Code() == codes.Unavailable:
		return FailureUnavailable
	case st.Code() == codes.ResourceExhausted,
		// grpc-go says so of headers past the announced limit.
		st.Code() == codes.Internal && strings.Contains(st.Message(), "header list size"):
		return FailureTooLarge
	}
	// The health service answered, but not SERVING (an unknown service).
	return FailureNotServing
}

// run probes t once within its timeout, and says why it failed; client
// is the HTTP client of an HTTP or HTTPS check.
func (p *Prober) run(ctx context.Context, t Target, client *tlsClient) error {
	ctx, cancel := context.WithTimeout(ctx, t.Check.Timeout)
	defer cancel()
	addr := net.JoinHostPort(t.Address, strconv.Itoa(int(t.Check.Port)))
	switch t.Check.Kind {
	case HTTP, HTTPS:
		return httpGet(ctx, t, client, addr)
	case GRPC:
		return p.grpcCheck(ctx, t, addr)
	default:
		c, err := p.dial(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	}
}

// httpGet sends one GET and judges its status. Redirects are not followed:
// a probe must not be sent on to another host.
func httpGet(ctx context.Context, t Target, tc *tlsClient, addr string) error {
	client, err := tc.get()
	if err != nil {
		return err
	}
	scheme := "http"
	if t.Check.Kind == HTTPS {
		scheme = "https"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+addr+t.Check.Path, nil)
	if err != nil {
		return err
	}
	if t.Check.ServerName != "" {
		req.Host = t.Check.ServerName
	}
	req.Header.Set("User-Agent", "backendslice-probe")
	resp, err := client.Do(req)
	if headersTooLarge(err) {
		return fmt.Errorf("%w: headers past %d bytes: %w", errTooLarge, maxProbeHeaderBytes, err)
	}
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxProbeBodyBytes))
	if !statusAccepted(t.Check.StatusCodes, resp.StatusCode) {
		return fmt.Errorf("%w: %d (accepted: %s)", errStatus, resp.StatusCode, t.Check.StatusCodes)
	}
	return nil
}

// errNoCA is a probe CA that holds no certificate.
var errNoCA = errors.New("the probe's CA holds no PEM certificate")

// tlsClient is the HTTP client of one TLS setting (server name and CA),
// shared by the targets that use it and dropped with the last of them.
// It is made on its first probe, outside the prober's lock: parsing a CA
// bundle for every probe would cost more than the probe.
type tlsClient struct {
	key   tlsKey
	dial  Dialer
	caPEM string
	// refs counts the targets that use it, under the prober's lock.
	refs int

	once   sync.Once
	client *http.Client
	err    error
}

// tlsKey is the TLS setting an HTTP client is made for: the CA by its
// digest, so that a large bundle is not hashed at every lookup.
type tlsKey struct {
	serverName string
	caDigest   [sha256.Size]byte
}

// get is the client, made on first use.
func (c *tlsClient) get() (*http.Client, error) {
	c.once.Do(func() {
		tc := &tls.Config{ServerName: c.key.serverName, MinVersion: tls.VersionTLS12}
		if c.caPEM != "" {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM([]byte(c.caPEM)) {
				c.err = errNoCA
				return
			}
			tc.RootCAs = pool
		}
		c.client = &http.Client{
			Transport: &http.Transport{
				DialContext:            c.dial,
				TLSClientConfig:        tc,
				TLSHandshakeTimeout:    probeTLSHandshakeTimeout,
				MaxResponseHeaderBytes: maxProbeHeaderBytes,
				DisableKeepAlives:      true,
				Proxy:                  nil,
			},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	})
	return c.client, c.err
}

// acquireClient is the client of c's TLS setting (caDigest is c's CA's),
// counted as used by one more target.
func (p *Prober) acquireClient(c Check, caDigest [sha256.Size]byte) *tlsClient {
	key := tlsKey{serverName: c.ServerName, caDigest: caDigest}
	tc, ok := p.clients[key]
	if !ok {
		tc = &tlsClient{key: key, dial: p.dial, caPEM: c.CAPEM}
		p.clients[key] = tc
	}
	tc.refs++
	return tc
}

// releaseClient counts one target fewer using tc (nil for checks without
// one), and forgets it when none does: the settings tenants edit away
// must not pile up.
func (p *Prober) releaseClient(tc *tlsClient) {
	if tc == nil {
		return
	}
	tc.refs--
	if tc.refs == 0 {
		delete(p.clients, tc.key)
	}
}

// targetKey is a target as a map key: its check's CA by digest. Hashing a
// Target would hash its CA bundle (up to the size of a Secret, 1 MiB)
// at every map operation, several per target in a reconcile.
type targetKey struct {
	address string
	check   checkKey
}

// checkKey is a check as a map key: its CAPEM left empty, caDigest
// standing for it.
type checkKey struct {
	check    Check
	caDigest [sha256.Size]byte
}

// keyOf is t's map key.
func (p *Prober) keyOf(t Target) targetKey {
	c := t.Check
	digest := p.caDigests.of(c.CAPEM)
	c.CAPEM = ""
	return targetKey{address: t.Address, check: checkKey{check: c, caDigest: digest}}
}

// caDigestsKept is how many CA strings caDigests remembers: a few
// reconciles running at once, each with its own copy of a CA.
const caDigestsKept = 8

// caDigests remembers the digests of the CA strings seen last, by the
// strings' identity (where their bytes are, and how many): the targets of
// one reconcile share one string, so its digest is computed once per
// reconcile and check, and a lookup never reads the bundle. Comparing by
// content would read it at each lookup. Remembering a string keeps its
// bytes alive, so no other string can take their place; at most
// caDigestsKept bundles are kept so. Used under the prober's lock.
type caDigests struct {
	recent []caDigest
}

// caDigest is a CA string and its SHA-256.
type caDigest struct {
	pem string
	sum [sha256.Size]byte
}

// of is pem's digest; zero for no CA.
func (m *caDigests) of(pem string) [sha256.Size]byte {
	if pem == "" {
		return [sha256.Size]byte{}
	}
	for _, d := range m.recent {
		if len(d.pem) == len(pem) && unsafe.StringData(d.pem) == unsafe.StringData(pem) {
			return d.sum
		}
	}
	d := caDigest{pem: pem, sum: sha256.Sum256([]byte(pem))}
	m.recent = append([]caDigest{d}, m.recent[:min(len(m.recent), caDigestsKept-1)]...)
	return d.sum
}

// DefaultStatusCodes are the codes an HTTP check accepts when its
// StatusCodes is empty, as the API's statusCodes when unset.
const DefaultStatusCodes = "200-399"

// statusAccepted tells whether code is in codes ("200-399,404");
// DefaultStatusCodes when codes is empty.
func statusAccepted(codes string, code int) bool {
	if codes == "" {
		codes = DefaultStatusCodes
	}
	for _, c := range strings.Split(codes, ",") {
		lo, hi, isRange := strings.Cut(c, "-")
		if !isRange {
			hi = lo
		}
		l, err1 := strconv.Atoi(lo)
		h, err2 := strconv.Atoi(hi)
		if err1 == nil && err2 == nil && l <= code && code <= h {
			return true
		}
	}
	return false
}

// errNotServing is a gRPC health answer other than SERVING.
var errNotServing = errors.New("not serving")

// grpcCheck asks the gRPC health service, in plaintext.
func (p *Prober) grpcCheck(ctx context.Context, t Target, addr string) error {
	conn, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return p.dial(ctx, "tcp", a) }),
		grpc.WithUserAgent("backendslice-probe"),
		grpc.WithMaxHeaderListSize(maxProbeGRPCHeaderBytes),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxProbeGRPCMessageBytes)),
		grpc.WithInitialWindowSize(probeGRPCWindowBytes),
		grpc.WithInitialConnWindowSize(probeGRPCWindowBytes),
	)
	if err != nil {
		return err
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: t.Check.GRPCService})
	if err != nil {
		return err
	}
	if s := resp.GetStatus(); s != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("%w: %s", errNotServing, s)
	}
	return nil
}
