package framework

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backendslice/backendslice/controllers/externalbackend"
)

// RestartControllerAfter stops the controller, runs whileStopped, and
// starts a new controller, as RestartController does: for changes made
// while no controller runs (a crash, a leader change), which the new one
// learns only from the API server. Tests that use it must not run in
// parallel with others of their binary.
func RestartControllerAfter(t *testing.T, whileStopped func()) {
	t.Helper()
	current.restart(t, current.opts, whileStopped)
}

// RestartControllerWith restarts the controller, as RestartController
// does, with its configuration changed by change on top of the suite's:
// as an operator's changed flag and the rollout it starts would. When the
// test ends the controller is restarted again with the suite's
// configuration. Tests that use it must not run in parallel with others
// of their binary.
func RestartControllerWith(t *testing.T, change func(*externalbackend.Config)) {
	t.Helper()
	e := current
	suite, opts := e.opts, e.opts
	opts.Config = func(c *externalbackend.Config) {
		if suite.Config != nil {
			suite.Config(c)
		}
		change(c)
	}
	e.restart(t, opts, func() {})
	t.Cleanup(func() { e.restart(t, suite, func() {}) })
}

// restart stops the controller, runs whileStopped, and starts a new one
// with opts: new providers, no memory, caches filled again, metrics from
// zero.
func (e *Env) restart(t *testing.T, opts Options, whileStopped func()) {
	t.Helper()
	e.cancel()
	if err := <-e.done; err != nil {
		t.Fatalf("stopping the controller: %v", err)
	}
	whileStopped()
	e.metrics = prometheus.NewRegistry()
	if err := e.startController(opts); err != nil {
		t.Fatalf("starting the controller again: %v", err)
	}
}
