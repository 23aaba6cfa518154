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
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/backendslice/backendslice/test/netlab"
)

// Ports of the servers of TestChecks.
const (
	tcpPort     = 7000
	stoppedPort = 7001
	httpPort    = 8080
	httpsPort   = 8443
	grpcPort    = 50051
)

// TestChecks runs one probe of each kind against real servers in the lab,
// dialled from the node namespace as the controller's Pod would.
func TestChecks(t *testing.T) {
	lab := newLab(t)
	a := addHost(t, lab, "a")
	b := addHost(t, lab, "b")

	if err := a.ServeTCP(tcpPort); err != nil {
		t.Fatal(err)
	}
	if err := a.ServeTCP(stoppedPort); err != nil {
		t.Fatal(err)
	}
	if err := a.Stop("tcp", stoppedPort); err != nil {
		t.Fatal(err)
	}

	// b counts what reaches it: a redirect from a must not.
	var landed atomic.Int64
	serveHTTP(t, b, httpPort, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { landed.Add(1) }), nil)
	elsewhere := "http://" + netlab.HostPort(b.Addr4.String(), httpPort) + "/landed"

	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("/fail", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "broken", http.StatusInternalServerError)
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere, http.StatusFound)
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(2 * time.Second):
		case <-r.Context().Done():
		}
	})
	serveHTTP(t, a, httpPort, mux, nil)

	pki := newPKI(t, "db.test")
	serveHTTP(t, a, httpsPort, mux, &tls.Config{Certificates: []tls.Certificate{pki.server}, MinVersion: tls.VersionTLS12})

	hs := serveGRPC(t, a, grpcPort)
	hs.SetServingStatus("db", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("cache", healthpb.HealthCheckResponse_NOT_SERVING)

	tcp := Check{Kind: TCP, Port: tcpPort, Timeout: time.Second}
	stopped := tcp
	stopped.Port = stoppedPort
	web := Check{Kind: HTTP, Port: httpPort, Path: "/ok", StatusCodes: "200-399", Timeout: time.Second}
	with := func(c Check, f func(*Check)) Check {
		f(&c)
		return c
	}
	secure := with(web, func(c *Check) { c.Kind, c.Port, c.ServerName, c.CAPEM = HTTPS, httpsPort, "db.test", pki.caPEM })
	rpc := Check{Kind: GRPC, Port: grpcPort, GRPCService: "db", Timeout: time.Second}

	v4, v6 := a.Addr4.String(), a.Addr6.String()
	isHostname := func(err error) bool {
		var h x509.HostnameError
		return errors.As(err, &h)
	}
	isUnknownCA := func(err error) bool {
		var u x509.UnknownAuthorityError
		var s x509.SystemRootsError
		return errors.As(err, &u) || errors.As(err, &s)
	}
	cases := []struct {
		name   string
		target Target
		pass   bool
		// why, when set, must say why a failing probe failed.
		why     func(error) bool
		whyName string
		// within bounds how long the probe may take.
		within time.Duration
		// failure is the category a failing probe is counted and logged as.
		failure Failure
	}{
		{name: "tcp open", target: Target{v4, tcp}, pass: true},
		{name: "tcp open ipv6", target: Target{v6, tcp}, pass: true},
		{name: "tcp stopped port", target: Target{v4, stopped},
			why: errorIs(syscall.ECONNREFUSED), whyName: "connection refused", failure: FailureRefused},
		{name: "http on a stopped port", target: Target{v4, with(web, func(c *Check) { c.Port = stoppedPort })},
			why: errorIs(syscall.ECONNREFUSED), whyName: "connection refused", failure: FailureRefused},
		{name: "http 200", target: Target{v4, web}, pass: true},
		{name: "http 200 ipv6", target: Target{v6, web}, pass: true},
		{name: "http 200 codes unset mean 200-399", target: Target{v4, with(web, func(c *Check) { c.StatusCodes = "" })}, pass: true},
		{name: "http 500", target: Target{v4, with(web, func(c *Check) { c.Path = "/fail" })},
			why: errorIs(errStatus), whyName: "status not accepted", failure: FailureStatus},
		{name: "http 404", target: Target{v4, with(web, func(c *Check) { c.Path = "/missing" })},
			why: errorIs(errStatus), whyName: "status not accepted", failure: FailureStatus},
		{name: "http 500 accepted by its codes", target: Target{v4, with(web, func(c *Check) { c.Path, c.StatusCodes = "/fail", "200-399,500" })}, pass: true},
		{name: "http 302 elsewhere judged as 302, accepted", target: Target{v4, with(web, func(c *Check) { c.Path = "/redirect" })}, pass: true},
		{name: "http 302 elsewhere judged as 302, not accepted", target: Target{v4, with(web, func(c *Check) { c.Path, c.StatusCodes = "/redirect", "200" })},
			why: errorIs(errStatus), whyName: "status not accepted", failure: FailureStatus},
		{name: "https db.test signed by the CA", target: Target{v4, secure}, pass: true},
		{name: "https db.test signed by the CA ipv6", target: Target{v6, secure}, pass: true},
		{name: "https name mismatch", target: Target{v4, with(secure, func(c *Check) { c.ServerName = "other.test" })},
			why: isHostname, whyName: "x509.HostnameError", failure: FailureTLS},
		// The first probe with the system's roots loads them: slow under
		// the race detector, hence the longer timeout.
		{name: "https system roots", target: Target{v4, with(secure, func(c *Check) { c.CAPEM, c.Timeout = "", 10*time.Second })},
			why: isUnknownCA, whyName: "unknown authority", failure: FailureTLS},
		{name: "https bad CA PEM", target: Target{v4, with(secure, func(c *Check) { c.CAPEM = "not a certificate" })}, failure: FailureConfig},
		// net/http says so in a plain error: the category is "other".
		{name: "https to a plain HTTP server", target: Target{v4, with(secure, func(c *Check) { c.Port = httpPort })}, failure: FailureOther},
		{name: "grpc SERVING", target: Target{v4, rpc}, pass: true},
		{name: "grpc SERVING ipv6", target: Target{v6, rpc}, pass: true},
		{name: "grpc server overall", target: Target{v4, with(rpc, func(c *Check) { c.GRPCService = "" })}, pass: true},
		{name: "grpc NOT_SERVING", target: Target{v4, with(rpc, func(c *Check) { c.GRPCService = "cache" })},
			why: errorIs(errNotServing), whyName: "not serving", failure: FailureNotServing},
		{name: "grpc unknown service", target: Target{v4, with(rpc, func(c *Check) { c.GRPCService = "nothing" })}, failure: FailureNotServing},
		{name: "grpc on a stopped port", target: Target{v4, with(rpc, func(c *Check) { c.Port = stoppedPort })}, failure: FailureUnavailable},
		{name: "http slow answer times out", target: Target{v4, with(web, func(c *Check) { c.Path, c.Timeout = "/slow", 200*time.Millisecond })},
			why: errorIs(context.DeadlineExceeded), whyName: "deadline exceeded", within: 1500 * time.Millisecond, failure: FailureTimeout},
	}
	p := New(Options{Dial: lab.Node.Dial})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			began := time.Now()
			client := p.acquireClient(tc.target.Check, p.keyOf(tc.target).check.caDigest)
			err := p.run(context.Background(), tc.target, client)
			took := time.Since(began)
			switch {
			case tc.pass && err != nil:
				t.Errorf("%s: want pass, got %v", tc.target, err)
			case !tc.pass && err == nil:
				t.Errorf("%s: want fail, got pass", tc.target)
			case !tc.pass && tc.why != nil && !tc.why(err):
				t.Errorf("%s: want a failure of %s, got %v", tc.target, tc.whyName, err)
			case !tc.pass && failureOf(err) != tc.failure:
				t.Errorf("%s: failure %q (%v), want %q", tc.target, failureOf(err), err, tc.failure)
			}
			if tc.within > 0 && took >= tc.within {
				t.Errorf("%s: took %v, want under %v", tc.target, took, tc.within)
			}
			t.Logf("%s: %v in %v", tc.target, err, took.Round(time.Millisecond))
		})
	}
	if n := landed.Load(); n != 0 {
		t.Errorf("the host a redirect named got %d requests, want 0: redirects must not be followed", n)
	}
}

// TestFailureOf: errors as the dialer, TLS, HTTP and gRPC stacks wrap
// them fall in one category each, and an unknown error in "other".
func TestFailureOf(t *testing.T) {
	dial := func(errno syscall.Errno) error {
		return &url.Error{Op: "Get", URL: "http://192.0.2.1/", Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", errno)}}
	}
	for _, c := range []struct {
		name string
		err  error
		want Failure
	}{
		{"pass", nil, ""},
		{"refused", dial(syscall.ECONNREFUSED), FailureRefused},
		{"host unreachable", dial(syscall.EHOSTUNREACH), FailureUnreachable},
		{"network unreachable", dial(syscall.ENETUNREACH), FailureUnreachable},
		{"reset", dial(syscall.ECONNRESET), FailureReset},
		{"closed before an answer", &url.Error{Op: "Get", Err: io.EOF}, FailureReset},
		{"dial timeout", &net.OpError{Op: "dial", Err: os.ErrDeadlineExceeded}, FailureTimeout},
		{"context deadline", fmt.Errorf("get: %w", context.DeadlineExceeded), FailureTimeout},
		{"status", fmt.Errorf("%w: %d", errStatus, 503), FailureStatus},
		{"unknown authority", &url.Error{Err: &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}}, FailureTLS},
		{"tls alert", &url.Error{Err: tls.AlertError(40)}, FailureTLS},
		{"not TLS", &url.Error{Err: tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}}, FailureTLS},
		{"no CA", errNoCA, FailureConfig},
		{"headers past the bound", fmt.Errorf("%w: headers: %w", errTooLarge, errors.New("net/http: server response headers exceeded 16384 bytes; aborted")), FailureTooLarge},
		{"grpc message past the bound", status.Error(codes.ResourceExhausted, "grpc: received message larger than max (4194309 vs. 1024)"), FailureTooLarge},
		{"grpc headers past the bound", status.Error(codes.Internal, "peer header list size exceeded limit"), FailureTooLarge},
		{"grpc not serving", fmt.Errorf("%w: NOT_SERVING", errNotServing), FailureNotServing},
		{"grpc unknown service", status.Error(codes.NotFound, "unknown service"), FailureNotServing},
		{"grpc unavailable", status.Error(codes.Unavailable, "connection refused"), FailureUnavailable},
		{"grpc deadline", status.Error(codes.DeadlineExceeded, "deadline"), FailureTimeout},
		{"anything else", errors.New("something"), FailureOther},
	} {
		if got := failureOf(c.err); got != c.want {
			t.Errorf("%s: failureOf(%v) = %q, want %q", c.name, c.err, got, c.want)
		}
	}
}

// TestFailureDetailOnlyInTheLog: when a verdict changes, the controller's
// log at V(1) says why (the category, and the error with the code); the
// prober gives its callers nothing but the verdict.
func TestFailureDetailOnlyInTheLog(t *testing.T) {
	lab := newLab(t)
	h := addHost(t, lab, "a")
	serveHTTP(t, h, httpPort, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusTeapot)
	}), nil)
	var mu sync.Mutex
	var lines []string
	logger := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, args)
	}, funcr.Options{Verbosity: 1})
	p := New(Options{Dial: lab.Node.Dial, Waker: &fakeWaker{}})
	startIn(log.IntoContext(context.Background(), logger), t, p)
	target := Target{h.Addr4.String(), Check{Kind: HTTP, Port: httpPort, Path: "/", Period: 100 * time.Millisecond,
		Timeout: 50 * time.Millisecond, FailureThreshold: 1, SuccessThreshold: 1, InitialReady: true}}
	p.Sync(types.NamespacedName{Namespace: "default", Name: "db"}, []Target{target})
	logged := func() string {
		mu.Lock()
		defer mu.Unlock()
		for _, l := range lines {
			if strings.Contains(l, "probe verdict changed") {
				return l
			}
		}
		return ""
	}
	if !waitFor(5*time.Second, func() bool { return logged() != "" }) {
		t.Fatalf("no verdict change logged at V(1); lines %q", lines)
	}
	for _, want := range []string{`"failure"="status"`, "418", `"ready"=false`} {
		if !strings.Contains(logged(), want) {
			t.Errorf("log %q does not say %s", logged(), want)
		}
	}
	if passing, known := p.Passing(target), tracked(p, target); passing || !known {
		t.Errorf("passing=%v tracked=%v, want a tracked failure", passing, known)
	}
}

// TestRecordThresholds walks the threshold state machine.
func TestRecordThresholds(t *testing.T) {
	const (
		P = true
		F = false
	)
	cases := []struct {
		name    string
		initial bool
		results []bool
		// changed says which results flip the verdict; ready is the
		// verdict after each.
		changed []bool
		ready   []bool
	}{
		{"ready, three failures take it out", true,
			[]bool{F, F, F}, []bool{F, F, true}, []bool{P, P, F}},
		{"ready, a pass resets the failures", true,
			[]bool{F, F, P, F, F, F}, []bool{F, F, F, F, F, true}, []bool{P, P, P, P, P, F}},
		{"ready, passes change nothing", true,
			[]bool{P, P, P}, []bool{F, F, F}, []bool{P, P, P}},
		{"ready, failures past the threshold change nothing more", true,
			[]bool{F, F, F, F, F}, []bool{F, F, true, F, F}, []bool{P, P, F, F, F}},
		{"not ready, two passes bring it in", false,
			[]bool{P, P}, []bool{F, true}, []bool{F, P}},
		{"not ready, a failure resets the passes", false,
			[]bool{P, F, P, P}, []bool{F, F, F, true}, []bool{F, F, F, P}},
		{"not ready, failures change nothing", false,
			[]bool{F, F, F, F}, []bool{F, F, F, F}, []bool{F, F, F, F}},
		{"not ready, in, then out", false,
			[]bool{P, P, F, F, F}, []bool{F, true, F, F, true}, []bool{F, P, P, P, F}},
		{"ready, out, back, one failure changes nothing", true,
			[]bool{F, F, F, P, P, P, F, F}, []bool{F, F, true, F, true, F, F, F}, []bool{P, P, F, F, P, P, P, P}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := &entry{
				target: Target{Address: "192.0.2.10", Check: Check{Kind: TCP, SuccessThreshold: 2, FailureThreshold: 3, InitialReady: tc.initial}},
				ready:  tc.initial,
			}
			for i, pass := range tc.results {
				changed := e.record(pass)
				if changed != tc.changed[i] || e.ready != tc.ready[i] {
					t.Errorf("result %d (pass=%v): changed=%v ready=%v, want changed=%v ready=%v",
						i+1, pass, changed, e.ready, tc.changed[i], tc.ready[i])
				}
			}
		})
	}
}

// TestStatusAccepted judges codes against lists of codes and ranges.
func TestStatusAccepted(t *testing.T) {
	cases := []struct {
		codes string
		code  int
		want  bool
	}{
		{"200-399", 200, true},
		{"200-399", 302, true},
		{"200-399", 399, true},
		{"200-399", 199, false},
		{"200-399", 400, false},
		{"200-399", 500, false},
		{"200-399,404", 404, true},
		{"200-399,404", 403, false},
		{"200-399,404", 405, false},
		{"200", 200, true},
		{"200", 302, false},
		{"200,302", 302, true},
		{"404,200-299", 204, true},
		{"500-599", 503, true},
		{"399-200", 300, false},
		{"abc", 200, false},
		{"200-", 200, false},
		{"-200", 200, false},
		// Unset codes are the API's default, 200-399.
		{"", 200, true},
		{"", 399, true},
		{"", 404, false},
	}
	for _, tc := range cases {
		if got := statusAccepted(tc.codes, tc.code); got != tc.want {
			t.Errorf("statusAccepted(%q, %d) = %v, want %v", tc.codes, tc.code, got, tc.want)
		}
	}
}

// TestProberFollowsAServer stops and restarts a server under a running
// Prober: the verdict follows it, and each change wakes the backend once.
func TestProberFollowsAServer(t *testing.T) {
	lab := newLab(t)
	h := addHost(t, lab, "a")
	if err := h.ServeTCP(tcpPort); err != nil {
		t.Fatal(err)
	}
	w := &fakeWaker{}
	p := New(Options{Dial: lab.Node.Dial, Waker: w})
	start(t, p)

	target := Target{Address: h.Addr4.String(), Check: Check{
		Kind: TCP, Port: tcpPort, Period: 100 * time.Millisecond, Timeout: 50 * time.Millisecond,
		FailureThreshold: 3, SuccessThreshold: 2, InitialReady: true,
	}}
	backend := types.NamespacedName{Namespace: "default", Name: "db"}
	p.Sync(backend, []Target{target})
	verdict := func() bool { return p.Passing(target) }

	// A few periods of passes: ready, as it started, and no wake.
	time.Sleep(400 * time.Millisecond)
	if passing, known := p.Passing(target), tracked(p, target); !passing || !known {
		t.Fatalf("verdict of a served port: passing=%v tracked=%v, want passing", passing, known)
	}
	if n := w.total(); n != 0 {
		t.Fatalf("%d wakes while nothing changed, want 0", n)
	}

	if err := h.Stop("tcp", tcpPort); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	if !waitFor(5*time.Second, func() bool { return !verdict() && w.count(backend) >= 1 }) {
		t.Fatalf("5s after the server stopped: ready=%v, wakes=%d; want not ready and a wake", verdict(), w.count(backend))
	}
	t.Logf("not ready %v after the server stopped", time.Since(stopped).Round(time.Millisecond))
	if n, all := w.count(backend), w.total(); n != 1 || all != 1 {
		t.Errorf("after the server stopped: %d wakes for %s, %d in all; want exactly 1", n, backend, all)
	}

	if err := h.ServeTCP(tcpPort); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	if !waitFor(5*time.Second, func() bool { return verdict() && w.count(backend) >= 2 }) {
		t.Fatalf("5s after the server restarted: ready=%v, wakes=%d; want ready and a second wake", verdict(), w.count(backend))
	}
	t.Logf("ready %v after the server restarted", time.Since(restarted).Round(time.Millisecond))
	if n, all := w.count(backend), w.total(); n != 2 || all != 2 {
		t.Errorf("after the server restarted: %d wakes for %s, %d in all; want exactly 2", n, backend, all)
	}

	// Nothing changes: no more wakes.
	time.Sleep(time.Second)
	if n := w.total(); n != 2 {
		t.Errorf("%d wakes in all after a quiet second, want still 2", n)
	}
	if !verdict() {
		t.Errorf("not ready during a quiet second with the server up")
	}
}

// TestSharedTargetProbedOnce has two backends ask for one target: it is
// probed once a period, not once per backend, until neither uses it.
func TestSharedTargetProbedOnce(t *testing.T) {
	lab := newLab(t)
	h := addHost(t, lab, "a")
	var requests atomic.Int64
	serveHTTP(t, h, httpPort, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { requests.Add(1) }), nil)

	const period = 200 * time.Millisecond
	target := Target{Address: h.Addr4.String(), Check: Check{
		Kind: HTTP, Port: httpPort, Path: "/", StatusCodes: "200-399",
		Period: period, Timeout: 100 * time.Millisecond,
		FailureThreshold: 3, SuccessThreshold: 1, InitialReady: true,
	}}
	p := New(Options{Dial: lab.Node.Dial, Waker: &fakeWaker{}})
	start(t, p)
	b1 := types.NamespacedName{Namespace: "default", Name: "one"}
	b2 := types.NamespacedName{Namespace: "other", Name: "two"}
	p.Sync(b1, []Target{target})
	p.Sync(b2, []Target{target})

	const over = 2 * time.Second
	time.Sleep(over)
	n := requests.Load()
	t.Logf("%d requests in %v at a period of %v", n, over, period)
	if most := int64(over/period) + 2; n > most {
		t.Errorf("%d requests in %v, want at most %d: a shared target must be probed once a period", n, over, most)
	}
	if n < 3 {
		t.Errorf("%d requests in %v, want at least 3", n, over)
	}

	// Backend 2 still uses it.
	p.Sync(b1, nil)
	before := requests.Load()
	time.Sleep(600 * time.Millisecond)
	if got := requests.Load() - before; got < 1 {
		t.Errorf("%d requests in 600ms after one of two backends left, want the target still probed", got)
	}
	if !tracked(p, target) {
		t.Errorf("the target has no verdict while backend 2 still uses it")
	}

	// No one does.
	p.Sync(b2, nil)
	before = requests.Load()
	time.Sleep(600 * time.Millisecond)
	if got := requests.Load() - before; got > 1 {
		t.Errorf("%d requests in 600ms after the last backend left, want at most 1 (one in flight)", got)
	}
	if tracked(p, target) {
		t.Errorf("the target still has a verdict after the last backend left")
	}
}

// TestMetricsHaveNoEndpointLabels runs probes with metrics and checks that
// no metric is labelled by address, port or backend.
func TestMetricsHaveNoEndpointLabels(t *testing.T) {
	lab := newLab(t)
	h := addHost(t, lab, "a")
	if err := h.ServeTCP(tcpPort); err != nil {
		t.Fatal(err)
	}
	if err := h.ServeHTTP(httpPort); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	p := New(Options{Dial: lab.Node.Dial, Waker: &fakeWaker{}, Metrics: m})
	start(t, p)

	base := Check{Period: 100 * time.Millisecond, Timeout: 50 * time.Millisecond, FailureThreshold: 1, SuccessThreshold: 1, InitialReady: true}
	tcp, refused, web := base, base, base
	tcp.Kind, tcp.Port = TCP, tcpPort
	refused.Kind, refused.Port = TCP, stoppedPort
	web.Kind, web.Port, web.Path, web.StatusCodes = HTTP, httpPort, "/", "200-399"
	addr := h.Addr4.String()
	p.Sync(types.NamespacedName{Namespace: "default", Name: "db"}, []Target{{addr, tcp}, {addr, refused}, {addr, web}})

	results := func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var sum float64
		for _, mf := range mfs {
			if mf.GetName() == "backendslice_probe_results_total" {
				for _, m := range mf.GetMetric() {
					sum += m.GetCounter().GetValue()
				}
			}
		}
		return sum
	}
	if !waitFor(5*time.Second, func() bool { return results() >= 9 }) {
		t.Fatalf("%v probe results in 5s, want at least 9", results())
	}

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{"kind": true, "result": true, "reason": true}
	seen := map[string]bool{}
	values := map[string]bool{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "backendslice_probe_") {
			continue
		}
		seen[mf.GetName()] = true
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if !allowed[l.GetName()] {
					t.Errorf("%s has label %s=%q; want only kind, result and reason", mf.GetName(), l.GetName(), l.GetValue())
				}
				if strings.Contains(l.GetValue(), addr) || strings.Contains(l.GetValue(), "db") {
					t.Errorf("%s has label %s=%q, which names an endpoint or backend", mf.GetName(), l.GetName(), l.GetValue())
				}
				values[l.GetName()+"="+l.GetValue()] = true
			}
		}
	}
	for _, name := range []string{
		"backendslice_probe_results_total", "backendslice_probe_failures_total", "backendslice_probe_duration_seconds",
		"backendslice_probe_lateness_seconds", "backendslice_probe_targets",
	} {
		if !seen[name] {
			t.Errorf("metric %s not gathered", name)
		}
	}
	for _, v := range []string{"kind=tcp", "kind=http", "result=pass", "result=fail", "reason=refused"} {
		if !values[v] {
			t.Errorf("no probe metric labelled %s; got %v", v, values)
		}
	}
}

// tracked tells whether p probes t for some backend.
func tracked(p *Prober, t Target) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.entries[p.keyOf(t)]
	return ok
}
