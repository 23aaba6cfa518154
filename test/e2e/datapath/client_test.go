package datapath_test

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/backendslice/backendslice/test/e2e/framework"
	"github.com/backendslice/backendslice/test/netlab"
)

// dialTimeout bounds one connection attempt of a client.
const dialTimeout = time.Second

// ask opens one connection of network ("tcp", "udp" or "http") from the
// node to addr and returns the name of the host that answered.
func ask(network, addr string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	switch network {
	case "http":
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/", nil)
		if err != nil {
			return "", err
		}
		resp, err := lab.Node.HTTPClient(dialTimeout).Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 256))
		return string(body), err
	case "udp":
		c, err := lab.Node.Dial(ctx, "udp", addr)
		if err != nil {
			return "", err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(dialTimeout))
		if _, err := c.Write([]byte("who?")); err != nil {
			return "", err
		}
		buf := make([]byte, 256)
		n, err := c.Read(buf)
		return string(buf[:n]), err
	default:
		return lab.Node.AskTCP(addr, dialTimeout)
	}
}

// tally opens n connections to addr and counts them by the host that
// answered; failed attempts count under "error: <what>".
func tally(network, addr string, n int) map[string]int {
	out := map[string]int{}
	for range n {
		name, err := ask(network, addr)
		if err != nil {
			name = "error: " + netlab.ErrorKind(err)
		}
		out[name]++
	}
	return out
}

// waitReaches waits until connections to addr reach exactly the hosts
// named (each of them, and no other, with no failure) and then checks that
// a larger batch is spread over all of them: each gets at least a fifth of
// its fair share. It fails the test otherwise.
func waitReaches(t *testing.T, network, addr string, want ...string) {
	t.Helper()
	slices.Sort(want)
	framework.Eventually(t, framework.Timeout, fmt.Sprintf("%s %s reaches %v", network, addr, want), func() error {
		got := tally(network, addr, 10*len(want))
		if names := slices.Sorted(maps.Keys(got)); !slices.Equal(names, want) {
			return fmt.Errorf("reached %v", got)
		}
		return nil
	})
	const n = 150
	got := tally(network, addr, n)
	for name, count := range got {
		if !slices.Contains(want, name) {
			t.Fatalf("%s %s: %d of %d connections went to %q, want only %v (all: %v)", network, addr, count, n, name, want, got)
		}
	}
	for _, name := range want {
		if fair := n / len(want); got[name] < fair/5 {
			t.Errorf("%s %s: %s got %d of %d connections, want them spread over %v (all: %v)", network, addr, name, got[name], n, want, got)
		}
	}
}

// query asks CoreDNS in the node namespace for name and type.
func query(t *testing.T, name string, qtype uint16) *mdns.Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	c, err := lab.Node.Dial(ctx, "udp", fmt.Sprintf("127.0.0.1:%d", dnsPort))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(dialTimeout))
	conn := &mdns.Conn{Conn: c}
	if err := conn.WriteMsg(new(mdns.Msg).SetQuestion(mdns.Fqdn(name), qtype)); err != nil {
		t.Fatal(err)
	}
	resp, err := conn.ReadMsg()
	if err != nil {
		t.Fatalf("asking CoreDNS for %s %s: %v", name, mdns.TypeToString[qtype], err)
	}
	return resp
}
