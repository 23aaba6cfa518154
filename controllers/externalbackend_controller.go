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
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/controllers/coalesce"
	"github.com/backendslice/backendslice/controllers/desired"
	"github.com/backendslice/backendslice/providers"
)

// errRequeue asks for another pass soon: a step changed something the next
// pass must see (a Service that had to be recreated), or found the cache
// behind the API server.
var errRequeue = errors.New("requeue")

// Reconciler keeps the Service and EndpointSlices of each ExternalBackend true.
type Reconciler struct {
	client.Client
	// APIReader reads past the cache, for objects the cache does not hold.
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Events    events.EventRecorder
	Providers *providers.Registry
	Config    Config
	Metrics   *Metrics
	Clock     clock.PassiveClock

	validate *validator.Validate
	waker    *ChannelWaker
	// workers is how many backends are reconciled at once.
	workers int
	// known holds each source's last successful answer, by source name.
	known *byName[map[string][]providers.Endpoint]
	// bursts holds the coalescing window's state.
	bursts *byName[coalesce.State]
	// own tells the watch events of our own writes from others', by kind.
	own map[string]writeTracker
}

// reconcileState is what one reconcile learns and decides, passed along its steps.
type reconcileState struct {
	xb          *v1alpha1.ExternalBackend
	serviceName string
	// results of each source, in spec order.
	results []desired.SourceResult
	// endpoints to publish, draining ones included.
	endpoints []desired.Endpoint
	dropped   []v1alpha1.DroppedAddress
	draining  []v1alpha1.DrainingEndpoint
	// requeueAfter is the earliest time a provider, a drain or the
	// coalescing window wants another look.
	requeueAfter time.Duration
	// existing are the slices we manage, as the cache has them.
	existing []discoveryv1.EndpointSlice
	// sliceNames are the names of every cached slice of the Service, ours or not.
	sliceNames map[string]bool
	service    *corev1.Service
	slices     int32
	// specErr is set when the spec is invalid; nothing is resolved or written.
	specErr error
	// syncErr is set when writing the Service or slices failed.
	syncErr error
}

// +kubebuilder:rbac:groups=backendslice.io,resources=externalbackends,verbs=list;watch
// +kubebuilder:rbac:groups=backendslice.io,resources=externalbackends/status,verbs=patch
// +kubebuilder:rbac:groups=backendslice.io,resources=externalbackends/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups="",resources=services/finalizers,verbs=update
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch;create;update;delete;deletecollection
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile loads the ExternalBackend, runs the steps and patches status once.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	start := r.Clock.Now()
	xb := &v1alpha1.ExternalBackend{}
	if err := r.Get(ctx, req.NamespacedName, xb); err != nil {
		if apierrors.IsNotFound(err) {
			r.Metrics.forget(req.Namespace, req.Name)
			r.known.forget(req.NamespacedName)
			r.bursts.forget(req.NamespacedName)
			r.Providers.Forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !xb.DeletionTimestamp.IsZero() {
		// Owner references let garbage collection remove the Service and slices.
		return ctrl.Result{}, nil
	}
	st := &reconcileState{xb: xb, serviceName: serviceName(xb)}
	before := xb.DeepCopy()
	defer func() {
		retErr = r.finish(ctx, before, st, retErr)
		r.Metrics.reconciled(retErr, r.Clock.Since(start))
		if retErr == nil {
			res.RequeueAfter = st.requeueAfter
		}
	}()
	if xb.Spec.Suspend {
		return ctrl.Result{}, nil
	}
	if err := validateSpec(r.validate, xb); err != nil {
		st.specErr = err
		return ctrl.Result{}, nil
	}
	for _, step := range []func(context.Context, *reconcileState) error{
		r.resolve,
		r.ensureService,
		r.coalesce,
		r.syncSlices,
	} {
		if err := step(ctx, st); err != nil {
			st.syncErr = err
			return ctrl.Result{}, nil
		}
	}
	return ctrl.Result{}, nil
}

// finish writes status and events from what the steps found, and decides
// whether to retry: transient failures return an error (retried with
// backoff), terminal ones wait for a change.
func (r *Reconciler) finish(ctx context.Context, before *v1alpha1.ExternalBackend, st *reconcileState, err error) error {
	xb := st.xb
	wasReady := metav1.ConditionStatus("")
	if c := meta.FindStatusCondition(before.Status.Conditions, v1alpha1.ConditionReady); c != nil {
		wasReady = c.Status
	}
	out := summarize(outcomeOf(st, wasReady))
	st.requeueAfter = earliest(st.requeueAfter, out.recheck)
	xb.Status.ServiceName = st.serviceName
	if !xb.Spec.Suspend && st.specErr == nil {
		xb.Status.Sources = sourceStatuses(before.Status.Sources, xb.Spec.Sources, st.results, r.Clock.Now())
		if st.syncErr == nil {
			xb.Status.Endpoints = countEndpoints(st.endpoints)
			xb.Status.Dropped = capDropped(st.dropped)
			xb.Status.Draining = st.draining
			xb.Status.Slices = st.slices
		}
	}
	for _, c := range out.conditions {
		c.ObservedGeneration = xb.Generation
		meta.SetStatusCondition(&xb.Status.Conditions, c)
	}
	if out.removeStalled {
		meta.RemoveStatusCondition(&xb.Status.Conditions, v1alpha1.ConditionStalled)
	}
	if out.final {
		xb.Status.ObservedGeneration = xb.Generation
	}
	log.FromContext(ctx).V(1).Info("reconciled", "endpoints", xb.Status.Endpoints.Total,
		"ready", xb.Status.Endpoints.Ready, "slices", xb.Status.Slices, "requeueAfter", st.requeueAfter)
	r.announce(before, xb)
	r.Metrics.endpoints(xb)
	if patchErr := r.patchStatus(ctx, before, xb); patchErr != nil {
		return errors.Join(err, fmt.Errorf("patching status: %w", patchErr))
	}
	if err != nil {
		return err
	}
	return out.retry
}

// patchStatus sends the status change, if there is one: a reconcile that
// changed nothing, such as the one our own slice writes trigger, costs the
// API server no request.
func (r *Reconciler) patchStatus(ctx context.Context, before, after *v1alpha1.ExternalBackend) error {
	if equality.Semantic.DeepEqual(before.Status, after.Status) {
		return nil
	}
	return client.IgnoreNotFound(r.Status().Patch(ctx, after, client.MergeFrom(before)))
}

// announce emits an event when the Ready condition or the set of dropped
// addresses changes, so that each is told once, not at every retry.
func (r *Reconciler) announce(before, after *v1alpha1.ExternalBackend) {
	if len(after.Status.Dropped) > 0 && !slices.Equal(before.Status.Dropped, after.Status.Dropped) {
		d := after.Status.Dropped[0]
		r.event(after, corev1.EventTypeWarning, v1alpha1.ReasonAddressesDropped, "Resolve",
			"%d address(es) not published, first %s from source %s: %s; status.dropped lists them",
			len(after.Status.Dropped), d.Address, d.Source, d.Reason)
	}
	now := meta.FindStatusCondition(after.Status.Conditions, v1alpha1.ConditionReady)
	was := meta.FindStatusCondition(before.Status.Conditions, v1alpha1.ConditionReady)
	if now == nil || (was != nil && was.Status == now.Status && was.Reason == now.Reason && was.Message == now.Message) {
		return
	}
	kind := corev1.EventTypeNormal
	if now.Status != metav1.ConditionTrue {
		kind = corev1.EventTypeWarning
	}
	r.event(after, kind, now.Reason, "Reconcile", "%s", now.Message)
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
func retryLimiter() workqueue.TypedRateLimiter[ctrl.Request] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[ctrl.Request](5*time.Millisecond, maxRetryDelay),
		&workqueue.TypedBucketRateLimiter[ctrl.Request]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}

// SetupWithManager registers the controller: it watches ExternalBackends,
// and the Services and EndpointSlices they own, so drift is reverted.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.validate = newValidator()
	r.known = newByName[map[string][]providers.Endpoint]()
	r.bursts = newByName[coalesce.State]()
	r.own = newOwnWritesByKind()
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	byBackendLabel := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []ctrl.Request {
		name, ok := o.GetLabels()[BackendLabel]
		if !ok {
			return nil
		}
		return []ctrl.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
	})
	b := ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.ExternalBackend{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Watches(&corev1.Service{}, byBackendLabel, builder.WithPredicates(r.own[kindService].notEchoes())).
		Watches(&discoveryv1.EndpointSlice{}, byBackendLabel, builder.WithPredicates(r.own[kindEndpointSlice].notEchoes())).
		Named("externalbackend").
		WithOptions(controller.Options{RateLimiter: retryLimiter(), MaxConcurrentReconciles: r.workers})
	if r.waker != nil {
		b = b.WatchesRawSource(source.Channel(r.waker.events, &handler.EnqueueRequestForObject{}))
	}
	return b.Complete(r)
}
