package externalbackend

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/connections"
	"github.com/backendslice/backendslice/internal/fairshare"
	"github.com/backendslice/backendslice/internal/slicestore"
	"github.com/backendslice/backendslice/internal/speccheck"
	"github.com/backendslice/backendslice/internal/watchdog"
	"github.com/backendslice/backendslice/providers"
)

// errRecreating says the Service was deleted to be created again (its
// primary family or headlessness changed): the next pass creates it, once
// garbage collection has taken the old one's slices.
var errRecreating = errors.New("the Service is being recreated")

// Reconciler keeps the Service and EndpointSlices of each ExternalBackend true.
type Reconciler struct {
	client.Client
	// APIReader reads past the cache, for objects the cache does not hold.
	APIReader client.Reader
	Events    events.EventRecorder
	Providers *providers.Registry
	Config    Config
	Metrics   *Metrics
	Clock     clock.PassiveClock
	// Waker carries provider and prober wake-ups; nil when nothing pushes.
	Waker *ChannelWaker
	// Prober checks the endpoints of probed sources; nil in render.
	Prober Prober
	// Workers is how many backends are reconciled at once.
	Workers int
	// ClientLimiter is the client's fair rate limiter, told which
	// namespaces have work queued; nil when the client has another.
	ClientLimiter *fairshare.RateLimiter
	// HostsReader, when set, reads the API server's own EndpointSlices
	// (default/kubernetes) instead of a cache of its own started with the
	// manager: for tests that reconcile by hand, with no manager running.
	HostsReader client.Reader
	// Watchdog records each reconcile for the stuck-loop liveness check;
	// nil when the check is off.
	Watchdog *watchdog.Watchdog

	// lookups run source calls apart from the workers (lookups.go); nil
	// calls them within the pass.
	lookups *lookups
	// checks are the controller's own checks of a spec.
	checks speccheck.Checker
	// connections reads BackendProviders and their Secrets.
	connections connections.Reader
	// families tells which IP families the cluster serves, and its Service ranges.
	families clusterNetworks
	// state holds each backend's own memory.
	state backendStates
	// store knows what the cache shows of each backend's Service and
	// slices, and what this process wrote of them.
	store *slicestore.Store
	// recreations are the token buckets, one per namespace, that Service
	// recreations take from, on top of each backend's own backoff
	// (recreateAfter).
	recreations *fairshare.Buckets
	// catchUps are the token buckets, one per namespace, that status
	// catch-ups take their slots from (see catchup.go); nil writes them
	// at once.
	catchUps *fairshare.Buckets
}

// +kubebuilder:rbac:groups=backendslice.io,resources=externalbackends,verbs=list;watch
// +kubebuilder:rbac:groups=backendslice.io,resources=externalbackends/status,verbs=patch
// +kubebuilder:rbac:groups=backendslice.io,resources=externalbackends/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups="",resources=services/finalizers,verbs=update
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile loads the ExternalBackend, runs the steps and patches status once.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	// The work queue (fairshare.Queue) gave this backend its namespace's
	// turn of the workers; its API requests take the namespace's turn of
	// the client's rate limit.
	ctx = fairshare.WithFlow(ctx, req.Namespace)
	start := r.Clock.Now()
	xb, err := r.store.Backend(ctx, req.NamespacedName)
	if err != nil {
		if apierrors.IsNotFound(err) {
			r.release(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !xb.DeletionTimestamp.IsZero() {
		// Owner references let garbage collection remove the Service and slices.
		r.release(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	before := xb.DeepCopy()
	var pass passResult
	defer func() {
		var next ctrl.Result
		next, retErr = r.writeStatus(ctx, before, xb, pass)
		r.Metrics.reconciled(retErr, r.Clock.Since(start))
		if retErr == nil {
			res = next
		}
	}()
	if xb.Spec.Suspend {
		// Nothing is resolved while suspended: watches and listings go.
		r.forgetSources(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	if err := r.checks.Err(r.kinds(), r.Config.ClusterDomain, xb); err != nil {
		r.forgetSources(req.NamespacedName)
		pass.specErr = err
		return ctrl.Result{}, nil
	}
	// One deadline for the whole pass, so that no source, read or write can
	// hold a worker for longer.
	ctx, cancel := context.WithTimeout(ctx, r.Config.ReconcileTimeout)
	defer cancel()
	pass = r.sync(ctx, xb)
	pass.requeueAfter = earliest(pass.requeueAfter, r.recreateAfter(req.NamespacedName, errors.Is(pass.syncErr, errRecreating)))
	return ctrl.Result{}, nil
}

// recreateAfter is when to look again at a backend whose pass deleted its
// Service to recreate it (recreating), else zero (and its backoff starts
// over). Such passes go through a backoff and a shared token bucket, never
// a fixed short delay, so that nothing can spin.
func (r *Reconciler) recreateAfter(key types.NamespacedName, recreating bool) time.Duration {
	var attempts int
	r.state.update(key, func(b *backendState) {
		attempts = b.recreateAttempts
		b.recreateAttempts = 0
		if recreating {
			b.recreateAttempts = attempts + 1
		}
	})
	if !recreating {
		return 0
	}
	return max(retryDelay(attempts), r.recreations.Delay(key.Namespace))
}

// sync runs the steps, each taking what the one before returned: admit
// the sources, resolve them, read what is published, decide what to publish, write the
// Service, write the slices, and, for an adopted Service, remove what was
// hand-written once the slices carry it.
func (r *Reconciler) sync(ctx context.Context, xb *v1alpha1.ExternalBackend) passResult {
	admissions, err := r.admit(ctx, xb)
	if err != nil {
		return passResult{syncErr: err}
	}
	res := r.resolveSources(ctx, xb, admissions)
	pass := passResult{results: res.results, requeueAfter: res.refreshAfter, limits: res.limits, fates: res.fates}
	seen, err := r.observe(ctx, xb)
	if err != nil {
		pass.syncErr = err
		return pass
	}
	pass.served = seen.served
	pub, next := r.publication(ctx, xb, res, seen)
	pass.publication = pub
	if pub.Limit != "" {
		pass.limits = append(pass.limits, pub.Limit)
	}
	pass.requeueAfter = earliest(pass.requeueAfter, pub.RequeueAfter)
	svc, created, err := r.ensureService(ctx, xb, pub, seen.service)
	if err != nil {
		pass.syncErr = err
		return pass
	}
	var bound sliceBound
	pass.slices, bound, pass.syncErr = r.syncSlices(ctx, xb, svc, created, pub, seen)
	if pass.syncErr == nil {
		// Published: the decision's memory (drains, the window) holds.
		r.state.remember(client.ObjectKeyFromObject(xb), next)
	}
	// What the slices hold, for status and adoption: the bound on slices
	// may have left some endpoints out.
	pub.Endpoints = without(pub.Endpoints, bound.leftOut)
	pass.Endpoints = pub.Endpoints
	if pass.syncErr == nil {
		pass.adoption, pass.syncErr = r.completeAdoption(ctx, xb, svc, pub)
	}
	if l := r.Config.maxPerSlice(xb).limit; l != "" {
		pass.limits = append(pass.limits, l)
	}
	pass.limits = append(pass.limits, bound.limits...)
	return pass
}

// release forgets what the controller keeps for a backend that is gone.
func (r *Reconciler) release(key types.NamespacedName) {
	r.Metrics.forget(key.Namespace, key.Name)
	r.state.release(key)
	r.store.Forget(key)
	r.forgetSources(key)
	if r.Prober != nil {
		r.Prober.Sync(key, nil)
	}
}

// event records an event about the ExternalBackend.
func (r *Reconciler) event(xb *v1alpha1.ExternalBackend, kind, reason, action, note string, args ...any) {
	r.Events.Eventf(xb, nil, kind, reason, action, note, args...)
}

// errRead marks a failed read, so that status tells it from a failed write.
type errRead struct{ err error }

func (e errRead) Error() string { return e.err.Error() }
func (e errRead) Unwrap() error { return e.err }

// readFailed wraps a read error with what was being read.
func readFailed(what string, err error) error {
	return errRead{fmt.Errorf("%s: %w", what, err)}
}

// earliest is the sooner of two delays, where zero means never.
func earliest(a, b time.Duration) time.Duration {
	if a == 0 || (b != 0 && b < a) {
		return b
	}
	return a
}

// kinds is the table of source kinds the registry resolves; none where
// there is no registry.
func (r *Reconciler) kinds() providers.Kinds {
	if r.Providers == nil {
		return nil
	}
	return r.Providers.Kinds()
}
