package dns_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	mdns "github.com/miekg/dns"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/providers/dns"
	"github.com/backendslice/backendslice/providers/providertest"
)

// throughResolvers is a request for src through a DNS BackendProvider
// named name listing resolvers.
func throughResolvers(src v1alpha1.Source, name string, resolvers ...string) providers.Request {
	req := providertest.NewRequest(src, ipv4...)
	req.Connection = &providers.Connection{Name: name, Key: "v1", Settings: &dns.Settings{Resolvers: resolvers}}
	return req
}

// TestConnectionResolvers serves one name from two servers that answer it
// differently: a source through a BackendProvider asks that provider's
// server only, a source without one the controller's only.
func TestConnectionResolvers(t *testing.T) {
	own, theirs := startServer(t), startServer(t)
	host := "db." + zone
	own.Set(host, mdns.TypeA, 60, "192.0.2.10")
	theirs.Set(host, mdns.TypeA, 60, "198.51.100.10")
	p := newProvider(t, testOptions(own))
	src := source("db", host)

	res, err := p.Resolve(context.Background(), providertest.NewRequest(src, ipv4...))
	if err != nil || !slices.Equal(addresses(res.Endpoints), []string{"192.0.2.10"}) {
		t.Fatalf("without a BackendProvider: %v, %v; want the controller's answer 192.0.2.10", res.Endpoints, err)
	}
	ownAsked := len(own.Queries(host))
	res, err = p.Resolve(context.Background(), throughResolvers(src, "theirs", theirs.Addr))
	if err != nil || !slices.Equal(addresses(res.Endpoints), []string{"198.51.100.10"}) {
		t.Fatalf("through BackendProvider theirs: %v, %v; want its answer 198.51.100.10", res.Endpoints, err)
	}
	if n := len(own.Queries(host)); n != ownAsked {
		t.Errorf("the controller's resolver was asked %d more time(s) for a source through a BackendProvider", n-ownAsked)
	}
	if len(theirs.Queries(host)) == 0 {
		t.Error("the BackendProvider's resolver was not asked")
	}

	// A referral names the BackendProvider whose resolvers sent it.
	theirs.Set("delegated."+zone, mdns.TypeNS, 60, "ns.elsewhere.example.")
	_, err = p.Resolve(context.Background(), throughResolvers(source("db", "delegated."+zone), "theirs", theirs.Addr))
	if err == nil || providers.IsTerminal(err) || !strings.Contains(err.Error(), "BackendProvider theirs must name recursive resolvers") {
		t.Errorf("referral through BackendProvider theirs: %v, want a transient failure naming it", err)
	}
}

// TestConnectionRefusedAsksNothing gives BackendProviders that cannot serve
// a dns source: each is refused as InvalidSpec, and no server is asked.
func TestConnectionRefusedAsksNothing(t *testing.T) {
	s := startServer(t)
	host := "db." + zone
	s.Set(host, mdns.TypeA, 60, "192.0.2.10")
	p := newProvider(t, testOptions(s))
	consul := providertest.NewRequest(source("db", host))
	consul.Connection = &providers.Connection{Name: "catalog", Key: "v1", Settings: struct{ Address string }{s.Addr}}
	for _, c := range []struct {
		name string
		req  providers.Request
		want string
	}{
		{"not a DNS BackendProvider", consul, "BackendProvider catalog is not a DNS connection"},
		{"no resolvers", throughResolvers(source("db", host), "empty"), "BackendProvider empty lists no DNS resolvers"},
		{"resolver not host:port", throughResolvers(source("db", host), "typo", s.Addr, "10.0.0.1:dns"), `BackendProvider typo: resolver "10.0.0.1:dns"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := p.Resolve(context.Background(), c.req)
			pe := providers.AsError(err)
			if err == nil || !pe.Terminal || pe.Reason != v1alpha1.ReasonInvalidSpec || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Resolve = %v, want a terminal %s failure saying %q", err, v1alpha1.ReasonInvalidSpec, c.want)
			}
		})
	}
	if q := s.Queries(host); len(q) > 0 {
		t.Errorf("refused sources asked the server: %+v", q)
	}
}
