// Package placement_test runs churn-aware slice placement (--churn-window)
// end to end: the controller, wired as the binary wires it, places a static
// backend's endpoints on a real kube-apiserver while a few of them flap,
// and the test counts which slices each flip writes, with the feature on
// and, side by side in the same run, off.
//
// The tests run one after another: they restart the controller.
package placement_test

import (
	"os"
	"sync/atomic"
	"testing"

	"github.com/backendslice/backendslice/controllers/externalbackend"
	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/providers/static"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// writes counts the controller's write requests by namespace and resource.
var writes = framework.NewWriteCounter()

// churnOff, when set, starts the controller (at its next restart) with
// churn-aware placement off (Churn.Window 0), as --churn-window=0 does.
var churnOff atomic.Bool

func TestMain(m *testing.M) {
	os.Exit(framework.Run(m, framework.Options{
		Providers: func(providers.Waker) ([]providers.Provider, error) {
			return []providers.Provider{static.New()}, nil
		},
		Config: func(c *externalbackend.Config) {
			if churnOff.Load() {
				c.Churn.Window = 0
			}
		},
		WrapTransport: writes.Wrap,
	}))
}
