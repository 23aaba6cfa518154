package controllers

import (
	"context"
	"errors"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/controllers/tenancy"
)

// +kubebuilder:rbac:groups=backendslice.io,resources=backendproviders/status,verbs=patch

// providerStatus reports on each BackendProvider whether it can be used:
// its Secrets are there and its settings parse. It shares the
// ExternalBackend reconciler's reading of providers, so that what status
// says is what sources get.
type providerStatus struct {
	*Reconciler
}

// Reconcile patches the provider's status when it changed.
func (p providerStatus) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	bp := &v1alpha1.BackendProvider{}
	if err := p.Get(ctx, req.NamespacedName, bp); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := bp.DeepCopy()
	ready := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue,
		Reason: v1alpha1.ReasonProviderReady, Message: "the provider's settings and Secrets can be used", ObservedGeneration: bp.Generation}
	if err := p.usable(ctx, bp); err != nil {
		ready.Status, ready.Message = metav1.ConditionFalse, err.Error()
		ready.Reason = v1alpha1.ReasonInvalidProvider
		if errors.As(err, new(errSecret)) {
			ready.Reason = v1alpha1.ReasonSecretNotFound
		}
	}
	bp.Status.Kind = tenancy.KindOf(bp)
	bp.Status.ObservedGeneration = bp.Generation
	meta.SetStatusCondition(&bp.Status.Conditions, ready)
	if equality.Semantic.DeepEqual(before.Status, bp.Status) {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, p.Status().Patch(ctx, bp, client.MergeFrom(before), client.FieldOwner(FieldManager))
}

// usable checks what sources of bp will need: a namespace selector that
// parses, and the connection with its Secrets (the token included, which
// sources read only when they query).
func (r *Reconciler) usable(ctx context.Context, bp *v1alpha1.BackendProvider) error {
	if _, err := tenancy.NamespaceAdmitted(bp.Spec.Namespaces, tenancy.Namespace{}); err != nil {
		return errors.New("spec.namespaces.selector: " + err.Error())
	}
	conn, err := r.connection(ctx, bp)
	if err != nil {
		return err
	}
	if conn != nil && conn.Consul != nil {
		if _, err := conn.Consul.Token(); err != nil {
			return err
		}
	}
	return nil
}

// providersNaming maps a Secret of the controller's namespace to the
// BackendProviders that name it.
func (r *Reconciler) providersNaming(ctx context.Context, o client.Object) []ctrl.Request {
	var list v1alpha1.BackendProviderList
	if err := r.List(ctx, &list); err != nil {
		return nil
	}
	var out []ctrl.Request
	for _, bp := range list.Items {
		if slices.Contains(secretsOf(&bp), o.GetName()) {
			out = append(out, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&bp)})
		}
	}
	return out
}

// secretsOf are the names of the Secrets a provider reads.
func secretsOf(bp *v1alpha1.BackendProvider) []string {
	c := bp.Spec.Consul
	if c == nil {
		return nil
	}
	var names []string
	if c.TokenSecretRef != nil {
		names = append(names, c.TokenSecretRef.Name)
	}
	if c.TLS != nil && c.TLS.CASecretRef != nil {
		names = append(names, c.TLS.CASecretRef.Name)
	}
	return names
}

// setupProviderStatus registers the BackendProvider status controller.
func (r *Reconciler) setupProviderStatus(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.BackendProvider{}).
		Named("backendprovider")
	if r.Config.Namespace != "" {
		b = b.Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.providersNaming))
	}
	return b.Complete(providerStatus{r})
}
