// Package e2e runs the controller, wired as the binary wires it, against a
// real kube-apiserver and etcd, with the static provider.
package e2e

import (
	"flag"
	"os"
	"syscall"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/providers/static"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// k8s is an administrator's client that talks to the API server directly.
var k8s client.Client

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.fuzzworker"); f != nil && f.Value.String() == "true" {
		// A fuzz worker talks to its coordinator on descriptors 3 and 4,
		// which it inherited without close-on-exec: kube-apiserver and etcd
		// would inherit them too and, outliving a worker the coordinator
		// kills, hold its pipe open, and the coordinator waits forever.
		syscall.CloseOnExec(3)
		syscall.CloseOnExec(4)
	}
	os.Exit(framework.Run(m, framework.Options{
		Providers: func(providers.Waker) ([]providers.Provider, error) {
			return []providers.Provider{static.New()}, nil
		},
		Started: func(e *framework.Env) error { k8s = e.Client; return nil },
		// Under -fuzz (the coordinator and each worker process run this
		// TestMain), only FuzzValidateAgainstAdmission runs, and it needs
		// the API server alone: a worker then starts and stops in seconds.
		ControlPlaneOnly: fuzzing(),
	}))
}

// fuzzing tells whether the test binary runs a fuzz target (-test.fuzz).
func fuzzing() bool {
	f := flag.Lookup("test.fuzz")
	return f != nil && f.Value.String() != ""
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
