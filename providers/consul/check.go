package consul

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/hashicorp/consul/api"

	"github.com/backendslice/backendslice/providers"
)

// CheckConnection asks the Consul agent of cc (the controller's own
// connection when nil) which server leads its cluster, and, when the
// connection has an ACL token, reads that token itself:
//
//   - GET /v1/status/leader needs no ACL at all: it proves that the address
//     answers, that its certificate verifies against the provider's CA and
//     server name, and that the cluster has a leader to answer queries;
//   - GET /v1/acl/token/self needs no policy either (any token may read
//     itself): it proves that Consul knows the token. What the token may
//     read is each source's to find out, on its own status.
//
// An agent without ACLs answers the second "ACL support disabled", which
// passes: no token is needed there. The client is made for the check and
// its connections closed after it, so that each check dials (and
// verifies TLS) afresh.
func (p *Provider) CheckConnection(ctx context.Context, cc *providers.Connection) error {
	c := p.own
	if cc != nil {
		if err := checkConnection(cc); err != nil {
			return err
		}
		var err error
		if c, err = newConn(cc); err != nil {
			return err
		}
		defer c.closeIdle()
	}
	where := fmt.Sprintf("Consul at %s", c.addr)
	token := ""
	if c.token != nil {
		var err error
		if token, err = c.token(); err != nil {
			return err
		}
	}
	q := (&api.QueryOptions{Token: token}).WithContext(ctx)
	leader, err := c.client.Status().LeaderWithQueryOptions(q)
	switch {
	case err != nil:
		return fmt.Errorf("%s: asking for the cluster's leader (GET /v1/status/leader): %s", where, answerOf(err))
	case leader == "":
		return fmt.Errorf("%s: the cluster has no leader (GET /v1/status/leader); it answers no query until one is elected", where)
	case token == "" || token == anonymousToken:
		return nil
	}
	_, _, err = c.client.ACL().TokenReadSelf(q)
	var se api.StatusError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &se) && se.Code == http.StatusUnauthorized && strings.Contains(se.Body, "ACL support disabled"):
		return nil
	case errors.As(err, &se):
		return fmt.Errorf("%s refuses the ACL token of %s (GET /v1/acl/token/self: %s); put a token Consul knows into its Secret",
			where, c.who, answerOf(err))
	}
	return fmt.Errorf("%s: reading the ACL token (GET /v1/acl/token/self): %s", where, answerOf(err))
}

// answerOf is what Consul (or the network) answered, with an error body
// bounded and printable as on a source's status.
func answerOf(err error) string {
	var se api.StatusError
	if errors.As(err, &se) {
		return fmt.Sprintf("Consul answered %d %s", se.Code, providers.Printable(se.Body, maxBody))
	}
	return err.Error()
}

var _ providers.Checker = (*Provider)(nil)
