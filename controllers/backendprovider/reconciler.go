// Package backendprovider holds the BackendProvider status controller: it
// reports on each provider whether it can be used (its settings parse and
// its Secrets are there, read as the ExternalBackend reconciler reads them,
// so that what status says is what sources get) and, for a kind with a
// connection, whether that connection works: a cheap check through the
// provider of its kind, rate-limited per provider, whose verdict turns
// only after several results in a row (health.go).
package backendprovider

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/connections"
	"github.com/backendslice/backendslice/internal/tenancy"
	"github.com/backendslice/backendslice/internal/watchdog"
	"github.com/backendslice/backendslice/providers"
)

// +kubebuilder:rbac:groups=backendslice.io,resources=backendproviders,verbs=list;watch
// +kubebuilder:rbac:groups=backendslice.io,resources=backendproviders/status,verbs=patch

// Reconciler patches each BackendProvider's status: Ready, Stalled while
// Ready is False, its kind and observedGeneration.
type Reconciler struct {
	// Client reads providers and Secrets from the cache, and patches status.
	Client client.Client
	// Namespace is the controller's own: the only one whose Secrets it reads.
	Namespace string
	// Kinds is the table of source kinds that tells each provider's kind,
	// connection and Secrets: the registry's (Registry.Kinds), so that
	// status tells what sources get.
	Kinds providers.Kinds
	// Checker checks a provider's connection with the provider of its kind
	// (the registry); nil checks nothing, and Ready says only whether the
	// settings and Secrets can be used.
	Checker ConnectionChecker
	// Checks configure the checks; zero fields take their defaults.
	Checks CheckOptions
	// Clock tells when checks are due; nil is the real clock.
	Clock clock.PassiveClock
	// Watchdog records each reconcile for the stuck-loop liveness check;
	// nil when the check is off.
	Watchdog *watchdog.Watchdog
	// Metrics export each provider's Ready condition; nil exports nothing.
	Metrics *Metrics

	// book holds what the checks found, by provider.
	book healthBook
}

// ConnectionChecker checks the connection of a BackendProvider: the
// registry of providers (providers.Registry.CheckConnection). checked is
// false when bp's kind has no check.
type ConnectionChecker interface {
	CheckConnection(ctx context.Context, bp *v1alpha1.BackendProvider, conn *providers.Connection) (checked bool, err error)
}

// Reconcile patches the provider's status when it changed, and asks to be
// called again when its connection's next check is due.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	bp := &v1alpha1.BackendProvider{}
	if err := r.Client.Get(ctx, req.NamespacedName, bp); err != nil {
		if apierrors.IsNotFound(err) {
			r.book.forget(req.Name)
			r.Metrics.forget(req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := bp.DeepCopy()
	ready := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue,
		Reason: v1alpha1.ReasonProviderReady, Message: "the provider's settings and Secrets can be used", ObservedGeneration: bp.Generation}
	var result ctrl.Result
	if conn, err := r.usable(ctx, bp); err != nil {
		ready.Status, ready.Message = metav1.ConditionFalse, err.Error()
		ready.Reason = v1alpha1.ReasonInvalidProvider
		if errors.As(err, new(connections.SecretError)) {
			ready.Reason = v1alpha1.ReasonSecretNotFound
		}
		// Usable again, it is checked at once: its Secrets may hold
		// another token or CA than before.
		r.book.forget(bp.Name)
	} else if c, due, checked := r.verdict(ctx, bp, conn); checked {
		ready, result.RequeueAfter = c, due
	}
	bp.Status.Kind = r.Kinds.ProviderKindOf(bp)
	bp.Status.ObservedGeneration = bp.Generation
	meta.SetStatusCondition(&bp.Status.Conditions, ready)
	if stalled, ok := stalledCondition(ready); ok {
		meta.SetStatusCondition(&bp.Status.Conditions, stalled)
	} else {
		meta.RemoveStatusCondition(&bp.Status.Conditions, v1alpha1.ConditionStalled)
	}
	r.Metrics.condition(bp.Name, ready)
	if equality.Semantic.DeepEqual(before.Status, bp.Status) {
		return result, nil
	}
	// The provider may have gone while its connection was checked.
	err := r.Client.Status().Patch(ctx, bp, client.MergeFrom(before), client.FieldOwner(v1alpha1.FieldManager))
	return result, client.IgnoreNotFound(err)
}

// stalledCondition is kstatus's Stalled condition for a provider whose
// Ready condition is ready, with its reason and message; false (the
// condition removed) while Ready is True. Each reason of a False Ready
// waits on something the controller cannot change: the spec
// (InvalidProvider), a Secret (SecretNotFound), the plugin
// (UnsupportedProtocol) or the connection's far end, whose checks failed
// several times in a row (ConnectionFailed; checked on, with backoff).
// Without it kstatus-based tools (Flux, cli-utils, kpt) read a False Ready
// as InProgress, and wait out their timeout instead of failing.
func stalledCondition(ready metav1.Condition) (metav1.Condition, bool) {
	if ready.Status == metav1.ConditionTrue {
		return metav1.Condition{}, false
	}
	return metav1.Condition{Type: v1alpha1.ConditionStalled, Status: metav1.ConditionTrue,
		Reason: ready.Reason, Message: ready.Message, ObservedGeneration: ready.ObservedGeneration}, true
}

// verdict is the Ready condition the checks of bp's connection conn give,
// checking it first when a check is due, and how long until the next one
// is; checked is false when bp's kind has no check. A reconcile before
// the next check is due (a Secret changed, our own status patch) checks
// nothing: each provider is checked at most once per wait, however often
// it is reconciled.
func (r *Reconciler) verdict(ctx context.Context, bp *v1alpha1.BackendProvider, conn *providers.Connection) (metav1.Condition, time.Duration, bool) {
	if r.Checker == nil {
		return metav1.Condition{}, 0, false
	}
	opts, clk := r.checks(), r.clock()
	key := providers.NewConnection(bp).Key
	if conn != nil {
		key = conn.Key
	}
	h, ok := r.book.get(bp.Name)
	if !ok || h.key != key {
		h = seed(key, meta.FindStatusCondition(bp.Status.Conditions, v1alpha1.ConditionReady), bp.Generation)
	}
	if !clk.Now().Before(h.next) {
		cctx, cancel := context.WithTimeout(ctx, opts.Timeout)
		checked, err := r.Checker.CheckConnection(cctx, bp, conn)
		cancel()
		if !checked {
			r.book.forget(bp.Name)
			return metav1.Condition{}, 0, false
		}
		was := h
		h = h.record(clk.Now(), err, opts, jitter)
		logCheck(ctx, bp.Name, was, h, err)
	}
	r.book.put(bp.Name, h)
	return h.condition(bp.Generation), max(h.next.Sub(clk.Now()), time.Millisecond), true
}

// logCheck logs a verdict that turned, and each failed check at V(1):
// the platform team's detail behind Ready.
func logCheck(ctx context.Context, name string, was, now health, err error) {
	l := log.FromContext(ctx).WithValues("backendProvider", name)
	if !was.decided || was.connected != now.connected {
		l.Info("connection check verdict", "ready", now.connected, "error", err)
		return
	}
	if err != nil {
		l.V(1).Info("connection check failed", "failuresInARow", now.failures, "ready", now.connected, "error", err)
	}
}

// checks are the check options with their defaults; options that do not
// check were refused when the manager was built.
func (r *Reconciler) checks() CheckOptions {
	o, err := r.Checks.WithDefaults()
	if err != nil {
		o, _ = CheckOptions{}.WithDefaults()
	}
	return o
}

// clock is the reconciler's clock, the real one by default.
func (r *Reconciler) clock() clock.PassiveClock {
	if r.Clock == nil {
		return clock.RealClock{}
	}
	return r.Clock
}

// usable checks what sources of bp will need, and returns the connection
// they get: a namespace selector that parses, and the connection with its
// Secrets (its kind's Connect reads every Secret it names, the Consul
// token included, which sources read again at each query).
func (r *Reconciler) usable(ctx context.Context, bp *v1alpha1.BackendProvider) (*providers.Connection, error) {
	if _, err := tenancy.NamespaceAdmitted(bp.Spec.Namespaces, tenancy.Namespace{}); err != nil {
		return nil, errors.New("spec.namespaces.selector: " + err.Error())
	}
	return r.reader().Connection(ctx, bp)
}

// reader reads providers and Secrets as the ExternalBackend reconciler does.
func (r *Reconciler) reader() connections.Reader {
	return connections.Reader{Client: r.Client, Namespace: r.Namespace, Kinds: r.Kinds}
}

// providersNaming maps a Secret of the controller's namespace to the
// BackendProviders that name it.
func (r *Reconciler) providersNaming(ctx context.Context, o client.Object) []ctrl.Request {
	var out []ctrl.Request
	for _, name := range r.reader().ProvidersNaming(ctx, o.GetName()) {
		out = append(out, ctrl.Request{NamespacedName: types.NamespacedName{Name: name}})
	}
	return out
}

// SetupWithManager registers the BackendProvider status controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.BackendProvider{}).
		Named("backendprovider").
		WithOptions(controller.Options{MaxConcurrentReconciles: r.checks().Concurrency})
	if r.Namespace != "" {
		b = b.Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.providersNaming))
	}
	return b.Complete(r.Watchdog.Wrap("backendprovider", r))
}
