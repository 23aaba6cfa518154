package dns_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/providers/dns"
)

// TestCheckConnection checks a BackendProvider's resolvers: each is asked
// once for the root's SOA, at once; any answer passes (the test servers
// are authoritative for their own zones only and refuse the root), and
// the check fails naming every resolver that sent none: one stopped (its
// port closed), one that reads queries and never answers. A resolver back
// passes again. Without a connection of its own, the controller's
// resolvers are checked.
func TestCheckConnection(t *testing.T) {
	up, down := startServer(t), startServer(t)
	silent, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = silent.Close() })
	p := newProvider(t, testOptions(up))
	conn := func(resolvers ...string) *providers.Connection {
		return &providers.Connection{Name: "resolvers", Key: "v1", Settings: &dns.Settings{Resolvers: resolvers}}
	}
	check := func(c *providers.Connection) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return p.CheckConnection(ctx, c)
	}

	if err := check(conn(up.Addr, down.Addr)); err != nil {
		t.Fatalf("both answering: %v", err)
	}
	for _, s := range []*struct {
		addr string
		n    int
	}{{up.Addr, len(up.Queries("."))}, {down.Addr, len(down.Queries("."))}} {
		if s.n != 1 {
			t.Errorf("resolver %s was asked %d time(s) for the root, want once", s.addr, s.n)
		}
	}
	if q := up.Queries("."); len(q) > 0 && q[0].Type != mdns.TypeSOA {
		t.Errorf("asked for %s, want SOA", mdns.TypeToString[q[0].Type])
	}

	if err := down.Stop(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = check(conn(up.Addr, down.Addr, silent.LocalAddr().String()))
	took := time.Since(start)
	for _, part := range []string{"2 of the 3 DNS resolver(s) of BackendProvider resolvers sent no answer",
		"resolver " + down.Addr + ": ", "refused", "resolver " + silent.LocalAddr().String() + ": no answer within " + queryTimeout.String()} {
		if err == nil || !strings.Contains(err.Error(), part) {
			t.Errorf("one stopped, one silent: %v, want it to name %q", err, part)
		}
	}
	if err != nil && strings.Contains(err.Error(), "resolver "+up.Addr) {
		t.Errorf("the answering resolver is named as failing: %v", err)
	}
	// Asked at once, not in turn: the silent one costs one query timeout.
	if took > queryTimeout+queryTimeout/2 {
		t.Errorf("the check took %s, want about one query timeout (%s)", took, queryTimeout)
	}
	t.Logf("one stopped, one silent, after %s: %v", took.Round(time.Millisecond), err)

	if err := down.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := check(conn(up.Addr, down.Addr)); err != nil {
		t.Errorf("started again: %v", err)
	}

	// The controller's own resolvers, for a provider without any.
	before := len(up.Queries("."))
	if err := check(nil); err != nil || len(up.Queries(".")) != before+1 {
		t.Errorf("the controller's own resolvers: %v, asked %d time(s)", err, len(up.Queries("."))-before)
	}
	if err := check(conn()); err == nil || !strings.Contains(err.Error(), "BackendProvider resolvers lists no DNS resolvers") {
		t.Errorf("no resolvers: %v", err)
	}
}
