package providers

import (
	"context"

	"github.com/backendslice/backendslice/api/v1alpha1"
)

// Trust is how a connection proves whom it talks to and who it is: the
// server's CA and name, and a token.
type Trust struct {
	// CAPEM verifies the server's certificate; empty for the system's roots.
	CAPEM []byte
	// ServerName is verified in the server's certificate when set.
	ServerName string
	// Token returns the current token; it never fails for a provider
	// that names none.
	Token func() (string, error)
}

// ReadTrust reads the CA now, and the token now and again before every
// request: now, so that a missing Secret makes the provider unusable at
// once, not at the server's next answer; before every request, from the
// cache (no round trip), so that a rotated token applies without a
// reconcile.
func ReadTrust(ctx context.Context, bp *v1alpha1.BackendProvider, secrets SecretReader, tls *v1alpha1.ProviderTLS, tokenRef *v1alpha1.SecretKeyReference) (Trust, error) {
	user := "BackendProvider " + bp.Name
	t := Trust{Token: func() (string, error) { return "", nil }}
	if tls != nil {
		t.ServerName = tls.ServerName
		if tls.CASecretRef != nil {
			ca, err := secrets.SecretValue(ctx, user, *tls.CASecretRef)
			if err != nil {
				return Trust{}, err
			}
			t.CAPEM = ca
		}
	}
	if ref := tokenRef; ref != nil {
		if _, err := secrets.SecretValue(ctx, user, *ref); err != nil {
			return Trust{}, err
		}
		t.Token = func() (string, error) {
			v, err := secrets.SecretValue(context.Background(), user, *ref)
			return string(v), err
		}
	}
	return t, nil
}

// TrustSecrets are the names of the Secrets of a token and a CA.
func TrustSecrets(tls *v1alpha1.ProviderTLS, tokenRef *v1alpha1.SecretKeyReference) []string {
	var names []string
	if tokenRef != nil {
		names = append(names, tokenRef.Name)
	}
	if tls != nil && tls.CASecretRef != nil {
		names = append(names, tls.CASecretRef.Name)
	}
	return names
}
