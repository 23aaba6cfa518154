// Package e2e runs the controller, wired as the binary wires it, against a
// real kube-apiserver and etcd, with the static provider.
package e2e

import (
	"os"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/controllers/externalbackend"
	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/providers/static"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// k8s is an administrator's client that talks to the API server directly.
var k8s client.Client

// testDenied is denied on top of the defaults, standing in for a cluster's
// own Pod range.
const testDenied = framework.TestDenied

func TestMain(m *testing.M) {
	os.Exit(framework.Run(m, framework.Options{
		Providers: func(providers.Waker) ([]providers.Provider, error) {
			return []providers.Provider{static.New()}, nil
		},
		// TestPodRangeDropped gives a Node a Pod range.
		Config:  func(c *externalbackend.Config) { c.DenyPodCIDRs = true },
		Started: func(e *framework.Env) error { k8s = e.Client; return nil },
	}))
}

// The shared waits and reads of the framework, under the names these tests use.
var (
	newNamespace  = framework.Namespace
	eventually    = framework.Eventually
	mustCreate    = framework.Create
	get           = framework.Get
	update        = framework.Update
	waitCondition = framework.WaitCondition
	waitReady     = framework.WaitReady
	ourSlices     = framework.Slices
	published     = framework.Published
	waitAddresses = framework.WaitAddresses
	writes        = framework.Writes
)

// reconciles is how many reconciles the controller has finished with result
// ("success" or "error"), or with any result when result is "".
func reconciles(t *testing.T, result string) float64 {
	t.Helper()
	match := map[string]string{}
	if result != "" {
		match["result"] = result
	}
	n, _ := framework.MetricValue(t, "backendslice_reconciles_total", match)
	return n
}
