// Command coredns is CoreDNS with only the plugins the data-path tests use: the
// kubernetes plugin (Service and endpoint records from the test API server) and
// what a Corefile for it needs. The upstream binary's full plugin set would
// also compile the cloud DNS providers' SDKs and etcd, which no test uses.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	// The plugins, registered by their init functions.
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

// directives is the order in which the plugins run, a subsequence of upstream's
// plugin.cfg (the order matters: ready and health before the resolvers).
var directives = []string{"bind", "ready", "health", "errors", "log", "kubernetes"}

func main() {
	dnsserver.Directives = directives
	coremain.Run()
}
