package controllers

import (
	"context"
	"errors"
	"net/http"
	"time"

	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"

	"github.com/backendslice/backendslice/internal/watchdog"
)

// Names of the health checks, each served on its own too
// (/readyz/informers-synced, /healthz/reconcile-loop).
const (
	// ReadyCheckName is the readiness check: the informer caches synced.
	ReadyCheckName = "informers-synced"
	// StuckCheckName is the optional liveness check of the reconcile loop.
	StuckCheckName = "reconcile-loop"
)

// cacheSyncWait is how long one readiness probe waits for the caches: less
// than a kubelet probe's default one-second timeout, so that a probe gets
// the check's own answer.
const cacheSyncWait = 500 * time.Millisecond

// addHealthChecks registers the probes: liveness answers while the process
// serves; readiness waits for the informer caches to have synced (before
// that the controller would act on a partial view: a Service of ours it has
// not listed yet looks missing); and, when stuckAfter is not zero, the
// reconcile loop's liveness check, whose watchdog it returns for the
// controllers to report to (nil when off).
func addHealthChecks(mgr ctrl.Manager, stuckAfter time.Duration) (*watchdog.Watchdog, error) {
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck(ReadyCheckName, cachesSynced(mgr.GetCache(), cacheSyncWait)); err != nil {
		return nil, err
	}
	if stuckAfter <= 0 {
		return nil, nil
	}
	dog := watchdog.New(clock.RealClock{})
	if err := mgr.AddHealthzCheck(StuckCheckName, dog.Checker(stuckAfter, leading(mgr), mgr.GetLogger().WithName("watchdog"))); err != nil {
		return nil, err
	}
	return dog, nil
}

// cachesSynced passes once every informer the cache has started has synced.
// A standby has the informers of the indexed kinds, started before any
// leader is elected, and is Ready once they synced: a rolling update waits
// for readiness, and must not wait for a lease the old leader holds. The
// leader's controllers add their informers when they start, and the check
// waits for those too. An informer that can never sync (RBAC without list
// on a kind it watches) keeps it failing, which is the point.
func cachesSynced(c cache.Cache, wait time.Duration) healthz.Checker {
	return func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), wait)
		defer cancel()
		if !c.WaitForCacheSync(ctx) {
			return errors.New("the informer caches have not synced with the API server yet (if this lasts, check the controller's RBAC: list and watch on every kind it reads)")
		}
		return nil
	}
}

// leading tells whether this replica holds the lease (always, without
// leader election).
func leading(mgr ctrl.Manager) func() bool {
	return func() bool {
		select {
		case <-mgr.Elected():
			return true
		default:
			return false
		}
	}
}
