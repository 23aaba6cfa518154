package dns

import (
	"context"
	"fmt"
	"strings"
	"sync"

	mdns "github.com/miekg/dns"

	"github.com/backendslice/backendslice/providers"
)

// CheckConnection asks each resolver of cc (the controller's own
// --dns-resolvers when nil, as for a BackendProvider that names none) one
// question, the SOA of the root zone ("."), at once, and fails naming
// every resolver that sent no answer within --dns-query-timeout. Any
// answer passes, whatever its code: a resolver that only serves its own
// zones refuses the root, and one without a way to the Internet fails it,
// yet both answer the names sources ask. The check tells that each
// resolver is there and speaks DNS; whether a name resolves is each
// source's to say. The root's SOA is in every recursive resolver's cache
// and is answered without a query upstream, and asking a resolver for it
// needs no permission.
func (p *Provider) CheckConnection(ctx context.Context, cc *providers.Connection) error {
	servers, err := p.resolversOf(cc)
	if err != nil {
		return err
	}
	m := new(mdns.Msg).SetQuestion(".", mdns.TypeSOA)
	m.SetEdns0(ednsSize, false)
	failures := make([]string, len(servers.addrs))
	var wg sync.WaitGroup
	for i, server := range servers.addrs {
		wg.Go(func() {
			// Each goroutine sends a copy: Exchange sets the message's ID.
			if _, err := p.exchange(ctx, m.Copy(), server); err != nil {
				failures[i] = fmt.Sprintf("resolver %s: %s", server, p.explain(err))
			}
		})
	}
	wg.Wait()
	var failed []string
	for _, f := range failures {
		if f != "" {
			failed = append(failed, f)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return fmt.Errorf("%d of the %d DNS resolver(s) of %s sent no answer to a query for the root's SOA: %s",
		len(failed), len(servers.addrs), servers.from, strings.Join(failed, "; "))
}

var _ providers.Checker = (*Provider)(nil)
