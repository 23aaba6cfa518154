package netlab

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// The lab's address plan. Every address is in a documentation range
// (RFC 5737, RFC 3849), so no packet of the lab can reach a real network.
var (
	// Subnet4 and Subnet6 are the bridge's subnets: the node and every
	// backend host have an address in each.
	Subnet4 = netip.MustParsePrefix("192.0.2.0/24")
	Subnet6 = netip.MustParsePrefix("2001:db8:1::/64")
	// NodeAddr4 and NodeAddr6 are the node's addresses on the bridge, the
	// source of its connections to the backends.
	NodeAddr4 = netip.MustParseAddr("192.0.2.1")
	NodeAddr6 = netip.MustParseAddr("2001:db8:1::1")
)

// namePrefix starts the name of every namespace of a lab, followed by the
// process id of the test binary that made it (see sweep).
const namePrefix = "bslab"

// Lab is a node namespace and the backend hosts bridged to it.
type Lab struct {
	// Node is where kube-proxy, CoreDNS and the clients run.
	Node *Namespace

	id     string
	logf   func(format string, args ...any)
	mu     sync.Mutex
	hosts  []*Host
	procs  []*Process
	closer []func() error
	// kubeProxy is the kube-proxy KubeProxy started, for Capture.
	kubeProxy *Process
}

// New creates the node namespace with its bridge. serviceRanges are the
// cluster's Service ranges: the node routes them to the bridge, because
// connect() needs a route to a ClusterIP before kube-proxy's DNAT rewrites
// it to an endpoint. Every range must be a documentation range. logf (for
// example testing.T.Logf, or log.Printf in a TestMain) gets the harness's
// progress and its processes' failures.
func New(logf func(format string, args ...any), serviceRanges ...netip.Prefix) (*Lab, error) {
	for _, r := range serviceRanges {
		if !IsDocumentation(r) {
			return nil, fmt.Errorf("service range %s is not a documentation range: the lab routes only test addresses", r)
		}
	}
	sweep(logf)
	// A random part keeps two labs of one process apart.
	l := &Lab{id: fmt.Sprintf("%s%d-%s", namePrefix, os.Getpid(), strings.ToLower(rand.Text()[:4])), logf: logf}
	node, err := createNamespace(l.id + "-node")
	if err != nil {
		return nil, err
	}
	l.Node = node
	setup := [][]string{
		{"link", "add", "br0", "type", "bridge"},
		{"addr", "add", NodeAddr4.String() + "/24", "dev", "br0"},
		{"addr", "add", NodeAddr6.String() + "/64", "dev", "br0", "nodad"},
		{"link", "set", "br0", "up"},
	}
	for _, r := range serviceRanges {
		setup = append(setup, []string{"route", "add", r.String(), "dev", "br0"})
	}
	for _, args := range setup {
		if err := node.IP(args...); err != nil {
			return nil, errors.Join(err, l.Close())
		}
	}
	return l, nil
}

// Close stops the lab's processes and servers and removes every namespace.
// It is safe to call more than once.
func (l *Lab) Close() error {
	l.mu.Lock()
	procs, hosts, closers := l.procs, l.hosts, l.closer
	l.procs, l.hosts, l.closer = nil, nil, nil
	l.mu.Unlock()
	var errs []error
	for _, p := range procs {
		p.Stop()
	}
	for _, c := range closers {
		errs = append(errs, c())
	}
	for _, h := range hosts {
		errs = append(errs, h.close())
	}
	if l.Node != nil {
		errs = append(errs, l.Node.remove())
		l.Node = nil
	}
	return errors.Join(errs...)
}

// onClose runs fn when the lab closes, before its namespaces go.
func (l *Lab) onClose(fn func() error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closer = append(l.closer, fn)
}

// sweep removes the namespaces of labs whose test process is gone (killed
// before its Close ran), and whatever still runs in them.
func sweep(logf func(string, ...any)) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || !strings.HasPrefix(fields[0], namePrefix) {
			continue
		}
		name := fields[0]
		pid, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(name, namePrefix), "-", 2)[0])
		if err != nil || processAlive(pid) {
			continue
		}
		killAll(name)
		if err := ip("netns", "delete", name); err == nil {
			logf("netlab: removed namespace %s left by process %d", name, pid)
		}
	}
}

// processAlive says whether pid is a running process.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// IsDocumentation says whether p lies inside a documentation range:
// 192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24 or 2001:db8::/32.
func IsDocumentation(p netip.Prefix) bool {
	for _, d := range documentation {
		if d.Bits() <= p.Bits() && d.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

var documentation = []netip.Prefix{
	netip.MustParsePrefix("192.0.2.0/24"),
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"),
	netip.MustParsePrefix("2001:db8::/32"),
}
