// Package backendprovider holds the BackendProvider status controller: it
// reports on each provider whether it can be used (its settings parse and
// its Secrets are there), reading providers as the ExternalBackend
// reconciler does, so that what status says is what sources get.
package backendprovider

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/connections"
	"github.com/backendslice/backendslice/internal/tenancy"
	"github.com/backendslice/backendslice/providers"
)

// +kubebuilder:rbac:groups=backendslice.io,resources=backendproviders,verbs=list;watch
// +kubebuilder:rbac:groups=backendslice.io,resources=backendproviders/status,verbs=patch

// Reconciler patches each BackendProvider's status: Ready, its kind and
// observedGeneration.
type Reconciler struct {
	// Client reads providers and Secrets from the cache, and patches status.
	Client client.Client
	// Namespace is the controller's own: the only one whose Secrets it reads.
	Namespace string
	// Kinds is the table of source kinds that tells each provider's kind,
	// connection and Secrets: the registry's (Registry.Kinds), so that
	// status tells what sources get. Nil reads as providers.BuiltinKinds().
	Kinds providers.Kinds
}

// Reconcile patches the provider's status when it changed.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	bp := &v1alpha1.BackendProvider{}
	if err := r.Client.Get(ctx, req.NamespacedName, bp); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := bp.DeepCopy()
	ready := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue,
		Reason: v1alpha1.ReasonProviderReady, Message: "the provider's settings and Secrets can be used", ObservedGeneration: bp.Generation}
	if err := r.usable(ctx, bp); err != nil {
		ready.Status, ready.Message = metav1.ConditionFalse, err.Error()
		ready.Reason = v1alpha1.ReasonInvalidProvider
		if errors.As(err, new(connections.SecretError)) {
			ready.Reason = v1alpha1.ReasonSecretNotFound
		}
	}
	bp.Status.Kind = r.Kinds.OrBuiltin().ProviderKindOf(bp)
	bp.Status.ObservedGeneration = bp.Generation
	meta.SetStatusCondition(&bp.Status.Conditions, ready)
	if equality.Semantic.DeepEqual(before.Status, bp.Status) {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, r.Client.Status().Patch(ctx, bp, client.MergeFrom(before), client.FieldOwner(v1alpha1.FieldManager))
}

// usable checks what sources of bp will need: a namespace selector that
// parses, and the connection with its Secrets (its kind's Connect reads
// every Secret it names, the Consul token included, which sources read
// again at each query).
func (r *Reconciler) usable(ctx context.Context, bp *v1alpha1.BackendProvider) error {
	if _, err := tenancy.NamespaceAdmitted(bp.Spec.Namespaces, tenancy.Namespace{}); err != nil {
		return errors.New("spec.namespaces.selector: " + err.Error())
	}
	_, err := r.reader().Connection(ctx, bp)
	return err
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
		Named("backendprovider")
	if r.Namespace != "" {
		b = b.Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.providersNaming))
	}
	return b.Complete(r)
}
