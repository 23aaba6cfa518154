package dns_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	mdns "github.com/miekg/dns"

	"github.com/backendslice/backendslice/internal/publish"
	"github.com/backendslice/backendslice/providers/providertest"
	"github.com/backendslice/backendslice/test/dnstest"
)

// deniedName is the controller's check of a name a lookup would follow,
// with its default configuration.
func deniedName(name string) string {
	return publish.DeniedNameReason(name, publish.MetadataNames, publish.DefaultClusterDomain)
}

// TestCNAMEIntoDeniedNames: a name whose CNAME chain leads, in two hops,
// into the cluster's DNS domain (another namespace's Service), localhost
// or a metadata service's name fails transiently naming only the
// source's own name; nothing of the answer is returned, and the denied
// name is never asked. Without the check the same records would publish
// the address at the chain's end.
func TestCNAMEIntoDeniedNames(t *testing.T) {
	s, err := dnstest.New(zone, other, "cluster.local", "localhost", "google.internal")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	for _, c := range []struct {
		name, via, target, addr string
	}{
		{"cluster", "hop-cluster." + other, "db.victim.svc.cluster.local", "192.0.2.77"},
		{"localhost", "hop-local." + other, "db.localhost", "192.0.2.78"},
		{"metadata", "hop-meta." + other, "metadata.google.internal", "192.0.2.79"},
	} {
		t.Run(c.name, func(t *testing.T) {
			host := c.name + "." + zone
			s.Set(host, mdns.TypeCNAME, 60, c.via+".")
			s.Set(c.via, mdns.TypeCNAME, 60, c.target+".")
			s.Set(c.target, mdns.TypeA, 60, c.addr)
			s.Set(c.target, mdns.TypeAAAA, 60, "2001:db8::77")
			p := newProvider(t, testOptions(s))

			req := providertest.NewRequest(source("src", host), dual...)
			res, err := p.Resolve(context.Background(), req)
			if err != nil || !slices.Equal(addresses(res.Endpoints), []string{c.addr, "2001:db8::77"}) {
				t.Fatalf("without the check: Resolve = %v, %v; want the chain's end %s (the records lead there)", addresses(res.Endpoints), err, c.addr)
			}
			asked := len(s.Queries(c.target))

			req.DeniedName = deniedName
			res, err = p.Resolve(context.Background(), req)
			checkFailure(t, c.name, err, transientWant(host+": its CNAME chain leads into a name that can't be followed"))
			if len(res.Endpoints) != 0 {
				t.Errorf("endpoints %v returned with the failure", addresses(res.Endpoints))
			}
			for _, hidden := range []string{c.via, c.target, c.addr} {
				if err != nil && strings.Contains(err.Error(), hidden) {
					t.Errorf("message %q names %q: only the source's own name may be named", err, hidden)
				}
			}
			if n := len(s.Queries(c.target)) - asked; n != 0 {
				t.Errorf("%s was asked %d time(s) with the check, want never", c.target, n)
			}
		})
	}

	t.Run("a chain that stays outside", func(t *testing.T) {
		host := "fine." + zone
		s.Set(host, mdns.TypeCNAME, 60, "hop-fine."+other+".")
		s.Set("hop-fine."+other, mdns.TypeA, 60, "192.0.2.80")
		req := providertest.NewRequest(source("src", host), ipv4...)
		req.DeniedName = deniedName
		res, err := newProvider(t, testOptions(s)).Resolve(context.Background(), req)
		if err != nil || !slices.Equal(addresses(res.Endpoints), []string{"192.0.2.80"}) {
			t.Errorf("Resolve = %v, %v; want 192.0.2.80", addresses(res.Endpoints), err)
		}
	})
}
