package controllers

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backendslice/backendslice/controllers/externalbackend"
	"github.com/backendslice/backendslice/internal/version"
)

// newMetrics registers the reconciler's metrics and the build's with reg.
func newMetrics(reg prometheus.Registerer) (*externalbackend.Metrics, error) {
	metrics, err := externalbackend.NewMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("registering metrics: %w", err)
	}
	if err := registerBuildInfo(reg, version.Get()); err != nil {
		return nil, fmt.Errorf("registering the build info: %w", err)
	}
	return metrics, nil
}

// registerBuildInfo exports backendslice_build_info{version,commit,goversion}
// = 1: which build runs, for dashboards and alerts to join on (a fleet
// half-upgraded shows two versions). Several managers in one process (tests
// of two instances) share a registry: the same series registered again is
// not an error.
func registerBuildInfo(reg prometheus.Registerer, info version.Info) error {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "backendslice_build_info",
		Help: "The running build: its version, the git commit it was built from and the Go version (always 1).",
	}, []string{"version", "commit", "goversion"})
	g.WithLabelValues(info.Version, info.Commit, info.GoVersion).Set(1)
	var already prometheus.AlreadyRegisteredError
	if err := reg.Register(g); err != nil && !errors.As(err, &already) {
		return err
	}
	return nil
}
