package plugin

import (
	"context"
	"time"

	"github.com/spf13/pflag"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
)

// Kind is the source kind of spec.sources[].plugin.
const Kind providers.Kind = "plugin"

// Defaults of a plugin BackendProvider's bounds (spec.plugin).
const (
	DefaultTimeout      = 5 * time.Second
	DefaultMaxEndpoints = 1000
	DefaultConcurrency  = 8
)

// Settings are a plugin BackendProvider's connection: where the plugin
// listens, how it is trusted, and the bounds the platform team set on it.
type Settings struct {
	// URL is the plugin's base URL; the protocol's paths are appended.
	URL string
	// CAPEM verifies the plugin's certificate (https); empty uses the
	// system's roots.
	CAPEM []byte
	// ServerName is verified in the plugin's certificate when set.
	ServerName string
	// Token returns the bearer token of the next request ("" for none),
	// asked before every request, so a rotated Secret applies at once.
	Token func() (string, error)
	// Timeout bounds one request that is not a long-poll.
	Timeout time.Duration
	// MaxEndpoints bounds the endpoints of one answer.
	MaxEndpoints int
	// MaxConcurrentRequests bounds the requests in flight, long-polls aside.
	MaxConcurrentRequests int
}

// Kinds are the rows of the table of source kinds this package serves:
// plugin sources, always through a plugin BackendProvider (the CRD
// requires providerRef), so the controller has no plugin connection of
// its own. Built afresh at each call.
func Kinds() providers.Kinds {
	p := &providers.ProviderKind{
		Name:       "plugin",
		Of:         func(s v1alpha1.BackendProviderSpec) bool { return s.Plugin != nil },
		Connect:    connect,
		Secrets:    secrets,
		FlagPrefix: "plugin-",
		Configure:  providers.Watching((*Options).BindFlags, func(o *Options) *int { return &o.NamespaceWatchFloor }, New),
	}
	return providers.Kinds{{Kind: Kind, Of: func(s v1alpha1.Source) bool { return s.Plugin != nil }, Provider: p}}
}

// BindFlags registers the --plugin-* flags of the controller on fs.
func (o *Options) BindFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.Wait, "plugin-wait", DefaultWait, "how long a plugin that pushes may hold a long-poll, sent as waitSeconds (1s to 10m; its changes come at once whatever this says; it bounds how often an idle source asks again)")
	fs.IntVar(&o.MaxWatches, "plugin-max-watches", DefaultMaxWatches, "most sources watched at once through one plugin BackendProvider; past it a new source fails transiently, naming the limit. While several namespaces hold watches, each may hold its share (see --namespace-watch-floor)")
}

// settingsOf are cc's plugin settings, nil for a connection of another kind.
func settingsOf(cc *providers.Connection) *Settings {
	s, _ := providers.SettingsOf[*Settings](cc)
	return s
}

// connect reads the plugin's CA and token (the token again before every
// request), and fills in the bounds the spec leaves unset.
func connect(ctx context.Context, bp *v1alpha1.BackendProvider, secrets providers.SecretReader) (*providers.Connection, error) {
	s := bp.Spec.Plugin
	t, err := providers.ReadTrust(ctx, bp, secrets, s.TLS, s.TokenSecretRef)
	if err != nil {
		return nil, err
	}
	pc := &Settings{URL: s.URL, CAPEM: t.CAPEM, ServerName: t.ServerName, Token: t.Token,
		Timeout: DefaultTimeout, MaxEndpoints: DefaultMaxEndpoints, MaxConcurrentRequests: DefaultConcurrency}
	if s.Timeout != nil {
		pc.Timeout = s.Timeout.Duration
	}
	if s.MaxEndpoints > 0 {
		pc.MaxEndpoints = int(s.MaxEndpoints)
	}
	if s.MaxConcurrentRequests > 0 {
		pc.MaxConcurrentRequests = int(s.MaxConcurrentRequests)
	}
	conn := providers.NewConnection(bp, t.CAPEM)
	conn.Settings = pc
	return conn, nil
}

// secrets are the token's and the CA's Secrets.
func secrets(bp *v1alpha1.BackendProvider) []string {
	p := bp.Spec.Plugin
	return providers.TrustSecrets(p.TLS, p.TokenSecretRef)
}
