package framework

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// RestartControllerAfter stops the controller, runs whileStopped, and
// starts a new controller, as RestartController does: for changes made
// while no controller runs (a crash, a leader change), which the new one
// learns only from the API server. Tests that use it must not run in
// parallel with others of their binary.
func RestartControllerAfter(t *testing.T, whileStopped func()) {
	t.Helper()
	e := current
	e.cancel()
	if err := <-e.done; err != nil {
		t.Fatalf("stopping the controller: %v", err)
	}
	whileStopped()
	e.metrics = prometheus.NewRegistry()
	if err := e.startController(e.opts); err != nil {
		t.Fatalf("starting the controller again: %v", err)
	}
}
