package netlab

import (
	"bufio"
	"context"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// machineState is what the lab promises never to change in the machine's
// own namespace: its links, addresses, routes and nftables.
func machineState(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, args := range [][]string{
		{"ip", "-o", "link", "show"}, {"ip", "-o", "addr", "show"},
		{"ip", "route", "show", "table", "all"}, {"ip", "-6", "route", "show", "table", "all"},
		{"nft", "list", "ruleset"},
	} {
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
		b.WriteString(strings.Join(args, " ") + "\n" + string(out))
	}
	return b.String()
}

// tcpHosts adds a host of each name to lab, each serving TCP on port.
func tcpHosts(t *testing.T, lab *Lab, port int, names ...string) []*Host {
	t.Helper()
	var hosts []*Host
	for _, name := range names {
		h, err := lab.AddHost(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.ServeTCP(port); err != nil {
			t.Fatal(err)
		}
		hosts = append(hosts, h)
	}
	return hosts
}

// namespaces lists the lab namespaces of this machine.
func namespaces(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], namePrefix) {
			names = append(names, f[0])
		}
	}
	return names
}

// TestLabConnectsAndLeavesNoTrace: the node reaches its hosts on both
// families, a stopped server refuses, and Close removes every namespace
// while the machine's own links, routes and nftables stay as they were.
func TestLabConnectsAndLeavesNoTrace(t *testing.T) {
	before := machineState(t)
	nsBefore := len(namespaces(t))
	lab, err := New(t.Logf, netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("2001:db8:5::/112"))
	if err != nil {
		t.Fatal(err)
	}
	defer lab.Close()
	hosts := tcpHosts(t, lab, 7000, "one", "two")
	if got := len(namespaces(t)) - nsBefore; got != 3 {
		t.Errorf("%d new namespaces, want 3 (the node and two hosts)", got)
	}
	for _, h := range hosts {
		for _, addr := range []netip.Addr{h.Addr4, h.Addr6} {
			if !IsDocumentation(netip.PrefixFrom(addr, addr.BitLen())) {
				t.Errorf("host %s has %s, not a documentation address", h.Name, addr)
			}
			if got := nameAt(t, lab, HostPort(addr.String(), 7000)); got != h.Name {
				t.Errorf("%s answered %q, want %q", addr, got, h.Name)
			}
		}
	}
	if err := hosts[0].Stop("tcp", 7000); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if c, err := lab.Node.Dial(ctx, "tcp", HostPort(hosts[0].Addr4.String(), 7000)); err == nil {
		c.Close()
		t.Error("a stopped server still accepted a connection")
	}
	if err := lab.Close(); err != nil {
		t.Fatal(err)
	}
	if n := len(namespaces(t)); n != nsBefore {
		t.Errorf("%d lab namespaces after Close, want %d", n, nsBefore)
	}
	if after := machineState(t); after != before {
		t.Errorf("the machine's own namespace changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// nameAt connects from the node to addr and reads the first line.
func nameAt(t *testing.T, lab *Lab, addr string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := lab.Node.Dial(ctx, "tcp", addr)
	if err != nil {
		t.Fatalf("connecting to %s from the node: %v", addr, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("reading from %s: %v", addr, err)
	}
	// The server echoes what it is sent.
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		t.Fatal(err)
	}
	if echo, err := r.ReadString('\n'); err != nil || echo != "ping\n" {
		t.Fatalf("echo from %s: %q, %v", addr, echo, err)
	}
	return strings.TrimSpace(line)
}

// TestNewRemovesNamespacesOfDeadProcesses: a namespace left by a test
// process that was killed (its pid gone) is removed by the next New; one of
// a live process is not.
func TestNewRemovesNamespacesOfDeadProcesses(t *testing.T) {
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	left := namePrefix + strconv.Itoa(dead.Process.Pid) + "-test-node"
	live := namePrefix + "1-test-node" // pid 1 is always alive
	for _, n := range []string{left, live} {
		if err := ip("netns", "add", n); err != nil {
			t.Fatal(err)
		}
	}
	defer func() { _ = ip("netns", "delete", live) }()
	lab, err := New(t.Logf)
	if err != nil {
		_ = ip("netns", "delete", left)
		t.Fatal(err)
	}
	defer lab.Close()
	names := strings.Join(namespaces(t), " ")
	if strings.Contains(names, left) {
		_ = ip("netns", "delete", left)
		t.Errorf("%s, left by dead process %d, is still there", left, dead.Process.Pid)
	}
	if !strings.Contains(names, live) {
		t.Errorf("%s, of a live process, was removed", live)
	}
}

func TestNewRefusesRangesOutsideDocumentation(t *testing.T) {
	for _, r := range []string{"10.96.0.0/24", "192.0.0.0/16", "fd00::/112", "2001:db0::/28"} {
		if lab, err := New(t.Logf, netip.MustParsePrefix(r)); err == nil {
			lab.Close()
			t.Errorf("New accepted service range %s", r)
		}
	}
}

// TestCapture: a capture reads the node namespace's ruleset and conntrack
// entries, not the machine's, and changes neither; without kube-proxy it
// says so.
func TestCapture(t *testing.T) {
	before := machineState(t)
	lab, err := New(t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer lab.Close()
	hosts := tcpHosts(t, lab, 7000, "one", "two")
	h, other := hosts[0], hosts[1]
	// A table of the node's own, with a rule that makes the node track
	// connections (conntrack runs in a namespace only where a rule needs it).
	for _, args := range [][]string{
		{"add", "table", "inet", "capturetest"},
		{"add", "chain", "inet", "capturetest", "out", "{ type filter hook output priority 0 ; }"},
		{"add", "rule", "inet", "capturetest", "out", "ct", "state", "new", "counter"},
	} {
		if out, err := lab.Node.Command("nft", args...).CombinedOutput(); err != nil {
			t.Fatalf("nft %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	at := time.Now()
	for _, h := range hosts {
		if addr := HostPort(h.Addr4.String(), 7000); nameAt(t, lab, addr) != h.Name {
			t.Fatalf("%s did not answer %s", addr, h.Name)
		}
	}
	// AskTCP closes with a reset: that connection is in CLOSE, counted;
	// nameAt's is in TIME_WAIT, listed.
	if name, err := lab.Node.AskTCP(HostPort(h.Addr4.String(), 7000), time.Second); err != nil || name != h.Name {
		t.Fatalf("AskTCP: %q, %v", name, err)
	}
	got := lab.Capture(at, h.Addr4.String())
	for _, want := range []string{"table inet capturetest", "TIME_WAIT src=" + NodeAddr4.String() + " dst=" + h.Addr4.String() + " ",
		"1 closed connections, by where they were sent: " + h.Addr4.String() + " 1\n",
		"no kube-proxy runs in the lab"} {
		if !strings.Contains(got, want) {
			t.Errorf("the capture lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, other.Addr4.String()+" ") {
		t.Errorf("the capture holds the entries of %s, which it was not asked for:\n%s", other.Addr4, got)
	}
	lab.Close()
	if after := machineState(t); after != before {
		t.Errorf("the machine's state changed:\n%s\nwas:\n%s", after, before)
	}
}

// TestLogWindow: the window starts at the first line logged at or after
// its start, and keeps the lines without a time that follow a kept one.
func TestLogWindow(t *testing.T) {
	path := t.TempDir() + "/kube-proxy.log"
	day := time.Now().Format("0102")
	log := "I" + day + " 10:00:00.000000       1 proxier.go:1] \"old sync\"\n" +
		"I" + day + " 10:00:01.500000       1 proxier.go:2] \"Running nftables transaction\" transaction=<\n" +
		"\tadd rule ip kube-proxy services ...\n" +
		" >\n" +
		"E" + day + " 10:00:02.000000       1 proxier.go:3] \"nftables sync failed\"\n"
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	y, m, d := time.Now().Date()
	got, err := logWindow(path, time.Date(y, m, d, 10, 0, 1, 0, time.Local))
	if err != nil {
		t.Fatal(err)
	}
	want := strings.SplitAfterN(log, "\n", 2)[1]
	if got != want {
		t.Errorf("window:\n%s\nwant:\n%s", got, want)
	}
}
