// Package caps_test runs the controller under small per-backend limits
// (--max-endpoints-per-backend, --max-slices-per-backend) against a real
// kube-apiserver, with the static provider, and counts what it writes.
package caps_test

import (
	"os"
	"testing"

	"github.com/backendslice/backendslice/controllers/externalbackend"
	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/providers/static"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// The limits of these tests: small, so that static sources reach them.
// 3 slices take 40 endpoints at 14 a slice.
const (
	maxEndpoints = 40
	maxSlices    = 3
	// floor is --min-endpoints-per-slice as the chart sets it.
	floor = 10
)

// writes counts the controller's write requests by namespace and resource.
var writes = framework.NewWriteCounter()

func TestMain(m *testing.M) {
	os.Exit(framework.Run(m, framework.Options{
		Providers: func(providers.Waker) ([]providers.Provider, error) {
			return []providers.Provider{static.New()}, nil
		},
		Config: func(c *externalbackend.Config) {
			c.MaxEndpointsPerBackend, c.MaxSlicesPerBackend, c.MinEndpointsPerSlice = maxEndpoints, maxSlices, floor
		},
		WrapTransport: writes.Wrap,
	}))
}
