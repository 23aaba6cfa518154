package providers

import (
	"context"
	"encoding/hex"
	"fmt"
	"hash/fnv"

	"github.com/backendslice/backendslice/api/v1alpha1"
)

// SecretReader reads one key of a Secret the platform team named in a
// BackendProvider; user names what refers to it, for the messages.
type SecretReader interface {
	SecretValue(ctx context.Context, user string, ref v1alpha1.SecretKeyReference) ([]byte, error)
}

// Connect is the providers' view of bp: nil for a provider that only
// admits (static, or dns without resolvers of its own, which asks the
// controller's). Secrets are read now, except the Consul token, which the
// provider asks for before every query, so that a rotated token applies
// without a new reconcile.
func Connect(ctx context.Context, bp *v1alpha1.BackendProvider, secrets SecretReader) (*Connection, error) {
	conn := &Connection{Name: bp.Name}
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d", bp.UID, bp.Generation)
	user := "BackendProvider " + bp.Name
	switch s := bp.Spec; {
	case s.DNS != nil && len(s.DNS.Resolvers) > 0:
		conn.DNS = &DNSConnection{Resolvers: s.DNS.Resolvers}
	case s.Consul != nil:
		c := &ConsulConnection{Address: s.Consul.Address, Datacenter: s.Consul.Datacenter, Token: func() (string, error) { return "", nil }}
		if tls := s.Consul.TLS; tls != nil {
			c.ServerName = tls.ServerName
			if tls.CASecretRef != nil {
				ca, err := secrets.SecretValue(ctx, user, *tls.CASecretRef)
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
			if _, err := secrets.SecretValue(ctx, user, *ref); err != nil {
				return nil, err
			}
			c.Token = func() (string, error) {
				v, err := secrets.SecretValue(context.Background(), user, *ref)
				return string(v), err
			}
		}
		conn.Consul = c
	case s.AWS != nil:
		conn.AWS = &AWSConnection{Region: s.AWS.Region, AssumeRoleARN: s.AWS.AssumeRoleARN,
			EndpointURL: s.AWS.EndpointURL, ConsentTag: s.AWS.ConsentTag}
	default:
		return nil, nil
	}
	conn.Key = hex.EncodeToString(h.Sum(nil))
	return conn, nil
}

// SecretsOf are the names of the Secrets a provider reads.
func SecretsOf(bp *v1alpha1.BackendProvider) []string {
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
