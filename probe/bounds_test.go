package probe

import (
	"bytes"
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/backendslice/backendslice/test/hostiletest"
)

// portOf is the port l listens on.
func portOf(t *testing.T, l net.Listener) int32 {
	t.Helper()
	a, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		t.Fatalf("listening on %v, not TCP", l.Addr())
	}
	return int32(a.Port)
}

// countingDialer dials with net.Dialer and counts the bytes the probes
// read from every connection it opened.
type countingDialer struct{ read atomic.Int64 }

func (d *countingDialer) dial(ctx context.Context, network, address string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, read: &d.read}, nil
}

type countingConn struct {
	net.Conn
	read *atomic.Int64
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.read.Add(int64(n))
	return n, err
}

// TestHostileTargets: a target a tenant chooses answers with huge headers
// that never end, headers that trickle, a huge body, a TLS handshake that
// never ends, a huge gRPC message or gRPC headers past the bound. Each
// probe ends as soon as a bound is reached (not at its timeout) with a
// failure category that says why, and reads no more than the bound.
func TestHostileTargets(t *testing.T) {
	const tenMiB = 10 << 20
	okHead := "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
	pad := "X-Pad: " + strings.Repeat("a", 1016) + "\r\n"

	hugeHeaders := hostiletest.Serve(t, func(c net.Conn) {
		if hostiletest.ReadRequest(c) {
			hostiletest.WriteEndless(c, okHead, pad, tenMiB, nil)
		}
	})
	trickledHeaders := hostiletest.Serve(t, func(c net.Conn) {
		if hostiletest.ReadRequest(c) {
			hostiletest.Trickle(c, okHead, 50*time.Millisecond, 1000, nil)
		}
	})
	hugeBody := hostiletest.Serve(t, func(c net.Conn) {
		if hostiletest.ReadRequest(c) {
			hostiletest.WriteEndless(c, okHead+"Content-Length: "+strconv.Itoa(tenMiB)+"\r\n\r\n", strings.Repeat("b", 1024), tenMiB, nil)
		}
	})
	// A TLS server that reads the client's hello and never answers it.
	silentTLS := hostiletest.Serve(t, hostiletest.Silent)

	grpcHuge := serveGRPCHostile(t, func(stream grpc.ServerStream) error {
		return stream.SendMsg(wrapperspb.Bytes(make([]byte, 4<<20)))
	})
	// A gRPC server would not send headers past the limit the client
	// announces: this one ignores it and never ends them.
	grpcHugeHeaders := hostiletest.Serve(t, endlessHTTP2Headers)

	httpCheck := func(port int32) Check {
		return Check{Kind: HTTP, Port: port, Path: "/healthz", Timeout: 9900 * time.Millisecond}
	}
	// Read from the connection, beyond each bound: the transport's and
	// bufio's buffer (4 KiB), the HTTP/2 settings and window.
	const slack = 8 << 10
	// grpc-go reads its connection through a buffer of 32 KiB.
	const grpcReadBuffer = 32 << 10
	cases := []struct {
		name    string
		check   Check
		pass    bool
		failure Failure
		// within bounds how long the probe may take; readAtMost the bytes
		// it may read.
		within     time.Duration
		readAtMost int64
	}{
		{name: "headers of 10 MiB that never end", check: httpCheck(hugeHeaders),
			failure: FailureTooLarge, within: time.Second, readAtMost: maxProbeHeaderBytes + slack},
		{name: "headers that trickle until the timeout",
			check:   func() Check { c := httpCheck(trickledHeaders); c.Timeout = 500 * time.Millisecond; return c }(),
			failure: FailureTimeout, within: 1500 * time.Millisecond, readAtMost: slack},
		// The body is not judged: the status code passes, and the probe
		// does not wait for the rest.
		{name: "a body of 10 MiB", check: httpCheck(hugeBody), pass: true,
			within: time.Second, readAtMost: maxProbeBodyBytes + slack},
		{name: "a TLS handshake that never ends",
			check: Check{Kind: HTTPS, Port: silentTLS, Path: "/", ServerName: "db.test", Timeout: 9900 * time.Millisecond},
			// net/http's handshake timeout is a net.Error that timed out.
			failure: FailureTimeout, within: probeTLSHandshakeTimeout + 2*time.Second, readAtMost: slack},
		{name: "a gRPC answer of 4 MiB",
			check:   Check{Kind: GRPC, Port: grpcHuge, Timeout: 9900 * time.Millisecond},
			failure: FailureTooLarge, within: 2 * time.Second, readAtMost: probeGRPCWindowBytes + 2*slack},
		// The HTTP/2 framer closes the connection (PROTOCOL_ERROR) past
		// the limit, and gRPC calls that unavailable.
		{name: "gRPC headers of 10 MiB that never end",
			check:   Check{Kind: GRPC, Port: grpcHugeHeaders, Timeout: 9900 * time.Millisecond},
			failure: FailureUnavailable, within: 2 * time.Second, readAtMost: maxProbeGRPCHeaderBytes + grpcReadBuffer + slack},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := &countingDialer{}
			p := New(Options{Dial: d.dial})
			target := Target{Address: "127.0.0.1", Check: tc.check}
			var client *tlsClient
			if tc.check.Kind == HTTP || tc.check.Kind == HTTPS {
				client = p.acquireClient(tc.check, p.keyOf(target).check.caDigest)
			}
			began := time.Now()
			err := p.run(context.Background(), target, client)
			took := time.Since(began)
			switch {
			case tc.pass && err != nil:
				t.Errorf("want pass, got %v", err)
			case !tc.pass && err == nil:
				t.Errorf("want fail, got pass")
			case !tc.pass && failureOf(err) != tc.failure:
				t.Errorf("failure %q (%v), want %q", failureOf(err), err, tc.failure)
			}
			if took >= tc.within {
				t.Errorf("took %v, want under %v (the probe's timeout is %v)", took, tc.within, tc.check.Timeout)
			}
			// The connection may still be read from while it closes.
			time.Sleep(50 * time.Millisecond)
			if n := d.read.Load(); n > tc.readAtMost {
				t.Errorf("read %d bytes, want at most %d", n, tc.readAtMost)
			}
			t.Logf("%v (%s) in %v, %d bytes read", err, failureOf(err), took.Round(time.Millisecond), d.read.Load())
		})
	}
}

// endlessHTTP2Headers answers the first HTTP/2 request on c with headers
// of 10 MiB in CONTINUATION frames that never end them, regardless of the
// client's SETTINGS_MAX_HEADER_LIST_SIZE.
func endlessHTTP2Headers(c net.Conn) {
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c, preface); err != nil {
		return
	}
	fr := http2.NewFramer(c, c)
	if fr.WriteSettings() != nil {
		return
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		if h, ok := f.(*http2.HeadersFrame); ok {
			var block bytes.Buffer
			enc := hpack.NewEncoder(&block)
			_ = enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
			_ = enc.WriteField(hpack.HeaderField{Name: "content-type", Value: "application/grpc"})
			_ = enc.WriteField(hpack.HeaderField{Name: "x-pad", Value: strings.Repeat("h", 8<<10)})
			if fr.WriteHeaders(http2.HeadersFrameParam{StreamID: h.StreamID, BlockFragment: block.Bytes()}) != nil {
				return
			}
			fragment := bytes.Repeat([]byte{0}, 8<<10) // indexed fields, never a complete list
			for sent := 0; sent < 10<<20; sent += len(fragment) {
				if fr.WriteContinuation(h.StreamID, false, fragment) != nil {
					return
				}
			}
			_, _ = io.Copy(io.Discard, c)
			return
		}
	}
}

// serveGRPCHostile serves every gRPC method (the health check included)
// with handler on 127.0.0.1 until the test ends, and returns the port.
func serveGRPCHostile(t *testing.T, handler func(grpc.ServerStream) error) int32 {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		return handler(stream)
	}))
	runGRPC(t, srv, l)
	return portOf(t, l)
}
