// Package probe checks endpoints from the controller (TCP, HTTP(S) and the
// gRPC health protocol) for backends whose sources say nothing of their
// health. One Prober serves every backend: a target (an address and what to
// check there) asked for by two backends is probed once, probes run on a
// bounded pool with jitter, and only a verdict that changes wakes the
// backends that use it.
package probe

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
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

// run probes t once within its timeout, and says why it failed.
func (p *Prober) run(ctx context.Context, t Target) error {
	ctx, cancel := context.WithTimeout(ctx, t.Check.Timeout)
	defer cancel()
	addr := net.JoinHostPort(t.Address, strconv.Itoa(int(t.Check.Port)))
	switch t.Check.Kind {
	case HTTP, HTTPS:
		return p.httpGet(ctx, t, addr)
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
func (p *Prober) httpGet(ctx context.Context, t Target, addr string) error {
	client, err := p.httpClient(t.Check)
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
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	if !statusAccepted(t.Check.StatusCodes, resp.StatusCode) {
		return fmt.Errorf("%w: %d (accepted: %s)", errStatus, resp.StatusCode, t.Check.StatusCodes)
	}
	return nil
}

// httpClient is the client of one TLS setting, made once: parsing a CA
// bundle for every probe would cost more than the probe.
func (p *Prober) httpClient(c Check) (*http.Client, error) {
	key := tlsKey{serverName: c.ServerName, ca: c.CAPEM}
	p.clientsMu.Lock()
	defer p.clientsMu.Unlock()
	if hc, ok := p.clients[key]; ok {
		return hc, nil
	}
	tc := &tls.Config{ServerName: c.ServerName, MinVersion: tls.VersionTLS12}
	if c.CAPEM != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(c.CAPEM)) {
			return nil, errors.New("the probe's CA holds no PEM certificate")
		}
		tc.RootCAs = pool
	}
	hc := &http.Client{
		Transport: &http.Transport{
			DialContext:       p.dial,
			TLSClientConfig:   tc,
			DisableKeepAlives: true,
			Proxy:             nil,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	p.clients[key] = hc
	return hc, nil
}

// tlsKey is the TLS setting an HTTP client is made for.
type tlsKey struct{ serverName, ca string }

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
