// Package connections reads BackendProviders and the Secrets they name, through
// a client.Reader, and builds from them the connections providers resolve
// sources with. Both controllers use it: the ExternalBackend reconciler to
// resolve, the BackendProvider status controller to report whether a
// provider can be used, so that what status says is what sources get.
package connections

import (
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
)

// Reader reads providers and, in the controller's own namespace only, the
// Secrets they name.
type Reader struct {
	// Client reads BackendProviders and Secrets (the manager's cache).
	Client client.Reader
	// Namespace is the controller's own: the only one whose Secrets it reads.
	Namespace string
	// Kinds is the table of source kinds that builds connections and tells
	// which Secrets a provider reads: the registry's.
	Kinds providers.Kinds
}

// SecretError is a Secret a BackendProvider names that cannot be read.
type SecretError struct{ Err error }

func (e SecretError) Error() string { return e.Err.Error() }
func (e SecretError) Unwrap() error { return e.Err }

// SecretValue reads one key of a Secret in the controller's namespace;
// user names what refers to it, for the messages.
func (r Reader) SecretValue(ctx context.Context, user string, ref v1alpha1.SecretKeyReference) ([]byte, error) {
	if r.Namespace == "" {
		return nil, SecretError{fmt.Errorf("%s names Secret %s, but the controller does not know its own namespace; set --controller-namespace or $POD_NAMESPACE (the chart sets it)", user, ref.Name)}
	}
	sec := &corev1.Secret{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: ref.Name}, sec); err != nil {
		if apierrors.IsNotFound(err) {
			err = errors.New("not found")
		}
		return nil, SecretError{fmt.Errorf("%s: Secret %s/%s: %w", user, r.Namespace, ref.Name, err)}
	}
	v, ok := sec.Data[ref.Key]
	if !ok || len(v) == 0 {
		return nil, SecretError{fmt.Errorf("%s: Secret %s/%s has no key %s, or it is empty", user, r.Namespace, ref.Name, ref.Key)}
	}
	return v, nil
}

// Connection is the providers' view of bp: nil for a provider that only
// admits (static, or dns without resolvers of its own, which asks the
// controller's). The kind's row in the table of source kinds builds it,
// reading the Secrets it names through r.
func (r Reader) Connection(ctx context.Context, bp *v1alpha1.BackendProvider) (*providers.Connection, error) {
	return r.Kinds.Connect(ctx, bp, r)
}

// ProvidersNaming are the names of the BackendProviders that read the
// Secret secret of the controller's namespace.
func (r Reader) ProvidersNaming(ctx context.Context, secret string) []string {
	var list v1alpha1.BackendProviderList
	if err := r.Client.List(ctx, &list); err != nil {
		// The cache lists without a round trip; it fails only while stopping.
		return nil
	}
	var out []string
	for _, bp := range list.Items {
		if slices.Contains(r.Kinds.SecretsOf(&bp), secret) {
			out = append(out, bp.Name)
		}
	}
	return out
}
