// Package kinds_test registers a source kind through the table of source
// kinds alone and runs it end to end on a real API server: admitted,
// refused, resolved and published, with no line of the controller changed.
//
// The made-up kind is "inventory": a company's asset inventory that
// answers which addresses a service has. The CRD has no inventory field,
// and adding one would change the API rather than only the table, so the
// kind borrows the consul field's shape, which says what an inventory needs
// (a service and where it lives): an inventory source is a consul source
// whose datacenter is "inventory", and an inventory BackendProvider is a
// consul provider of that datacenter. Its row comes before consul's, so
// consul never sees those sources. Everything else is the row's own: its
// provider kind, its connection (a name, no Consul client), its admission
// rule, and a fake Provider of kind "inventory" that reads a map.
package kinds_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/backendslice/backendslice/controllers"
	"github.com/backendslice/backendslice/providers/static"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// inventory is the fake inventory the controller's inventory provider reads.
var inventory = newInventory()

func TestMain(m *testing.M) { os.Exit(run(m)) }

// run starts the control plane, then the controller as controllers.NewManager
// wires it for the binary, with a registry of the test's table of kinds:
// the framework's own controller would take the built-in table.
func run(m *testing.M) int {
	// stop stops the controller, once it started.
	var stop func()
	return framework.Run(m, framework.Options{
		ControlPlaneOnly: true,
		Started: func(e *framework.Env) error {
			reg, err := kindsWithInventory().NewRegistry(static.New(), inventory)
			if err != nil {
				return err
			}
			cfg := framework.TestConfig()
			// As the chart installs it: sources must name a provider.
			cfg.AllowSourcesWithoutProvider = false
			cfg.SoleWriter = true
			mgr, err := controllers.NewManager(e.Config(), controllers.ManagerOptions{
				MetricsBindAddress:     "0",
				HealthProbeBindAddress: "0",
				Providers:              reg,
				Config:                 cfg,
			})
			if err != nil {
				return err
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- mgr.Start(ctx) }()
			stop = func() {
				cancel()
				if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
					fmt.Fprintln(os.Stderr, "stopping the controller:", err)
				}
			}
			return nil
		},
		Stopping: func() {
			if stop != nil {
				stop()
			}
		},
	})
}
