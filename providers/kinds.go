package providers

import (
	"cmp"
	"context"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"path"
	"strings"
	"time"

	"github.com/backendslice/backendslice/api/v1alpha1"
)

// SourceKind is one row of the table of source kinds: everything the
// controller knows about a kind outside its Provider. Adding a kind is
// adding a row; every reader (the registry, admission, connections, the
// status of BackendProviders, the controller's spec checks) reads the rows.
type SourceKind struct {
	// Kind is the kind's name: for the built-in kinds, the field of
	// spec.sources[] it is set in.
	Kind Kind
	// Of tells whether a source is of this kind. The first row that claims
	// a source has it, so a row may narrow a field another row has.
	Of func(v1alpha1.Source) bool
	// Provider is the BackendProvider kind that serves sources of this
	// kind; several source kinds may share one (awsRDS and awsEC2: aws).
	Provider *ProviderKind
	// Admit holds the kind's own admission rules, checked after the
	// namespace and kind rules every kind has (so p is of Provider's kind):
	// why p may not serve src, or nil. Nil Admit: no rule of its own.
	Admit func(p *v1alpha1.BackendProvider, src v1alpha1.Source) *Denial
	// Check holds the controller's own checks of a source this row claims,
	// for what admission cannot refuse (objects stored before a rule
	// existed): a message naming the field and the fix, or "". Nil Check:
	// none.
	Check func(src v1alpha1.Source) string
}

// ProviderKind is one kind of BackendProvider: a connection the platform
// team sets up, named by spec.<kind> and reported as status.kind.
type ProviderKind struct {
	// Name is the kind as status.kind reports it and refusals name it.
	Name string
	// Of tells whether a BackendProvider's spec is of this kind.
	Of func(v1alpha1.BackendProviderSpec) bool
	// Connect builds the connection sources get through bp, a provider
	// this kind's Of claims, reading the Secrets it names through secrets;
	// it returns nil when bp only admits (the provider then uses the
	// controller's own connection). Nil Connect: the kind never has a
	// connection of its own.
	Connect func(ctx context.Context, bp *v1alpha1.BackendProvider, secrets SecretReader) (*Connection, error)
	// Secrets names the Secrets of the controller's namespace that bp (of
	// this kind) reads, so that a changed Secret wakes what uses it. Nil:
	// none.
	Secrets func(bp *v1alpha1.BackendProvider) []string
	// FlagPrefix names the controller flags (--<FlagPrefix>*) that
	// configure the controller's own connection of this kind, the one
	// sources without a providerRef use. The flags are bound in
	// internal/cli, whose tests check that each prefix names flags there;
	// "" when the kind has no connection to configure.
	FlagPrefix string
}

// SecretReader reads one key of a Secret the platform team named in a
// BackendProvider; user names what refers to it, for the messages.
type SecretReader interface {
	SecretValue(ctx context.Context, user string, ref v1alpha1.SecretKeyReference) ([]byte, error)
}

// Denial is a kind's own reason to refuse a source through a
// BackendProvider; admission adds the provider's name.
type Denial struct {
	// Rule names the rule, as status and events show it.
	Rule string
	// Message names the field, the provider and the fix.
	Message string
}

// Rules of the consul row: a source reading outside what the provider's
// spec.consul.allowed* globs let it read.
const (
	RuleAllowedServices    = "AllowedServices"
	RuleAllowedDatacenters = "AllowedDatacenters"
	RuleAllowedNamespaces  = "AllowedNamespaces"
	RuleAllowedPartitions  = "AllowedPartitions"
)

// Kinds is a table of source kinds, in the order their Of functions are asked.
type Kinds []SourceKind

// BuiltinKinds is the table of the kinds this controller has, one per
// field of v1alpha1.Source. It is built afresh at each call: no caller can
// change another's table.
func BuiltinKinds() Kinds {
	static := &ProviderKind{Name: "static", Of: func(s v1alpha1.BackendProviderSpec) bool { return s.Static != nil }}
	dns := &ProviderKind{Name: "dns", Of: func(s v1alpha1.BackendProviderSpec) bool { return s.DNS != nil },
		Connect: connectDNS, FlagPrefix: "dns-"}
	consul := &ProviderKind{Name: "consul", Of: func(s v1alpha1.BackendProviderSpec) bool { return s.Consul != nil },
		Connect: connectConsul, Secrets: consulSecrets, FlagPrefix: "consul-"}
	aws := &ProviderKind{Name: "aws", Of: func(s v1alpha1.BackendProviderSpec) bool { return s.AWS != nil },
		Connect: connectAWS, FlagPrefix: "aws-"}
	// A plugin has no connection of the controller's own: its sources
	// always name a BackendProvider (the CRD requires providerRef).
	plugin := &ProviderKind{Name: "plugin", Of: func(s v1alpha1.BackendProviderSpec) bool { return s.Plugin != nil },
		Connect: connectPlugin, Secrets: pluginSecrets}
	return Kinds{
		{Kind: KindStatic, Of: func(s v1alpha1.Source) bool { return s.Static != nil }, Provider: static},
		{Kind: KindDNS, Of: func(s v1alpha1.Source) bool { return s.DNS != nil }, Provider: dns},
		{Kind: KindConsul, Of: func(s v1alpha1.Source) bool { return s.Consul != nil }, Provider: consul,
			Admit: admitConsul},
		{Kind: KindAWSRDS, Of: func(s v1alpha1.Source) bool { return s.AWSRDS != nil }, Provider: aws,
			Check: checkRDSSelects},
		{Kind: KindAWSEC2, Of: func(s v1alpha1.Source) bool { return s.AWSEC2 != nil }, Provider: aws,
			Check: checkEC2Selects},
		// Admission refuses what selects nothing: every cache source names
		// one cache, and the CRD has refused empty names since these kinds
		// exist, so no stored object needs a check of the controller's.
		{Kind: KindAWSElastiCache, Of: func(s v1alpha1.Source) bool { return s.AWSElastiCache != nil }, Provider: aws},
		{Kind: KindAWSMemoryDB, Of: func(s v1alpha1.Source) bool { return s.AWSMemoryDB != nil }, Provider: aws},
		{Kind: KindPlugin, Of: func(s v1alpha1.Source) bool { return s.Plugin != nil }, Provider: plugin},
	}
}

// OrBuiltin is ks, or BuiltinKinds when ks is nil: a reader whose table
// its caller did not set reads the built-in kinds.
func (ks Kinds) OrBuiltin() Kinds {
	if ks == nil {
		return BuiltinKinds()
	}
	return ks
}

// Of is the row of src's kind, nil when no row claims it.
func (ks Kinds) Of(src v1alpha1.Source) *SourceKind {
	for i := range ks {
		if ks[i].Of(src) {
			return &ks[i]
		}
	}
	return nil
}

// KindOf is src's kind, "" when no row claims it (admission makes that
// impossible for the built-in kinds).
func (ks Kinds) KindOf(src v1alpha1.Source) Kind {
	if k := ks.Of(src); k != nil {
		return k.Kind
	}
	return ""
}

// ProviderOf is the kind of a BackendProvider spec, nil when no row's
// provider claims it.
func (ks Kinds) ProviderOf(spec v1alpha1.BackendProviderSpec) *ProviderKind {
	for _, k := range ks {
		if k.Provider.Of(spec) {
			return k.Provider
		}
	}
	return nil
}

// SourceKindsOf are the source kinds the BackendProvider kind p serves,
// in the table's order; none for nil.
func (ks Kinds) SourceKindsOf(p *ProviderKind) []Kind {
	var out []Kind
	for _, k := range ks {
		if p != nil && k.Provider == p {
			out = append(out, k.Kind)
		}
	}
	return out
}

// ProviderKindOf is bp's kind as status.kind reports it, "" when no row
// claims it.
func (ks Kinds) ProviderKindOf(bp *v1alpha1.BackendProvider) string {
	if p := ks.ProviderOf(bp.Spec); p != nil {
		return p.Name
	}
	return ""
}

// Connect is the providers' view of bp: its kind's connection, nil for a
// provider that only admits (static, or dns without resolvers of its own,
// which asks the controller's).
func (ks Kinds) Connect(ctx context.Context, bp *v1alpha1.BackendProvider, secrets SecretReader) (*Connection, error) {
	p := ks.ProviderOf(bp.Spec)
	if p == nil || p.Connect == nil {
		return nil, nil
	}
	return p.Connect(ctx, bp, secrets)
}

// SecretsOf are the names of the Secrets bp reads.
func (ks Kinds) SecretsOf(bp *v1alpha1.BackendProvider) []string {
	p := ks.ProviderOf(bp.Spec)
	if p == nil || p.Secrets == nil {
		return nil
	}
	return p.Secrets(bp)
}

// Check is the controller's own check of src's kind: a message naming the
// field and the fix, or "".
func (ks Kinds) Check(src v1alpha1.Source) string {
	if k := ks.Of(src); k != nil && k.Check != nil {
		return k.Check(src)
	}
	return ""
}

// KindOf returns the kind of a source among the built-in kinds: the one
// field that is set, or "" when none is (admission validation makes that
// impossible for stored objects).
func KindOf(s v1alpha1.Source) Kind { return BuiltinKinds().KindOf(s) }

// NewConnection starts the connection of bp: its name, and a key that
// changes with bp's identity and generation and with whatever else the
// connection depends on (also: a CA read from a Secret).
func NewConnection(bp *v1alpha1.BackendProvider, also ...[]byte) *Connection {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d", bp.UID, bp.Generation)
	for _, b := range also {
		_, _ = h.Write(b)
	}
	return &Connection{Name: bp.Name, Key: hex.EncodeToString(h.Sum(nil))}
}

// userOf names bp in the messages about the Secrets it reads.
func userOf(bp *v1alpha1.BackendProvider) string { return "BackendProvider " + bp.Name }

// connectDNS asks bp's own resolvers; without any, bp only admits.
func connectDNS(_ context.Context, bp *v1alpha1.BackendProvider, _ SecretReader) (*Connection, error) {
	if len(bp.Spec.DNS.Resolvers) == 0 {
		return nil, nil
	}
	conn := NewConnection(bp)
	conn.DNS = &DNSConnection{Resolvers: bp.Spec.DNS.Resolvers}
	return conn, nil
}

// connectConsul reads the CA now, and the token now and again before every
// query, so that a rotated token applies without a new reconcile.
func connectConsul(ctx context.Context, bp *v1alpha1.BackendProvider, secrets SecretReader) (*Connection, error) {
	s := bp.Spec.Consul
	t, err := readTrust(ctx, bp, secrets, s.TLS, s.TokenSecretRef)
	if err != nil {
		return nil, err
	}
	// A new CA is a new connection; a rotated token is not (see Key).
	conn := NewConnection(bp, t.caPEM)
	conn.Consul = &ConsulConnection{Address: s.Address, Datacenter: s.Datacenter, Token: t.token,
		CAPEM: t.caPEM, ServerName: t.serverName}
	return conn, nil
}

// consulSecrets are the token's and the CA's Secrets.
func consulSecrets(bp *v1alpha1.BackendProvider) []string {
	c := bp.Spec.Consul
	return trustSecrets(c.TLS, c.TokenSecretRef)
}

// connectPlugin reads the plugin's CA and token as connectConsul does,
// and fills in the bounds the spec leaves unset.
func connectPlugin(ctx context.Context, bp *v1alpha1.BackendProvider, secrets SecretReader) (*Connection, error) {
	s := bp.Spec.Plugin
	t, err := readTrust(ctx, bp, secrets, s.TLS, s.TokenSecretRef)
	if err != nil {
		return nil, err
	}
	pc := &PluginConnection{URL: s.URL, CAPEM: t.caPEM, ServerName: t.serverName, Token: t.token,
		Timeout: DefaultPluginTimeout, MaxEndpoints: DefaultPluginMaxEndpoints, MaxConcurrentRequests: DefaultPluginConcurrency}
	if s.Timeout != nil {
		pc.Timeout = s.Timeout.Duration
	}
	if s.MaxEndpoints > 0 {
		pc.MaxEndpoints = int(s.MaxEndpoints)
	}
	if s.MaxConcurrentRequests > 0 {
		pc.MaxConcurrentRequests = int(s.MaxConcurrentRequests)
	}
	conn := NewConnection(bp, t.caPEM)
	conn.Plugin = pc
	return conn, nil
}

// Defaults of a plugin BackendProvider's bounds (spec.plugin).
const (
	DefaultPluginTimeout      = 5 * time.Second
	DefaultPluginMaxEndpoints = 1000
	DefaultPluginConcurrency  = 8
)

// pluginSecrets are the token's and the CA's Secrets.
func pluginSecrets(bp *v1alpha1.BackendProvider) []string {
	p := bp.Spec.Plugin
	return trustSecrets(p.TLS, p.TokenSecretRef)
}

// trust is how a connection proves whom it talks to and who it is: the
// server's CA and name, and a token.
type trust struct {
	caPEM      []byte
	serverName string
	// token returns the current token; it never fails for a provider
	// that names none.
	token func() (string, error)
}

// readTrust reads the CA now, and the token now and again before every
// request: now, so that a missing Secret makes the provider unusable at
// once, not at the server's next answer; before every request, from the
// cache (no round trip), so that a rotated token applies without a
// reconcile.
func readTrust(ctx context.Context, bp *v1alpha1.BackendProvider, secrets SecretReader, tls *v1alpha1.ProviderTLS, tokenRef *v1alpha1.SecretKeyReference) (trust, error) {
	user := userOf(bp)
	t := trust{token: func() (string, error) { return "", nil }}
	if tls != nil {
		t.serverName = tls.ServerName
		if tls.CASecretRef != nil {
			ca, err := secrets.SecretValue(ctx, user, *tls.CASecretRef)
			if err != nil {
				return trust{}, err
			}
			t.caPEM = ca
		}
	}
	if ref := tokenRef; ref != nil {
		if _, err := secrets.SecretValue(ctx, user, *ref); err != nil {
			return trust{}, err
		}
		t.token = func() (string, error) {
			v, err := secrets.SecretValue(context.Background(), user, *ref)
			return string(v), err
		}
	}
	return t, nil
}

// trustSecrets are the names of the Secrets of a token and a CA.
func trustSecrets(tls *v1alpha1.ProviderTLS, tokenRef *v1alpha1.SecretKeyReference) []string {
	var names []string
	if tokenRef != nil {
		names = append(names, tokenRef.Name)
	}
	if tls != nil && tls.CASecretRef != nil {
		names = append(names, tls.CASecretRef.Name)
	}
	return names
}

// connectAWS is the account and region of bp; the controller's own
// credentials assume its role.
func connectAWS(_ context.Context, bp *v1alpha1.BackendProvider, _ SecretReader) (*Connection, error) {
	s := bp.Spec.AWS
	conn := NewConnection(bp)
	conn.AWS = &AWSConnection{Region: s.Region, AssumeRoleARN: s.AssumeRoleARN, EndpointURL: s.EndpointURL, ConsentTag: s.ConsentTag}
	return conn, nil
}

// admitConsul refuses a source that reads a service, datacenter, namespace
// or partition outside the provider's allowed* globs: the token reads for
// every namespace the provider admits, so the platform team narrows what
// any of them may ask of it.
func admitConsul(p *v1alpha1.BackendProvider, src v1alpha1.Source) *Denial {
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
		return &Denial{Rule: k.rule, Message: fmt.Sprintf(
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

// checkEC2Selects refuses an EC2 source that selects nothing: the provider
// reads an empty selector as "no filter", every instance in the region.
func checkEC2Selects(src v1alpha1.Source) string {
	s := src.AWSEC2
	if len(s.InstanceIDs) > 0 || len(s.Tags) > 0 {
		return ""
	}
	return fmt.Sprintf(
		"spec.sources[%s].awsEC2: no instance IDs and no tags would select every instance in %s; list instance IDs or name at least one tag",
		src.Name, s.Region)
}

// checkRDSSelects refuses an RDS source that selects nothing, as
// checkEC2Selects does for EC2.
func checkRDSSelects(src v1alpha1.Source) string {
	s := src.AWSRDS
	if s.DBInstanceIdentifier != "" || s.DBClusterIdentifier != "" || len(s.Tags) > 0 {
		return ""
	}
	return fmt.Sprintf(
		"spec.sources[%s].awsRDS: no identifier and no tags would select every DB instance in %s; set dbInstanceIdentifier, dbClusterIdentifier or at least one tag",
		src.Name, s.Region)
}
