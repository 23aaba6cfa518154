package probe

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/backendslice/backendslice/test/netlab"
)

// newLab makes a lab for one test and removes it when the test ends. A lab
// that cannot be made fails the test: the probes are tested on real
// connections or not at all.
func newLab(t *testing.T) *netlab.Lab {
	t.Helper()
	lab, err := netlab.New(t.Logf)
	if err != nil {
		t.Fatalf("netlab (needs root and `ip netns`): %v", err)
	}
	t.Cleanup(func() {
		if err := lab.Close(); err != nil {
			t.Errorf("closing the lab: %v", err)
		}
	})
	return lab
}

// addHost adds a backend host to lab.
func addHost(t *testing.T, lab *netlab.Lab, name string) *netlab.Host {
	t.Helper()
	h, err := lab.AddHost(name)
	if err != nil {
		t.Fatalf("adding host %s: %v", name, err)
	}
	return h
}

// listen opens a listener on port, on every address of h.
func listen(t *testing.T, h *netlab.Host, port int) net.Listener {
	t.Helper()
	l, err := h.Namespace().Listen("tcp", ":"+strconv.Itoa(port))
	if err != nil {
		t.Fatalf("listening on %s:%d: %v", h.Name, port, err)
	}
	return l
}

// serveHTTP serves handler on port of h, over TLS when tc is set, until the
// test ends.
func serveHTTP(t *testing.T, h *netlab.Host, port int, handler http.Handler, tc *tls.Config) {
	t.Helper()
	l := listen(t, h, port)
	if tc != nil {
		l = tls.NewListener(l, tc)
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 5 * time.Second,
		// The probes' failed handshakes are expected; keep them out of the
		// test's output.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(l)
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
}

// serveGRPC serves the gRPC health protocol on port of h until the test
// ends, and returns its health server to set statuses with.
func serveGRPC(t *testing.T, h *netlab.Host, port int) *health.Server {
	t.Helper()
	l := listen(t, h, port)
	srv := grpc.NewServer()
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	runGRPC(t, srv, l)
	return hs
}

// runGRPC serves srv on l until the test ends.
func runGRPC(t *testing.T, srv *grpc.Server, l net.Listener) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(l)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
}

// testPKI is a CA and a server certificate it signed.
type testPKI struct {
	caPEM  string
	server tls.Certificate
}

// newPKI makes a CA and a certificate for names, valid for an hour.
func newPKI(t testing.TB, names ...string) testPKI {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "backendslice probe test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: names[0]},
		DNSNames:     names,
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return testPKI{
		caPEM:  string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})),
		server: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key},
	}
}

// fakeWaker records the wakes it gets.
type fakeWaker struct {
	mu    sync.Mutex
	wakes []types.NamespacedName
}

func (w *fakeWaker) Wake(b types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.wakes = append(w.wakes, b)
}

// count is how many wakes came for b.
func (w *fakeWaker) count(b types.NamespacedName) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, x := range w.wakes {
		if x == b {
			n++
		}
	}
	return n
}

// total is how many wakes came in all.
func (w *fakeWaker) total() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.wakes)
}

// start runs p until the test ends, and fails the test if Start does not
// return within 5 s of its context ending.
func start(t *testing.T, p *Prober) {
	t.Helper()
	startIn(context.Background(), t, p)
}

// startIn is start with a parent context (carrying a logger).
func startIn(parent context.Context, t *testing.T, p *Prober) {
	t.Helper()
	ctx, cancel := context.WithCancel(parent)
	errc := make(chan error, 1)
	go func() { errc <- p.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-errc:
			if err != nil {
				t.Errorf("Start: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("Start did not return within 5s of its context ending")
		}
	})
}

// waitFor polls cond every 20 ms until it holds or within has passed, and
// says whether it held.
func waitFor(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// errorIs returns a matcher of errors wrapping target.
func errorIs(target error) func(error) bool {
	return func(err error) bool { return errors.Is(err, target) }
}
