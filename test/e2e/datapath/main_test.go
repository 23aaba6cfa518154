// Package datapath_test checks that the real consumers of our objects route
// traffic the way our conditions say: kube-proxy (nftables mode) and CoreDNS
// run in a network namespace that stands for a cluster node, against the
// test API server, and every check is a real connection from that node to
// servers in backend-host namespaces (see test/netlab). It also measures
// failover: from a backend failing at its source to the first new
// connection that no longer reaches it.
package datapath_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/providers/consul"
	"github.com/backendslice/backendslice/providers/dns"
	"github.com/backendslice/backendslice/providers/static"
	"github.com/backendslice/backendslice/test/awstest"
	"github.com/backendslice/backendslice/test/consultest"
	"github.com/backendslice/backendslice/test/controlplane"
	"github.com/backendslice/backendslice/test/dnstest"
	"github.com/backendslice/backendslice/test/e2e/framework"
	"github.com/backendslice/backendslice/test/netlab"
)

// The node kube-proxy runs as, and its zone.
const (
	nodeName = "node-a"
	nodeZone = "zone-a"
	// otherZone is the zone of the hosts b1 and b2.
	otherZone = "zone-b"
)

// Ports the hosts serve: the name-and-echo server on TCP and the name
// server on UDP share echoPort; the HTTP server is on httpPort.
const (
	echoPort = 5000
	httpPort = 8080
)

// dnsPort is where CoreDNS answers in the node namespace.
const dnsPort = 1053

// zone is the zone of the test's authoritative DNS server.
const zone = "datapath.test"

// awsRefresh is how often the AWS provider lists instances.
const awsRefresh = time.Second

// The Service ranges: documentation blocks, so that every ClusterIP the
// API server gives is a test address too.
const (
	serviceRange4 = "198.51.100.0/24"
	serviceRange6 = "2001:db8:5::/112"
)

var (
	lab *netlab.Lab
	// hosts by name: a1, a2 in the node's zone; b1, b2 in the other; c1,
	// c2 without a zone.
	hosts     = map[string]*netlab.Host{}
	dnsServer *dnstest.Server
	agent     *consultest.Agent
	ec2       *awstest.Server
)

var hostNames = []string{"a1", "a2", "b1", "b2", "c1", "c2"}

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	ranges := serviceRange4
	if os.Getenv(controlplane.StackEnv) != "single" {
		ranges += "," + serviceRange6
	}
	var err error
	if dnsServer, err = dnstest.New(zone); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = dnsServer.Stop() }()
	if agent, err = consultest.Start(consultest.Config{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = agent.Close() }()
	ec2 = awstest.New()
	defer ec2.Close()

	var labErr error
	tmp, err := os.MkdirTemp("", "datapath-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := framework.Run(m, framework.Options{
		ServiceCIDRs: ranges,
		Providers:    newProviders,
		Started: func(e *framework.Env) error {
			return startLab(e, ranges, tmp)
		},
		Stopping: func() { labErr = closeLab() },
	})
	if err := labErr; err != nil {
		fmt.Fprintln(os.Stderr, "removing the lab's namespaces:", err)
		code = max(code, 1)
	}
	if code == 0 {
		_ = os.RemoveAll(tmp)
	} else {
		fmt.Fprintln(os.Stderr, "kube-proxy's and CoreDNS's logs are in", tmp)
	}
	return code
}

// closeLab stops kube-proxy and CoreDNS and removes the namespaces.
func closeLab() error {
	if lab == nil {
		return nil
	}
	err := lab.Close()
	lab = nil
	return err
}

// newProviders are the four kinds of source a failover is measured for.
func newProviders(w providers.Waker) ([]providers.Provider, error) {
	d, err := dns.New(dns.Options{
		Resolvers: []string{dnsServer.Addr}, QueryTimeout: 500 * time.Millisecond,
		MinRefresh: time.Second, MaxRefresh: time.Minute,
	})
	if err != nil {
		return nil, err
	}
	c, err := consul.New(consul.Options{Address: agent.Addr}, w)
	if err != nil {
		return nil, err
	}
	a, err := framework.AWS(ec2, awsRefresh)
	if err != nil {
		return nil, err
	}
	return []providers.Provider{static.New(), d, c, a.EC2()}, nil
}

// startLab builds the node and the hosts, registers the node with the API
// server and starts kube-proxy and CoreDNS in it.
func startLab(e *framework.Env, ranges, dir string) error {
	var prefixes []netip.Prefix
	for _, r := range strings.Split(ranges, ",") {
		prefixes = append(prefixes, netip.MustParsePrefix(r))
	}
	var err error
	lab, err = netlab.New(func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }, prefixes...)
	if err != nil {
		return fmt.Errorf("the data-path tests build network namespaces and cannot run without them: %w", err)
	}
	for _, name := range hostNames {
		h, err := lab.AddHost(name)
		if err != nil {
			return err
		}
		for _, serve := range []func() error{
			func() error { return h.ServeTCP(echoPort) },
			func() error { return h.ServeUDP(echoPort) },
			func() error { return h.ServeHTTP(httpPort) },
		} {
			if err := serve(); err != nil {
				return fmt.Errorf("host %s: %w", name, err)
			}
		}
		hosts[name] = h
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: nodeName, Labels: map[string]string{corev1.LabelTopologyZone: nodeZone},
	}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.Client.Create(ctx, node); err != nil {
		return fmt.Errorf("registering node %s: %w", nodeName, err)
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		return err
	}
	bin := filepath.Join(root, "bin")
	for _, b := range []string{"kube-proxy", "coredns"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			return fmt.Errorf("%s not found in bin/: run `make dataplane` (it builds it from Go modules once)", b)
		}
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := lab.Kubeconfig(e.Config(), kubeconfig); err != nil {
		return err
	}
	if _, err := lab.KubeProxy(ctx, filepath.Join(bin, "kube-proxy"), kubeconfig, nodeName, dir); err != nil {
		return errors.Join(err, errors.New("kube-proxy's log: "+filepath.Join(dir, "kube-proxy.log")))
	}
	if _, err := lab.CoreDNS(ctx, filepath.Join(bin, "coredns"), kubeconfig, "cluster.local", dnsPort, dir); err != nil {
		return errors.Join(err, errors.New("CoreDNS's log: "+filepath.Join(dir, "coredns.log")))
	}
	return nil
}
