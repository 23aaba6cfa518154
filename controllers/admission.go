package controllers

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/controllers/tenancy"
	"github.com/backendslice/backendslice/providers"
)

// +kubebuilder:rbac:groups=backendslice.io,resources=backendproviders,verbs=list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=list;watch

// gate is what admission decided for one source: refused, or the
// connection its provider is asked with and the networks its endpoints
// may be in.
type gate struct {
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
}

// admit decides, for each source of xb, whether it may publish and through
// what, from the cache: the BackendProviders, the namespace's labels and
// the Secrets in the controller's namespace. It makes no provider call.
func (r *Reconciler) admit(ctx context.Context, xb *v1alpha1.ExternalBackend) ([]gate, error) {
	gates := make([]gate, len(xb.Spec.Sources))
	var ns *tenancy.Namespace
	for i, src := range xb.Spec.Sources {
		if src.ProviderRef == nil {
			gates[i].refused = tenancy.Unreferenced(src, r.Config.AllowSourcesWithoutProvider)
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
		if gates[i].refused = tenancy.Admit(bp, *ns, src); gates[i].refused != nil {
			continue
		}
		gates[i].allowed, gates[i].restricted = tenancy.AllowedPrefixes(bp)
		gates[i].conn, gates[i].unusable = r.connection(ctx, bp)
	}
	return gates, nil
}

// errSecret is a Secret a BackendProvider names that cannot be read.
type errSecret struct{ err error }

func (e errSecret) Error() string { return e.err.Error() }
func (e errSecret) Unwrap() error { return e.err }

// connection is the providers' view of bp: nil for a provider that only
// admits (static, or dns without resolvers of its own, which asks the
// controller's). Secrets are read now, except the Consul token, which the
// provider asks for before every query, so that a rotated token applies
// without a new reconcile.
func (r *Reconciler) connection(ctx context.Context, bp *v1alpha1.BackendProvider) (*providers.Connection, error) {
	conn := &providers.Connection{Name: bp.Name}
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d", bp.UID, bp.Generation)
	switch s := bp.Spec; {
	case s.DNS != nil && len(s.DNS.Resolvers) > 0:
		conn.DNS = &providers.DNSConnection{Resolvers: s.DNS.Resolvers}
	case s.Consul != nil:
		c := &providers.ConsulConnection{Address: s.Consul.Address, Datacenter: s.Consul.Datacenter, Token: func() (string, error) { return "", nil }}
		if tls := s.Consul.TLS; tls != nil {
			c.ServerName = tls.ServerName
			if tls.CASecretRef != nil {
				ca, err := r.secretValue(ctx, "BackendProvider "+bp.Name, *tls.CASecretRef)
				if err != nil {
					return nil, err
				}
				c.CAPEM = ca
				_, _ = h.Write(ca)
			}
		}
		if ref := s.Consul.TokenSecretRef; ref != nil {
			// Read now, so that a missing Secret makes the provider
			// unusable at once, not at Consul's next answer; and again
			// before every query, from the cache (no round trip), so that
			// a rotated token applies without a reconcile.
			if _, err := r.secretValue(ctx, "BackendProvider "+bp.Name, *ref); err != nil {
				return nil, err
			}
			c.Token = func() (string, error) {
				v, err := r.secretValue(context.Background(), "BackendProvider "+bp.Name, *ref)
				return string(v), err
			}
		}
		conn.Consul = c
	case s.AWS != nil:
		conn.AWS = &providers.AWSConnection{Region: s.AWS.Region, AssumeRoleARN: s.AWS.AssumeRoleARN,
			EndpointURL: s.AWS.EndpointURL, ConsentTag: s.AWS.ConsentTag}
	default:
		return nil, nil
	}
	conn.Key = hex.EncodeToString(h.Sum(nil))
	return conn, nil
}

// secretValue reads one key of a Secret in the controller's namespace,
// the only namespace whose Secrets the controller can read; user names
// what refers to it, for the messages.
func (r *Reconciler) secretValue(ctx context.Context, user string, ref v1alpha1.SecretKeyReference) ([]byte, error) {
	if r.Config.Namespace == "" {
		return nil, errSecret{fmt.Errorf("%s names Secret %s, but the controller does not know its own namespace; set --controller-namespace or $POD_NAMESPACE (the chart sets it)", user, ref.Name)}
	}
	sec := &corev1.Secret{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: r.Config.Namespace, Name: ref.Name}, sec); err != nil {
		if apierrors.IsNotFound(err) {
			err = errors.New("not found")
		}
		return nil, errSecret{fmt.Errorf("%s: Secret %s/%s: %w", user, r.Config.Namespace, ref.Name, err)}
	}
	v, ok := sec.Data[ref.Key]
	if !ok || len(v) == 0 {
		return nil, errSecret{fmt.Errorf("%s: Secret %s/%s has no key %s, or it is empty", user, r.Config.Namespace, ref.Name, ref.Key)}
	}
	return v, nil
}
