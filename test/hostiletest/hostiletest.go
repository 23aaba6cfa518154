// Package hostiletest serves hostile peers on 127.0.0.1, for the tests and
// benchmarks that check that every read from a peer a tenant can choose is
// bounded: answers whose headers or body never end, headers that trickle,
// a TLS handshake that never ends. Each writes on the raw connection, as
// no well-behaved server would.
package hostiletest

import (
	"bufio"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Serve accepts connections on a new port of 127.0.0.1 and hands each to
// serve, until the test ends (then it closes the listener and every
// connection, and waits for serve to return); it returns the port.
func Serve(t testing.TB, serve func(net.Conn)) int32 {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			open[c] = true
			mu.Unlock()
			wg.Go(func() {
				defer func() {
					mu.Lock()
					delete(open, c)
					mu.Unlock()
					_ = c.Close()
				}()
				serve(c)
			})
		}
	})
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		for c := range open {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	a, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		t.Fatalf("listening on %v, not TCP", l.Addr())
	}
	return int32(a.Port)
}

// ReadRequest reads an HTTP/1 request's head from c, so that what is
// written next answers it; false when c ends first.
func ReadRequest(c net.Conn) bool {
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return false
		}
		if line == "\r\n" {
			return true
		}
	}
}

// WriteEndless writes head, then chunk again and again, at most limit
// bytes of chunks, as long as the peer reads (sent, when not nil, counts
// what was written), then waits for the peer to close.
func WriteEndless(c net.Conn, head, chunk string, limit int, sent *atomic.Int64) {
	if _, err := io.WriteString(c, head); err != nil {
		return
	}
	for n := 0; n < limit; n += len(chunk) {
		if _, err := io.WriteString(c, chunk); err != nil {
			return
		}
		if sent != nil {
			sent.Add(int64(len(chunk)))
		}
	}
	_, _ = io.Copy(io.Discard, c)
}

// Trickle writes head, then one byte of a header that never ends every
// every, at most n bytes, as long as the peer reads.
func Trickle(c net.Conn, head string, every time.Duration, n int, sent *atomic.Int64) {
	if _, err := io.WriteString(c, head+"X-Slow: "); err != nil {
		return
	}
	for range n {
		if _, err := io.WriteString(c, "s"); err != nil {
			return
		}
		if sent != nil {
			sent.Add(1)
		}
		time.Sleep(every)
	}
}

// Silent reads and discards what the peer sends and answers nothing: a TLS
// handshake with it never ends.
func Silent(c net.Conn) { _, _ = io.Copy(io.Discard, c) }
