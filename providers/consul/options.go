package consul

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/spf13/pflag"

	"github.com/backendslice/backendslice/internal/fairshare"
)

// Defaults of the options a zero value leaves unset.
const (
	// DefaultWaitTime is how long one blocking query waits for a change:
	// Consul's own default. A change is seen at once whatever it is; it
	// only bounds how often an idle watch asks again.
	DefaultWaitTime = 5 * time.Minute
	// MaxWaitTime is the longest wait Consul honours.
	MaxWaitTime = 10 * time.Minute
	// DefaultRetryDelay is the first pause after a failed query.
	DefaultRetryDelay = 500 * time.Millisecond
	// DefaultMaxRetryDelay caps the pause between failed queries.
	DefaultMaxRetryDelay = 30 * time.Second
	// queryRate and queryBurst rate-limit each watch's loop, as Consul asks
	// of blocking-query clients: an answer is no proof of change, and a loop
	// of immediate answers would load the servers. The burst lets isolated
	// changes through at once; only a sustained loop waits.
	queryRate  = 10 // queries a second
	queryBurst = 10
	// DefaultMaxWatches bounds the watches (each an open long-poll) one
	// connection runs: a Consul agent answers 429 past 200 connections
	// from one client address (limits.http_max_conns_per_client), and
	// every BackendProvider and the controller's own connection come
	// from the controller's one address. Past the bound a new service's
	// source fails, transiently, naming the limit; the watches already
	// running are not disturbed.
	DefaultMaxWatches = 150
	// DefaultMaxWatchesPerAgent bounds the watches of every connection
	// that reaches one agent address together: the agent's limit of 200
	// connections is per client address, whatever the connection, and
	// 50 are left to the controller's other requests (BackendProvider
	// checks, the first queries of new watches) and to anything else
	// that shares the controller's address.
	DefaultMaxWatchesPerAgent = 150
)

// Options configure how the provider reaches Consul. They come from the
// controller's flags: an ExternalBackend never carries an address or a secret.
// A zero field takes its default. What the options leave unset comes from
// Consul's usual environment variables, as for the consul CLI: the address
// (CONSUL_HTTP_ADDR), CA (CONSUL_CACERT), server name
// (CONSUL_TLS_SERVER_NAME), token when TokenFile is empty (CONSUL_HTTP_TOKEN,
// CONSUL_HTTP_TOKEN_FILE), and the namespace and partition of sources that
// name none (CONSUL_NAMESPACE, CONSUL_PARTITION).
type Options struct {
	// Address of the Consul agent's HTTP API: host:port, or a URL whose
	// https:// scheme turns TLS on.
	Address string
	// TokenFile holds the ACL token. It is read at start and before every
	// query, so a rotated token (a mounted Secret) is used without a restart.
	TokenFile string
	// CAFile holds the certificates that verify the agent; setting it
	// implies https.
	CAFile string
	// TLSServerName is the name verified in the agent's certificate when it
	// differs from the host in Address; setting it implies https.
	TLSServerName string
	// WaitTime is how long a blocking query waits for a change (at most
	// MaxWaitTime).
	WaitTime time.Duration
	// RetryDelay is the first pause after a failed query; it doubles, with
	// jitter, at each failure in a row up to MaxRetryDelay.
	RetryDelay, MaxRetryDelay time.Duration
	// MaxWatches bounds the watches of one connection (DefaultMaxWatches).
	MaxWatches int
	// MaxWatchesPerAgent bounds the watches of every connection that
	// reaches one Consul agent address (DefaultMaxWatchesPerAgent).
	MaxWatchesPerAgent int
	// NamespaceWatchFloor is the least share of each watch budget a
	// namespace is held to while other namespaces hold watches of it
	// (fairshare.DefaultSeatFloor); see fairshare.Seats.
	NamespaceWatchFloor int
}

// BindFlags registers the options as the controller's --consul-* flags.
func (o *Options) BindFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Address, "consul-address", o.Address,
		"Consul agent HTTP API as host:port or http(s)://host:port (default $CONSUL_HTTP_ADDR, else 127.0.0.1:8500)")
	fs.StringVar(&o.TokenFile, "consul-token-file", o.TokenFile,
		"file holding the Consul ACL token, read again before each query (default $CONSUL_HTTP_TOKEN_FILE or $CONSUL_HTTP_TOKEN)")
	fs.StringVar(&o.CAFile, "consul-ca-file", o.CAFile,
		"PEM file of the CA certificates that verify the Consul agent; implies https")
	fs.StringVar(&o.TLSServerName, "consul-tls-server-name", o.TLSServerName,
		"server name to verify in the Consul agent's certificate; implies https")
	fs.DurationVar(&o.WaitTime, "consul-wait-time", DefaultWaitTime,
		"how long a Consul blocking query waits for a change before asking again (1s to 10m)")
	fs.IntVar(&o.MaxWatches, "consul-max-watches", DefaultMaxWatches,
		"most services watched at once through one Consul connection (the controller's own, or one BackendProvider's); each watch holds one HTTP connection to the agent, which refuses a client past limits.http_max_conns_per_client (200 by default). While several namespaces hold watches, each may hold its share (see --namespace-watch-floor)")
	fs.IntVar(&o.MaxWatchesPerAgent, "consul-max-watches-per-agent", DefaultMaxWatchesPerAgent,
		"most services watched at once through every Consul connection that reaches one agent address (host:port, the host resolved), whatever the BackendProvider; keep it below the agent's limits.http_max_conns_per_client (200 by default), leaving room for the controller's other requests. Divided between namespaces as --consul-max-watches is")
}

// withDefaults fills the zero fields and checks the others.
func (o Options) withDefaults() (Options, error) {
	if o.WaitTime == 0 {
		o.WaitTime = DefaultWaitTime
	}
	if o.WaitTime < time.Second || o.WaitTime > MaxWaitTime {
		return o, fmt.Errorf("--consul-wait-time=%s: must be between 1s and %s", o.WaitTime, MaxWaitTime)
	}
	if o.MaxWatches == 0 {
		o.MaxWatches = DefaultMaxWatches
	}
	if o.MaxWatches < 1 {
		return o, fmt.Errorf("--consul-max-watches=%d: must be at least 1", o.MaxWatches)
	}
	if o.MaxWatchesPerAgent == 0 {
		o.MaxWatchesPerAgent = DefaultMaxWatchesPerAgent
	}
	if o.MaxWatchesPerAgent < 1 {
		return o, fmt.Errorf("--consul-max-watches-per-agent=%d: must be at least 1", o.MaxWatchesPerAgent)
	}
	if o.NamespaceWatchFloor == 0 {
		o.NamespaceWatchFloor = fairshare.DefaultSeatFloor
	}
	if o.NamespaceWatchFloor < 1 {
		return o, fmt.Errorf("--namespace-watch-floor=%d: must be at least 1", o.NamespaceWatchFloor)
	}
	if o.RetryDelay <= 0 {
		o.RetryDelay = DefaultRetryDelay
	}
	if o.MaxRetryDelay <= 0 {
		o.MaxRetryDelay = DefaultMaxRetryDelay
	}
	o.MaxRetryDelay = max(o.MaxRetryDelay, o.RetryDelay)
	return o, nil
}

// newClient builds the Consul API client and says the address it asks
// (the flag's, else the environment's or the API package's default). It
// does not connect: a controller without Consul sources never talks to
// Consul.
func (o Options) newClient() (*api.Client, string, error) {
	cfg := &api.Config{Address: o.Address}
	cfg.TLSConfig.CAFile = o.CAFile
	cfg.TLSConfig.Address = o.TLSServerName
	if o.CAFile != "" || o.TLSServerName != "" {
		cfg.Scheme = "https"
	}
	c, err := api.NewClient(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("consul client (--consul-address, --consul-ca-file): %w", err)
	}
	// NewClient filled in the defaults it took.
	return c, cfg.Address, nil
}

// tokenFile reads the ACL token from a file at every query, so that a
// rotated token (a mounted Secret that Kubernetes updates) is used from the
// next query on. Queries are rare (one per change, wait time or retry), and
// the file is small.
type tokenFile struct {
	path string
}

// newTokenFile returns the token source of path, reading it once so that a
// missing or empty file is an error at start, not at the first query.
func newTokenFile(path string) (*tokenFile, error) {
	f := &tokenFile{path: path}
	if _, err := f.get(); err != nil {
		return nil, err
	}
	return f, nil
}

// get returns the current token.
func (f *tokenFile) get() (string, error) {
	data, err := os.ReadFile(f.path)
	if err != nil {
		return "", fmt.Errorf("--consul-token-file: %w", err)
	}
	token := string(bytes.TrimSpace(data))
	if token == "" {
		return "", errors.New("--consul-token-file: " + f.path + " is empty; write the Consul ACL token into it")
	}
	return token, nil
}
