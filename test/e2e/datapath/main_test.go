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
	"os"
	"path/filepath"
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
	return framework.RunWithLab(m, framework.Options{Providers: newProviders}, startLab)
}

// newProviders are the kinds of source a failover is measured for.
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
	return []providers.Provider{static.New(), d, c, a.EC2(), a.ElastiCache()}, nil
}

// startLab adds the hosts to the lab, and starts kube-proxy and CoreDNS
// in its node.
func startLab(e *framework.Env, l *netlab.Lab, logs string) error {
	lab = l
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
	kubeconfig, err := framework.StartKubeProxy(ctx, e, lab, node, logs)
	if err != nil {
		return err
	}
	coredns, err := framework.LabBinary("coredns")
	if err != nil {
		return err
	}
	if _, err := lab.CoreDNS(ctx, coredns, kubeconfig, "cluster.local", dnsPort, logs); err != nil {
		return errors.Join(err, errors.New("CoreDNS's log: "+filepath.Join(logs, "coredns.log")))
	}
	return nil
}
