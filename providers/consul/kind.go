package consul

import (
	"cmp"
	"context"
	"fmt"
	"path"
	"strings"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
)

// Kind is the source kind of spec.sources[].consul.
const Kind providers.Kind = "consul"

// Rules of the consul row: a source reading outside what the provider's
// spec.consul.allowed* globs let it read.
const (
	RuleAllowedServices    = "AllowedServices"
	RuleAllowedDatacenters = "AllowedDatacenters"
	RuleAllowedNamespaces  = "AllowedNamespaces"
	RuleAllowedPartitions  = "AllowedPartitions"
)

// Settings are a Consul BackendProvider's connection: a Consul cluster's
// HTTP API.
type Settings struct {
	// Address is host:port, or a URL whose https:// scheme turns TLS on.
	Address string
	// CAPEM verifies the agent's certificate; setting it implies https.
	CAPEM []byte
	// ServerName is verified in the agent's certificate; implies https.
	ServerName string
	// Datacenter is queried where the source names none.
	Datacenter string
	// Token returns the current ACL token ("" for none). It is asked
	// before every query, so a rotated Secret applies without a restart.
	Token func() (string, error)
}

// Kinds are the rows of the table of source kinds this package serves:
// consul sources, through a Consul BackendProvider or the controller's
// own connection (the --consul-* flags). Built afresh at each call.
func Kinds() providers.Kinds {
	p := &providers.ProviderKind{
		Name:       "consul",
		Of:         func(s v1alpha1.BackendProviderSpec) bool { return s.Consul != nil },
		Connect:    connect,
		Secrets:    secrets,
		FlagPrefix: "consul-",
		Configure:  providers.Watching((*Options).BindFlags, func(o *Options) *int { return &o.NamespaceWatchFloor }, New),
	}
	return providers.Kinds{{Kind: Kind, Of: func(s v1alpha1.Source) bool { return s.Consul != nil }, Provider: p, Admit: admit}}
}

// settingsOf are cc's Consul settings, nil for a connection of another kind.
func settingsOf(cc *providers.Connection) *Settings {
	s, _ := providers.SettingsOf[*Settings](cc)
	return s
}

// connect reads the CA now, and the token now and again before every
// query, so that a rotated token applies without a new reconcile.
func connect(ctx context.Context, bp *v1alpha1.BackendProvider, secrets providers.SecretReader) (*providers.Connection, error) {
	s := bp.Spec.Consul
	t, err := providers.ReadTrust(ctx, bp, secrets, s.TLS, s.TokenSecretRef)
	if err != nil {
		return nil, err
	}
	// A new CA is a new connection; a rotated token is not (see Key).
	conn := providers.NewConnection(bp, t.CAPEM)
	conn.Settings = &Settings{Address: s.Address, Datacenter: s.Datacenter, Token: t.Token,
		CAPEM: t.CAPEM, ServerName: t.ServerName}
	return conn, nil
}

// secrets are the token's and the CA's Secrets.
func secrets(bp *v1alpha1.BackendProvider) []string {
	c := bp.Spec.Consul
	return providers.TrustSecrets(c.TLS, c.TokenSecretRef)
}

// admit refuses a source that reads a service, datacenter, namespace or
// partition outside the provider's allowed* globs: the token reads for
// every namespace the provider admits, so the platform team narrows what
// any of them may ask of it.
func admit(p *v1alpha1.BackendProvider, src v1alpha1.Source) *providers.Denial {
	c, s := p.Spec.Consul, src.Consul
	checks := []struct {
		rule, field, what string
		globs             []string
		value             string
	}{
		{RuleAllowedServices, "service", "services", c.AllowedServices, s.Service},
		// An empty datacenter is the provider's, else the agent's own,
		// which the platform team chose when it named the agent.
		{RuleAllowedDatacenters, "datacenter", "datacenters", c.AllowedDatacenters, cmp.Or(s.Datacenter, c.Datacenter)},
		{RuleAllowedNamespaces, "namespace", "namespaces", c.AllowedNamespaces, cmp.Or(s.Namespace, "default")},
		{RuleAllowedPartitions, "partition", "partitions", c.AllowedPartitions, cmp.Or(s.Partition, "default")},
	}
	for _, k := range checks {
		if k.value == "" || GlobsAllow(k.globs, k.value) {
			continue
		}
		return &providers.Denial{Rule: k.rule, Message: fmt.Sprintf(
			"spec.sources[%s].consul.%s: %q is not among the %s BackendProvider %q serves (spec.consul.allowed%s %v)",
			src.Name, k.field, k.value, k.what, p.Name, strings.ToUpper(k.what[:1])+k.what[1:], k.globs)}
	}
	return nil
}

// GlobsAllow tells whether a value (a Consul service, datacenter,
// namespace or partition) matches one of the globs (path.Match syntax: *
// and ?); no globs allow every value.
func GlobsAllow(globs []string, value string) bool {
	if len(globs) == 0 {
		return true
	}
	for _, g := range globs {
		// A glob admission let through is well formed; a malformed one
		// matches nothing.
		if ok, _ := path.Match(g, value); ok {
			return true
		}
	}
	return false
}
