package externalbackend

import (
	"context"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/tenancy"
	"github.com/backendslice/backendslice/providers"
)

// +kubebuilder:rbac:groups=backendslice.io,resources=backendproviders,verbs=list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=list;watch

// sourceAdmission is what admission decided for one source: refused, or the
// connection its provider is asked with and the networks its endpoints
// may be in.
type sourceAdmission struct {
	// refused is why the source may not publish; nil when it may.
	refused *tenancy.Refusal
	// unusable is set when the BackendProvider admits the source but
	// cannot be used (a Secret missing): a failure of the provider, so what
	// the source published is kept, as for any failing provider.
	unusable error
	conn     *providers.Connection
	// allowed, where restricted, are the provider's allowedCIDRs.
	allowed    []netip.Prefix
	restricted bool
	// probes is where the provider lets its endpoints be probed.
	probes tenancy.ProbeGrant
}

// admit decides, for each source of xb, whether it may publish and through
// what, from the cache: the BackendProviders, the namespace's labels and
// the Secrets in the controller's namespace. It makes no provider call.
func (r *Reconciler) admit(ctx context.Context, xb *v1alpha1.ExternalBackend) ([]sourceAdmission, error) {
	admissions := make([]sourceAdmission, len(xb.Spec.Sources))
	// The registry's table of kinds decides and connects, so that a source
	// is admitted by the kind it is resolved as.
	kinds := r.Providers.Kinds()
	var ns *tenancy.Namespace
	for i, src := range xb.Spec.Sources {
		if src.ProviderRef == nil {
			admissions[i].refused = tenancy.Unreferenced(src, r.Config.AllowSourcesWithoutProvider)
			continue
		}
		if ns == nil {
			n := &corev1.Namespace{}
			if err := r.Get(ctx, client.ObjectKey{Name: xb.Namespace}, n); err != nil {
				return nil, readFailed("reading namespace "+xb.Namespace, err)
			}
			ns = &tenancy.Namespace{Name: n.Name, Labels: n.Labels}
		}
		bp := &v1alpha1.BackendProvider{}
		switch err := r.Get(ctx, client.ObjectKey{Name: src.ProviderRef.Name}, bp); {
		case apierrors.IsNotFound(err):
			bp = nil
		case err != nil:
			return nil, readFailed("reading BackendProvider "+src.ProviderRef.Name, err)
		}
		if admissions[i].refused = tenancy.Admit(kinds, bp, *ns, src); admissions[i].refused != nil {
			continue
		}
		admissions[i].allowed, admissions[i].restricted = tenancy.AllowedPrefixes(bp)
		admissions[i].probes = tenancy.GrantOf(bp)
		admissions[i].conn, admissions[i].unusable = kinds.Connect(ctx, bp, r.connections)
	}
	return admissions, nil
}
