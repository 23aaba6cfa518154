package consul

import (
	"fmt"

	"github.com/hashicorp/consul/api"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/fairshare"
	"github.com/backendslice/backendslice/providers"
)

// anonymousToken is the secret of Consul's anonymous token. A connection
// without a token sends it rather than no token: with no token, the API
// client would send the one of the controller's environment
// (CONSUL_HTTP_TOKEN), and a BackendProvider must never reach Consul with
// the controller's own identity.
const anonymousToken = "anonymous"

// connID names a connection: the zero value is the controller's own (its
// --consul-* flags), any other a BackendProvider at one version of its
// spec. The name is part of it so that two BackendProviders never share a
// client or a watch, whatever their keys.
type connID struct{ name, key string }

// conn is one way to reach Consul: a client and where its token comes from,
// shared by the watches that use it. Its fields other than id, who, addr,
// client and closeIdle are guarded by the provider's mutex.
type conn struct {
	id connID
	// who names the connection in messages, and addr is the address its
	// client asks.
	who, addr string
	client    *api.Client
	// closeIdle closes the client's idle connections once nothing uses it,
	// so that a dropped client leaves no sockets behind; nil for the
	// controller's own client, which is never dropped.
	closeIdle func()
	// token returns the ACL token of the next query; nil leaves the token to
	// the client (the controller's environment). Each Resolve through a
	// BackendProvider sets the one its request carries, so that the newest
	// reader of the Secret is asked.
	token func() (string, error)
	// seats are the watches that use the connection, by namespace: a
	// BackendProvider's is dropped with the last one. Set for a
	// connection that watches (not for a check's).
	seats *fairshare.Seats
	// agent is the Consul agent the connection reaches, set with its
	// first watch.
	agent *agent
}

// ownConn is the controller's own connection, from its options.
func ownConn(client *api.Client, addr string, token *tokenFile, maxWatches, floor int) *conn {
	c := &conn{who: "the controller's --consul-* flags", addr: addr, client: client, seats: fairshare.NewSeats(maxWatches, floor)}
	if token != nil {
		c.token = token.get
	}
	return c
}

// checkConnection refuses a BackendProvider that cannot be a Consul
// connection, before anything is built or asked.
func checkConnection(cc *providers.Connection) error {
	settings := settingsOf(cc)
	switch {
	case settings == nil:
		return providers.Terminalf(v1alpha1.ReasonInvalidSpec,
			"BackendProvider %s is not a Consul connection; name a Consul BackendProvider in providerRef", cc.Name)
	case cc.Key == "":
		// The zero connID is the controller's own connection.
		return providers.Terminalf(v1alpha1.ReasonInvalidSpec, "BackendProvider %s: connection without a key", cc.Name)
	case settings.Address == "":
		return providers.Terminalf(v1alpha1.ReasonInvalidSpec,
			"BackendProvider %s: no Consul address; set its host:port or https:// URL", cc.Name)
	}
	return nil
}

// newConn builds the client of a BackendProvider's connection. It does not
// connect. Nothing comes from the controller's environment: the api
// package's defaults (address, CA, client certificate, token, scheme) are
// the controller's own connection, not this one's.
func newConn(cc *providers.Connection) (*conn, error) {
	sc := settingsOf(cc)
	who := "BackendProvider " + cc.Name
	tlsConfig := api.TLSConfig{CAPem: sc.CAPEM, Address: sc.ServerName}
	// DefaultConfig's transport is a fresh pooled one, as the controller's
	// own client has; the rest of DefaultConfig is not used.
	transport := api.DefaultConfig().Transport
	httpClient, err := api.NewHttpClient(transport, tlsConfig)
	if err != nil {
		return nil, providers.Terminalf(v1alpha1.ReasonInvalidSpec, "%s: the Consul TLS settings: %v", who, err)
	}
	cfg := &api.Config{Address: sc.Address, Scheme: "http", HttpClient: httpClient, TLSConfig: tlsConfig}
	if len(sc.CAPEM) > 0 || sc.ServerName != "" {
		cfg.Scheme = "https"
	}
	client, err := api.NewClient(cfg)
	if err != nil {
		return nil, providers.Terminalf(v1alpha1.ReasonInvalidSpec, "%s: the Consul address %q: %v", who, sc.Address, err)
	}
	return &conn{
		id:        connID{cc.Name, cc.Key},
		who:       who,
		addr:      sc.Address,
		client:    client,
		closeIdle: transport.CloseIdleConnections,
		token:     tokenOf(who, sc.Token),
	}, nil
}

// tokenOf is the token reader of a BackendProvider's connection: its
// Secret's token, or the anonymous token when it has none.
func tokenOf(who string, read func() (string, error)) func() (string, error) {
	return func() (string, error) {
		if read == nil {
			return anonymousToken, nil
		}
		token, err := read()
		switch {
		case err != nil:
			return "", fmt.Errorf("%s: reading the Consul ACL token: %w", who, err)
		case token == "":
			return anonymousToken, nil
		}
		return token, nil
	}
}
