// Package watchdog tells whether a controller's reconcile loop is stuck, for
// a liveness check.
//
// Stuck has a narrow meaning here. Every ExternalBackend reconcile is
// bounded by --reconcile-timeout: a source that never answers, an API
// server that is slow, a backend with many endpoints all end within it, and
// none of them is stuck. A reconcile still running well past that bound is
// one that ignores its deadline (a provider or library call that does not
// honour its context, a deadlock): its worker is lost and its backend's key
// with it (the queue never hands a key to two workers), and once every
// worker is lost nothing is reconciled at all while the process looks
// healthy. Only a restart frees them. The watchdog records when each
// reconcile started and reports the oldest one still running past a bound
// that the caller keeps well above --reconcile-timeout.
//
// Only the leader reconciles, so only the leader can be stuck; a standby
// (or a replica that lost the lease, which exits) is never reported.
package watchdog

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Watchdog records the reconciles running now.
type Watchdog struct {
	clock clock.PassiveClock

	mu      sync.Mutex
	next    uint64
	running map[uint64]Run
}

// Run is one reconcile in progress.
type Run struct {
	// Controller and Key name it: the controller's name and the object's
	// namespace/name.
	Controller, Key string
	// Since is when it started.
	Since time.Time
}

// New is a watchdog reading time from c (clock.RealClock{} in the binary).
func New(c clock.PassiveClock) *Watchdog {
	return &Watchdog{clock: c, running: map[uint64]Run{}}
}

// Wrap records r's reconciles under controller's name. A nil watchdog
// returns r itself: the check is off, and costs nothing.
func (w *Watchdog) Wrap(controller string, r reconcile.Reconciler) reconcile.Reconciler {
	if w == nil {
		return r
	}
	return reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		key := req.Name
		if req.Namespace != "" {
			key = req.Namespace + "/" + req.Name
		}
		defer w.Begin(controller, key)()
		return r.Reconcile(ctx, req)
	})
}

// Begin records a reconcile of key that starts now, and returns what ends
// it. Wrap calls it for each reconcile; a controller calls it too for the
// part of a reconcile's work that goes on apart from its worker (a
// provider call that outlasts its pass), which is as stuck as a worker
// when it ignores its deadline. A nil watchdog records nothing.
func (w *Watchdog) Begin(controller, key string) (end func()) {
	if w == nil {
		return func() {}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	id := w.next
	w.next++
	w.running[id] = Run{Controller: controller, Key: key, Since: w.clock.Now()}
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.running, id)
	}
}

// Oldest is the reconcile that has run longest, if any runs.
func (w *Watchdog) Oldest() (Run, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var oldest Run
	found := false
	for _, r := range w.running {
		if !found || r.Since.Before(oldest.Since) {
			oldest, found = r, true
		}
	}
	return oldest, found
}

// Verdict is nil unless this replica leads and its oldest reconcile has run
// for longer than after; the error then names the reconcile, how long it
// has run and the flag that set the bound.
func Verdict(oldest Run, running, leading bool, now time.Time, after time.Duration) error {
	if !leading || !running {
		return nil
	}
	if took := now.Sub(oldest.Since); took > after {
		return fmt.Errorf("the %s reconcile of %s has run for %s, longer than --stuck-reconcile-timeout=%s: its worker is stuck (a call that ignores its deadline); restarting frees it",
			oldest.Controller, oldest.Key, took.Round(time.Second), after)
	}
	return nil
}

// Checker is the liveness check: it fails while leading() and a reconcile
// has run for longer than after. Which reconcile goes to log, not to the
// probe's answer: the health port is open to the cluster, and a backend's
// name is its tenant's.
func (w *Watchdog) Checker(after time.Duration, leading func() bool, log logr.Logger) healthz.Checker {
	return func(*http.Request) error {
		oldest, running := w.Oldest()
		if err := Verdict(oldest, running, leading(), w.clock.Now(), after); err != nil {
			log.Error(err, "the reconcile loop is stuck", "controller", oldest.Controller, "key", oldest.Key)
			return fmt.Errorf("%s: a reconcile has run for longer than --stuck-reconcile-timeout=%s (the controller's log names it)", oldest.Controller, after)
		}
		return nil
	}
}
