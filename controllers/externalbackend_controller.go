package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-playground/validator/v10"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/controllers/coalesce"
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

	validate *validator.Validate
	waker    *ChannelWaker
	// prober checks the endpoints of probed sources; nil in render.
	prober prober
	// families tells which IP families the cluster serves, and its Service ranges.
	families clusterNetworks
	// workers is how many backends are reconciled at once.
	workers int
	// known holds each source's last answer, by source name.
	known *byName[map[string]lastAnswer]
	// drains holds when each draining endpoint started to drain.
	drains *byName[[]v1alpha1.DrainingEndpoint]
	// bursts holds the coalescing window's state.
	bursts *byName[coalesce.State]
	// written holds each backend's status as this process last wrote or
	// read it live: a cached copy that shows another status may be older
	// than our own last status patch (see current).
	written *byName[statusSeen]
	// ledger tells whether the cache shows every slice of a backend.
	ledger *sliceLedger
	// own tells the watch events of our own writes from others', by kind.
	own map[string]writeTracker
	// again spaces out the passes that must look again soon (a Service
	// being recreated): they go through a rate limiter, never a fixed short
	// delay, so that nothing can spin.
	again workqueue.TypedRateLimiter[types.NamespacedName]
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
	start := r.Clock.Now()
	xb, err := r.current(ctx, req.NamespacedName)
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
	var rep report
	defer func() {
		var requeueAfter time.Duration
		requeueAfter, retErr = r.finish(ctx, before, xb, rep)
		r.Metrics.reconciled(retErr, r.Clock.Since(start))
		if retErr == nil {
			res.RequeueAfter = requeueAfter
		}
	}()
	if xb.Spec.Suspend {
		// Nothing is resolved while suspended: watches and listings go.
		r.Providers.Forget(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	if err := validateSpec(r.validate, xb); err != nil {
		r.Providers.Forget(req.NamespacedName)
		rep.specErr = err
		return ctrl.Result{}, nil
	}
	// One deadline for the whole pass, so that no source, read or write can
	// hold a worker for longer.
	ctx, cancel := context.WithTimeout(ctx, r.Config.ReconcileTimeout)
	defer cancel()
	rep = r.sync(ctx, xb)
	if errors.Is(rep.syncErr, errRecreating) {
		rep.requeueAfter = earliest(rep.requeueAfter, r.again.When(req.NamespacedName))
	} else {
		r.again.Forget(req.NamespacedName)
	}
	return ctrl.Result{}, nil
}

// current reads the backend from the cache, or past it when the cache may
// not show our own last status patch yet: status is patched as a diff
// from what was read, and a diff from an older status would leave fields
// of the newer one (a drain that ended) in place, with nothing to trigger
// another pass (status changes do not). A cached copy at another version
// that shows the status we last wrote (the spec was edited since) is as
// good as a live read, and costs none.
func (r *Reconciler) current(ctx context.Context, key types.NamespacedName) (*v1alpha1.ExternalBackend, error) {
	xb := &v1alpha1.ExternalBackend{}
	if err := r.Get(ctx, key, xb); err != nil {
		return nil, err
	}
	if w, ok := r.written.get(key); !ok || w.shownBy(xb) {
		return xb, nil
	}
	// A list of one by name, not a get: the controller's role lists and
	// watches ExternalBackends, and needs no more for this.
	var live v1alpha1.ExternalBackendList
	if err := r.APIReader.List(ctx, &live, client.InNamespace(key.Namespace), client.MatchingFields{"metadata.name": key.Name}); err != nil {
		return nil, err
	}
	if len(live.Items) == 0 {
		return nil, apierrors.NewNotFound(v1alpha1.GroupVersion.WithResource("externalbackends").GroupResource(), key.Name)
	}
	xb = &live.Items[0]
	r.written.set(key, seenStatus(xb))
	return xb, nil
}

// sync runs the steps, each taking what the one before returned: admit
// the sources, resolve them, read what is published, decide what to publish, write the
// Service, write the slices.
func (r *Reconciler) sync(ctx context.Context, xb *v1alpha1.ExternalBackend) report {
	gates, err := r.admit(ctx, xb)
	if err != nil {
		return report{syncErr: err}
	}
	res := r.resolveSources(ctx, xb, gates)
	rep := report{results: res.results, requeueAfter: res.refreshAfter}
	seen, err := r.observe(ctx, xb)
	if err != nil {
		rep.syncErr = err
		return rep
	}
	rep.served = seen.served
	pub := r.publication(ctx, xb, res, seen)
	rep.publication = pub
	rep.requeueAfter = earliest(rep.requeueAfter, pub.requeueAfter)
	svc, created, err := r.ensureService(ctx, xb, pub, seen.service)
	if err != nil {
		rep.syncErr = err
		return rep
	}
	rep.slices, rep.syncErr = r.syncSlices(ctx, xb, svc, created, pub, seen)
	return rep
}

// release forgets what the controller keeps for a backend that is gone.
func (r *Reconciler) release(key types.NamespacedName) {
	r.Metrics.forget(key.Namespace, key.Name)
	r.known.forget(key)
	r.bursts.forget(key)
	r.drains.forget(key)
	r.written.forget(key)
	r.ledger.forget(key)
	r.again.Forget(key)
	r.Providers.Forget(key)
	if r.prober != nil {
		r.prober.Sync(key, nil)
	}
}

// event records an event about the ExternalBackend.
func (r *Reconciler) event(xb *v1alpha1.ExternalBackend, kind, reason, action, note string, args ...any) {
	r.Events.Eventf(xb, nil, kind, reason, action, note, args...)
}

// maxRetryDelay caps the backoff of failing backends, so that one recovers
// within a minute of its source coming back, however long the outage was.
const maxRetryDelay = time.Minute

// retryLimiter is controller-runtime's default limiter with its per-item
// backoff capped at maxRetryDelay instead of about 17 minutes.
func retryLimiter[T comparable]() workqueue.TypedRateLimiter[T] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[T](5*time.Millisecond, maxRetryDelay),
		&workqueue.TypedBucketRateLimiter[T]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}

// SetupWithManager registers the controller: it watches ExternalBackends,
// the Services and EndpointSlices they own, so drift is reverted, and the
// cluster's ServiceCIDRs, whose families decide what can be published.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	families, cidrs, err := familiesOfCluster(mgr, r.Client)
	if err != nil {
		return err
	}
	r.families = families
	if r.Config.DenyPodCIDRs {
		r.families = withPodRanges{families, r.Client}
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &v1alpha1.ExternalBackend{}, providerRefIndex, providerRefs); err != nil {
		return fmt.Errorf("indexing ExternalBackends by provider: %w", err)
	}
	// A label selector on a cache list is matched against every object of
	// the namespace: with thousands of backends in one namespace, each
	// reconcile's reads would cost as much as the namespace is big.
	for _, o := range []client.Object{&corev1.Service{}, &discoveryv1.EndpointSlice{}} {
		if err := mgr.GetFieldIndexer().IndexField(context.Background(), o, BackendIndex, backendOf); err != nil {
			return fmt.Errorf("indexing %T by backend: %w", o, err)
		}
	}
	r.validate = newValidator()
	r.known = newByName[map[string]lastAnswer]()
	r.bursts = newByName[coalesce.State]()
	r.drains = newByName[[]v1alpha1.DrainingEndpoint]()
	r.written = newByName[statusSeen]()
	r.ledger = newSliceLedger()
	r.own = newOwnWritesByKind()
	r.again = retryLimiter[types.NamespacedName]()
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	byBackendLabel := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []ctrl.Request {
		key, ok := backendKey(o)
		if !ok {
			return nil
		}
		return []ctrl.Request{{NamespacedName: key}}
	})
	b := ctrl.NewControllerManagedBy(mgr).
		Watches(&v1alpha1.ExternalBackend{}, unhandledFirst(), builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Watches(&corev1.Service{}, byBackendLabel, builder.WithPredicates(r.own[kindService].notEchoes())).
		// The ledger sees every delete, ours included, before the echoes
		// of our own writes are dropped.
		Watches(&discoveryv1.EndpointSlice{}, byBackendLabel, builder.WithPredicates(r.ledger.watchDeletes(), r.own[kindEndpointSlice].notEchoes())).
		Named("externalbackend").
		WithOptions(controller.Options{RateLimiter: retryLimiter[ctrl.Request](), MaxConcurrentReconciles: r.workers,
			LogConstructor: backendLogger(mgr.GetLogger())})
	// Admission reads providers, namespaces and Secrets: a change to any
	// of them can admit, refuse or reconnect a backend's sources.
	b = b.Watches(&v1alpha1.BackendProvider{}, handler.EnqueueRequestsFromMapFunc(r.backendsUsing)).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.backendsIn),
			builder.WithPredicates(predicate.LabelChangedPredicate{}))
	if r.Config.Namespace != "" {
		b = b.Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.backendsUsingSecret))
	}
	if r.Config.DenyPodCIDRs {
		// A Node's Pod ranges change what every backend may publish;
		// its other updates (heartbeats) change nothing here.
		b = b.Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.everyBackend),
			builder.WithPredicates(predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
				return !slices.Equal(podCIDRsOf(e.ObjectOld), podCIDRsOf(e.ObjectNew))
			}}))
	}
	if cidrs {
		// A family added or removed changes what every backend can publish.
		b = b.Watches(&networkingv1.ServiceCIDR{}, handler.EnqueueRequestsFromMapFunc(r.everyBackend))
	}
	if r.waker != nil {
		b = b.WatchesRawSource(source.Channel(r.waker.events, &handler.EnqueueRequestForObject{}))
	}
	return b.Complete(r)
}

// providerRefIndex indexes ExternalBackends by the BackendProviders their
// sources name.
const providerRefIndex = "spec.sources.providerRef.name"

// providerRefs are the BackendProviders xb's sources name.
func providerRefs(o client.Object) []string {
	xb, ok := o.(*v1alpha1.ExternalBackend)
	if !ok {
		return nil
	}
	var names []string
	for _, src := range xb.Spec.Sources {
		if src.ProviderRef != nil && !slices.Contains(names, src.ProviderRef.Name) {
			names = append(names, src.ProviderRef.Name)
		}
	}
	return names
}

// backendsUsing lists the ExternalBackends whose sources name the provider.
func (r *Reconciler) backendsUsing(ctx context.Context, o client.Object) []ctrl.Request {
	return r.backends(ctx, client.MatchingFields{providerRefIndex: o.GetName()})
}

// backendsIn lists the ExternalBackends of a namespace whose labels changed.
func (r *Reconciler) backendsIn(ctx context.Context, o client.Object) []ctrl.Request {
	return r.backends(ctx, client.InNamespace(o.GetName()))
}

// backendsUsingSecret lists the ExternalBackends whose providers read the Secret.
func (r *Reconciler) backendsUsingSecret(ctx context.Context, o client.Object) []ctrl.Request {
	var out []ctrl.Request
	for _, p := range r.providersNaming(ctx, o) {
		out = append(out, r.backends(ctx, client.MatchingFields{providerRefIndex: p.Name})...)
	}
	return out
}

// everyBackend lists every ExternalBackend, from the cache.
func (r *Reconciler) everyBackend(ctx context.Context, _ client.Object) []ctrl.Request {
	return r.backends(ctx)
}

// backends lists the ExternalBackends opts select, from the cache.
func (r *Reconciler) backends(ctx context.Context, opts ...client.ListOption) []ctrl.Request {
	var list v1alpha1.ExternalBackendList
	if err := r.List(ctx, &list, opts...); err != nil {
		// The cache lists without a round trip; it fails only while stopping.
		return nil
	}
	reqs := make([]ctrl.Request, 0, len(list.Items))
	for _, xb := range list.Items {
		reqs = append(reqs, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&xb)})
	}
	return reqs
}

// errRead marks a failed read, so that status tells it from a failed write.
type errRead struct{ err error }

func (e errRead) Error() string { return e.err.Error() }
func (e errRead) Unwrap() error { return e.err }

// readFailed wraps a read error with what was being read.
func readFailed(what string, err error) error {
	return errRead{fmt.Errorf("%s: %w", what, err)}
}
