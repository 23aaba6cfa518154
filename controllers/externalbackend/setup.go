package externalbackend

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/connections"
	"github.com/backendslice/backendslice/internal/fairshare"
	"github.com/backendslice/backendslice/internal/slicestore"
	"github.com/backendslice/backendslice/internal/speccheck"
	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// Retries back off as controller-runtime's default limiter does, from
// retryBaseDelay doubling per attempt, with a token bucket of retryRate a
// second (retryBurst at once); but the bucket is one per namespace, so
// that one namespace's failing backends cannot reserve it far ahead of
// another's, and the backoff is capped at maxRetryDelay instead of about
// 17 minutes, so that a failing backend recovers within a minute of its
// source coming back, however long the outage was.
const (
	retryBaseDelay = 5 * time.Millisecond
	maxRetryDelay  = time.Minute
	retryRate      = rate.Limit(10)
	retryBurst     = 100
)

// retryLimiter is the work queue's limiter for failing passes.
func retryLimiter() workqueue.TypedRateLimiter[ctrl.Request] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[ctrl.Request](retryBaseDelay, maxRetryDelay),
		fairshare.RetryBuckets{Buckets: newRetryBuckets()},
	)
}

// newRetryBuckets are the token buckets, one per namespace, that retries
// take from.
func newRetryBuckets() *fairshare.Buckets { return fairshare.NewBuckets(retryRate, retryBurst) }

// retryDelay is the backoff before retry number attempt (from 0):
// retryBaseDelay doubled per attempt before it, capped at maxRetryDelay.
func retryDelay(attempt int) time.Duration {
	d := retryBaseDelay
	for range attempt {
		if d >= maxRetryDelay/2 {
			return maxRetryDelay
		}
		d *= 2
	}
	return d
}

// SetupWithManager registers the controller: it watches ExternalBackends,
// the Services and EndpointSlices they own, so drift is reverted, the
// cluster's ServiceCIDRs, whose families decide what can be published, and
// the cluster's own hosts (Nodes, the API server), which no endpoint may be.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	families, cidrs, err := familiesOfCluster(mgr, r.Client)
	if err != nil {
		return err
	}
	hosts, hostWatches, err := r.watchHosts(mgr, families)
	if err != nil {
		return err
	}
	r.families = hosts
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &v1alpha1.ExternalBackend{}, providerRefIndex, providerRefs); err != nil {
		return fmt.Errorf("indexing ExternalBackends by provider: %w", err)
	}
	// A label selector on a cache list is matched against every object of
	// the namespace: with thousands of backends in one namespace, each
	// reconcile's reads would cost as much as the namespace is big.
	for _, o := range []client.Object{&corev1.Service{}, slicestore.SliceMeta()} {
		if err := mgr.GetFieldIndexer().IndexField(context.Background(), o, BackendIndex, backendOf); err != nil {
			return fmt.Errorf("indexing %T by backend: %w", o, err)
		}
	}
	r.checks = speccheck.New()
	r.store = newStore(r.Client, r.APIReader)
	r.connections = connections.Reader{Client: r.Client, Namespace: r.Config.Namespace, Kinds: r.kinds()}
	if r.Waker != nil {
		// A call that outlasts its pass wakes the backend when it answers.
		track := func(key types.NamespacedName) func() { return r.Watchdog.Begin(controllerName, key.String()) }
		r.lookups = newLookups(r.Providers.Resolve, r.Waker.Wake, track, r.Config.ResolveTimeout)
	}
	r.recreations = newRetryBuckets()
	r.catchUps = newCatchUpBuckets(r.Config.StatusCatchUpRate)
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	byBackendLabel := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []ctrl.Request {
		key, ok := slicestore.BackendKey(o)
		if !ok {
			return nil
		}
		return []ctrl.Request{{NamespacedName: key}}
	})
	b := ctrl.NewControllerManagedBy(mgr).
		Watches(&v1alpha1.ExternalBackend{}, unhandledFirst(), builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Watches(&corev1.Service{}, byBackendLabel, builder.WithPredicates(r.store.NotEchoes(kindService))).
		// The store's ledger sees every delete, ours included, before the
		// echoes of our own writes are dropped.
		// Slices as metadata only: see internal/slicestore.
		Watches(&discoveryv1.EndpointSlice{}, byBackendLabel, builder.OnlyMetadata,
			builder.WithPredicates(r.store.SliceDeletes(), r.store.NotEchoes(kindEndpointSlice))).
		Named(controllerName).
		WithOptions(controller.Options{RateLimiter: retryLimiter(), MaxConcurrentReconciles: r.Workers + 1,
			NewQueue: r.newQueue, LogConstructor: backendLogger(mgr.GetLogger())})
	// Admission reads providers, namespaces and Secrets: a change to any
	// of them can admit, refuse or reconnect a backend's sources.
	b = b.Watches(&v1alpha1.BackendProvider{}, handler.EnqueueRequestsFromMapFunc(r.backendsUsing)).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.backendsIn),
			builder.WithPredicates(predicate.LabelChangedPredicate{}))
	if r.Config.Namespace != "" {
		b = b.Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.backendsUsingSecret))
	}
	// A Node's addresses (and Pod ranges) and the API server's change
	// what every backend may publish; a Node's other updates (heartbeats,
	// conditions) change nothing here.
	for _, w := range hostWatches {
		b = b.WatchesRawSource(w)
	}
	if cidrs {
		// A family added or removed changes what every backend can publish.
		b = b.Watches(&networkingv1.ServiceCIDR{}, handler.EnqueueRequestsFromMapFunc(r.everyBackend))
	}
	if r.Waker != nil {
		b = b.WatchesRawSource(source.Channel(r.Waker.events, &handler.EnqueueRequestForObject{}))
	}
	return b.Complete(r.Watchdog.Wrap(controllerName, r))
}

// controllerName names the controller: its work queue, its metrics, the
// stuck-reconcile check's records.
const controllerName = "externalbackend"

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
	for _, name := range r.connections.ProvidersNaming(ctx, o.GetName()) {
		out = append(out, r.backends(ctx, client.MatchingFields{providerRefIndex: name})...)
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

// unhandledFirst enqueues ExternalBackends as controller-runtime's own
// handler does, except for the cache's initial list: there, a backend whose
// spec this controller has not handled yet (status.observedGeneration
// behind metadata.generation: edited while no controller ran, during a
// restart or a leader change) keeps the normal priority, and only the
// others go behind every change. Otherwise an edit made while a new
// controller starts would wait for it to look at every backend (58 s at
// 20,000 backends in the ceiling benchmark).
func unhandledFirst() handler.EventHandler {
	base := &handler.EnqueueRequestForObject{}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[ctrl.Request]) {
			pq, ok := q.(priorityqueue.PriorityQueue[ctrl.Request])
			if !ok || e.Object == nil {
				base.Create(ctx, e, q)
				return
			}
			// Explicit either way: handler.Funcs gives the initial list a
			// low default priority of its own.
			priority := 0
			if e.IsInInitialList && handled(e.Object) {
				priority = handler.LowPriority
			}
			pq.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(priority)}, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(e.Object)})
		},
		UpdateFunc:  base.Update,
		DeleteFunc:  base.Delete,
		GenericFunc: base.Generic,
	}
}

// handled tells whether the backend's status says its spec was handled.
func handled(o client.Object) bool {
	xb, ok := o.(*v1alpha1.ExternalBackend)
	return ok && xb.Status.ObservedGeneration == xb.Generation
}

// backendLogger gives each reconcile's log the keys controller-runtime's
// builder gives a controller built with For(&ExternalBackend{}), which
// takes no handler of its own: the backend is watched with unhandledFirst.
func backendLogger(base logr.Logger) func(*ctrl.Request) logr.Logger {
	log := base.WithValues("controller", "externalbackend",
		"controllerGroup", v1alpha1.GroupVersion.Group, "controllerKind", "ExternalBackend")
	return func(req *ctrl.Request) logr.Logger {
		if req == nil {
			return log
		}
		return log.WithValues("ExternalBackend", klog.KRef(req.Namespace, req.Name), "namespace", req.Namespace, "name", req.Name)
	}
}

// newQueue makes the controller's work queue: fair between namespaces
// (fairshare.Queue), each holding at most its share of the workers while
// another namespace waits, with one worker more than r.Workers kept for a
// namespace that runs nothing; the client's rate limiter, when it is the fair
// one, counts the namespaces with work in it as asking.
func (r *Reconciler) newQueue(name string, limiter workqueue.TypedRateLimiter[ctrl.Request]) workqueue.TypedRateLimitingInterface[ctrl.Request] {
	q := fairshare.NewQueue(fairshare.QueueOptions{
		Name: name, Share: cmp.Or(r.Config.NamespaceShare, fairshare.ShareOf(r.Workers)), Workers: r.Workers + 1,
		RateLimiter: limiter, PassedOver: r.Metrics.passedOver(),
	})
	if r.ClientLimiter != nil {
		r.ClientLimiter.CountDemand(q)
	}
	return q
}
