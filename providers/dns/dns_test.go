package dns_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/providers/dns"
	"github.com/backendslice/backendslice/providers/providertest"
	"github.com/backendslice/backendslice/test/dnstest"
)

// The server is authoritative for two zones, so that a CNAME can lead out
// of the zone it was asked in.
const (
	zone  = "unit.test"
	other = "other.test"
)

var (
	ipv4 = []v1alpha1.AddressType{v1alpha1.AddressTypeIPv4}
	ipv6 = []v1alpha1.AddressType{v1alpha1.AddressTypeIPv6}
	fqdn = []v1alpha1.AddressType{v1alpha1.AddressTypeFQDN}
	dual = []v1alpha1.AddressType{v1alpha1.AddressTypeIPv4, v1alpha1.AddressTypeIPv6}
)

// startServer starts a DNS server for the test, stopped when it ends.
func startServer(t *testing.T) *dnstest.Server {
	t.Helper()
	s, err := dnstest.New(zone, other)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

// queryTimeout is how long the tests' providers wait for an answer: long
// enough for a local server under the race detector, short enough to keep
// the cases where the server stays silent quick.
const queryTimeout = time.Second

// testOptions ask the given servers, and refresh between 1 second and 1
// minute.
func testOptions(servers ...*dnstest.Server) dns.Options {
	opts := dns.Options{QueryTimeout: queryTimeout, MinRefresh: time.Second, MaxRefresh: time.Minute}
	for _, s := range servers {
		opts.Resolvers = append(opts.Resolvers, s.Addr)
	}
	return opts
}

// newProvider returns a provider with opts, failing the test on an error.
func newProvider(t *testing.T, opts dns.Options) *dns.Provider {
	t.Helper()
	p, err := dns.New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p
}

// source is a dns source named name that looks up host.
func source(name, host string) v1alpha1.Source {
	return v1alpha1.Source{Name: name, DNS: &v1alpha1.DNSSource{Name: host}}
}

// withRefresh sets the source's refresh bounds; zero leaves one unset.
func withRefresh(src v1alpha1.Source, lo, hi time.Duration) v1alpha1.Source {
	if lo != 0 {
		src.DNS.MinRefresh = &metav1.Duration{Duration: lo}
	}
	if hi != 0 {
		src.DNS.MaxRefresh = &metav1.Duration{Duration: hi}
	}
	return src
}

// serving are serving endpoints at addrs, as the provider returns them.
func serving(addrs ...string) []providers.Endpoint {
	out := make([]providers.Endpoint, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, providers.Endpoint{Address: a, Serving: true})
	}
	return out
}

// addresses are the addresses of eps, sorted.
func addresses(eps []providers.Endpoint) []string {
	out := make([]string, 0, len(eps))
	for _, e := range eps {
		out = append(out, e.Address)
	}
	slices.Sort(out)
	return out
}

// manyA are n IPv4 addresses, enough to overflow a UDP answer when n is large.
func manyA(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("192.0.2.%d", i+1)
	}
	return out
}

func TestConformance(t *testing.T) {
	s := startServer(t)
	s.Set("dual."+zone, mdns.TypeA, 60, "192.0.2.1", "192.0.2.2")
	s.Set("dual."+zone, mdns.TypeAAAA, 60, "2001:db8::1")
	s.Set("www."+zone, mdns.TypeCNAME, 60, "alias."+zone+".")
	s.Set("alias."+zone, mdns.TypeCNAME, 60, "dual."+zone+".")
	s.Set("away."+zone, mdns.TypeCNAME, 60, "there."+other+".")
	s.Set("there."+other, mdns.TypeA, 60, "198.51.100.7")
	s.Set("big."+zone, mdns.TypeA, 60, manyA(100)...)
	s.Set("text."+zone, mdns.TypeTXT, 60, `"no addresses here"`)
	s.Set("broken."+zone, mdns.TypeA, 60, "192.0.2.9")
	s.Fail("broken."+zone, dnstest.ServFail)
	s.Set("refused."+zone, mdns.TypeA, 60, "192.0.2.9")
	s.Fail("refused."+zone, dnstest.Refused)
	s.Set("silent."+zone, mdns.TypeA, 60, "192.0.2.9")
	s.Fail("silent."+zone, dnstest.Silent)
	s.Set("loop."+zone, mdns.TypeCNAME, 60, "pool."+zone+".")
	s.Set("pool."+zone, mdns.TypeCNAME, 60, "loop."+zone+".")
	s.Set("delegated."+zone, mdns.TypeNS, 60, "ns.elsewhere.example.")

	providertest.Run(t, providertest.Harness{
		Kind:     dns.Kind,
		Kinds:    dns.Kinds(),
		Provider: newProvider(t, testOptions(s)),
		Good: func(*testing.T) []providertest.Case {
			return []providertest.Case{
				{Name: "both families", Request: providertest.NewRequest(source("db", "dual."+zone)),
					Want: serving("192.0.2.1", "192.0.2.2", "2001:db8::1")},
				{Name: "IPv4 only", Request: providertest.NewRequest(source("db", "dual."+zone), ipv4...),
					Want: serving("192.0.2.1", "192.0.2.2")},
				{Name: "IPv6 only", Request: providertest.NewRequest(source("db", "dual."+zone), ipv6...),
					Want: serving("2001:db8::1")},
				{Name: "CNAME chain", Request: providertest.NewRequest(source("web", "www."+zone)),
					Want: serving("192.0.2.1", "192.0.2.2", "2001:db8::1")},
				{Name: "CNAME out of the zone", Request: providertest.NewRequest(source("web", "away."+zone), ipv4...),
					Want: serving("198.51.100.7")},
				{Name: "FQDN and IPv4", Request: providertest.NewRequest(source("db", "dual."+zone),
					v1alpha1.AddressTypeFQDN, v1alpha1.AddressTypeIPv4),
					Want: serving("dual."+zone, "192.0.2.1", "192.0.2.2")},
				{Name: "FQDN only", Request: providertest.NewRequest(source("db", "dual."+zone), fqdn...),
					Want: serving("dual." + zone)},
				{Name: "truncated over UDP", Request: providertest.NewRequest(source("big", "big."+zone), ipv4...),
					Want: serving(manyA(100)...)},
				{Name: "no address records", Request: providertest.NewRequest(source("text", "text."+zone))},
			}
		},
		Missing: func(*testing.T) providertest.MissingCase {
			return providertest.MissingCase{
				Request: providertest.NewRequest(source("gone", "nowhere."+zone)),
				Fail: &providertest.Failure{Terminal: true, Gone: true, Reason: v1alpha1.ReasonBackendNotFound,
					MessageContains: []string{"spec.sources[gone].dns.name", "nowhere." + zone, "NXDOMAIN"}},
			}
		},
		Broken: func(*testing.T) []providertest.FailCase {
			transient := func(name, host string, contains string) providertest.FailCase {
				return providertest.FailCase{Name: name, Request: providertest.NewRequest(source("src", host)),
					Failure: providertest.Failure{Reason: v1alpha1.ReasonSourceFailed,
						MessageContains: []string{"spec.sources[src].dns.name", contains}}}
			}
			invalid := func(name string, src v1alpha1.Source, field string) providertest.FailCase {
				return providertest.FailCase{Name: name, Request: providertest.NewRequest(src),
					Failure: providertest.Failure{Terminal: true, Reason: v1alpha1.ReasonInvalidSpec,
						MessageContains: []string{field}}}
			}
			return []providertest.FailCase{
				invalid("another kind", v1alpha1.Source{Name: "st", Static: &v1alpha1.StaticSource{}}, "spec.sources[st]"),
				invalid("invalid name", source("bad", "Not_A.Name"), "spec.sources[bad].dns.name"),
				invalid("bounds crossed", withRefresh(source("slow", "dual."+zone), time.Hour, time.Minute),
					"spec.sources[slow].dns.minRefresh"),
				transient("SERVFAIL", "broken."+zone, "SERVFAIL"),
				transient("REFUSED", "refused."+zone, "REFUSED"),
				transient("no answer", "silent."+zone, "no answer within"),
				transient("CNAME loop", "loop."+zone, "CNAME loop"),
				transient("referral", "delegated."+zone, "referral"),
			}
		},
	})
}

func TestKind(t *testing.T) {
	p := newProvider(t, testOptions(startServer(t)))
	if k := p.Kind(); k != dns.Kind {
		t.Errorf("Kind() = %q, want %q", k, dns.Kind)
	}
}

// TestRefreshAfter checks that the next lookup comes at the answer's
// smallest TTL, clamped by the bounds of the spec or else the provider's.
func TestRefreshAfter(t *testing.T) {
	s := startServer(t)
	s.SetNegativeTTL(7)
	defaults := dns.Options{Resolvers: []string{s.Addr}} // 5s to 5m
	cases := []struct {
		name    string
		records func(host string)
		opts    dns.Options
		lo, hi  time.Duration // the spec's bounds, zero when unset
		want    time.Duration
		addrs   int
	}{
		{name: "smallest TTL of both families", records: func(h string) {
			s.Set(h, mdns.TypeA, 30, "192.0.2.1")
			s.Set(h, mdns.TypeAAAA, 10, "2001:db8::1")
		}, opts: testOptions(s), want: 10 * time.Second, addrs: 2},
		{name: "smallest TTL of a record set", records: func(h string) {
			s.Set(h, mdns.TypeA, 30, "192.0.2.1", "192.0.2.2")
			s.Set(h, mdns.TypeAAAA, 30, "2001:db8::1")
			s.Set(h, mdns.TypeA, 12, "192.0.2.3")
		}, opts: testOptions(s), want: 12 * time.Second, addrs: 2},
		{name: "a CNAME's TTL counts", records: func(h string) {
			s.Set(h, mdns.TypeCNAME, 4, "target."+zone+".")
			s.Set("target."+zone, mdns.TypeA, 60, "192.0.2.1")
			s.Set("target."+zone, mdns.TypeAAAA, 60, "2001:db8::1")
		}, opts: testOptions(s), want: 4 * time.Second, addrs: 2},
		{name: "NODATA counts its SOA's negative TTL", records: func(h string) {
			s.Set(h, mdns.TypeA, 60, "192.0.2.1")
		}, opts: testOptions(s), want: 7 * time.Second, addrs: 1},
		{name: "nothing but NODATA", records: func(h string) {
			s.Set(h, mdns.TypeTXT, 60, `"x"`)
		}, opts: testOptions(s), want: 7 * time.Second},
		{name: "TTL 0 waits the provider's floor", records: func(h string) {
			s.Set(h, mdns.TypeA, 0, "192.0.2.1")
		}, opts: testOptions(s), want: time.Second, addrs: 1},
		{name: "a day waits the provider's ceiling", records: func(h string) {
			s.Set(h, mdns.TypeA, 86400, "192.0.2.1")
			s.Set(h, mdns.TypeAAAA, 86400, "2001:db8::1")
		}, opts: testOptions(s), want: time.Minute, addrs: 2},
		{name: "the spec's floor", records: func(h string) {
			s.Set(h, mdns.TypeA, 5, "192.0.2.1")
			s.Set(h, mdns.TypeAAAA, 5, "2001:db8::1")
		}, opts: testOptions(s), lo: 20 * time.Second, want: 20 * time.Second, addrs: 2},
		{name: "the spec's ceiling", records: func(h string) {
			s.Set(h, mdns.TypeA, 60, "192.0.2.1")
			s.Set(h, mdns.TypeAAAA, 60, "2001:db8::1")
		}, opts: testOptions(s), hi: 3 * time.Second, want: 3 * time.Second, addrs: 2},
		{name: "the provider's defaults", records: func(h string) {
			s.Set(h, mdns.TypeA, 1, "192.0.2.1")
			s.Set(h, mdns.TypeAAAA, 1, "2001:db8::1")
		}, opts: defaults, want: dns.DefaultMinRefresh, addrs: 2},
		{name: "a spec ceiling below the controller's floor waits the floor", records: func(h string) {
			s.Set(h, mdns.TypeA, 60, "192.0.2.1")
			s.Set(h, mdns.TypeAAAA, 60, "2001:db8::1")
		}, opts: defaults, hi: 2 * time.Second, want: dns.DefaultMinRefresh, addrs: 2},
		{name: "a nanosecond in the spec waits the controller's floor", records: func(h string) {
			s.Set(h, mdns.TypeA, 0, "192.0.2.1")
			s.Set(h, mdns.TypeAAAA, 0, "2001:db8::1")
		}, opts: testOptions(s), lo: time.Nanosecond, hi: time.Nanosecond, want: time.Second, addrs: 2},
		{name: "a spec floor above the default ceiling wins", records: func(h string) {
			s.Set(h, mdns.TypeA, 60, "192.0.2.1")
			s.Set(h, mdns.TypeAAAA, 60, "2001:db8::1")
		}, opts: defaults, lo: 10 * time.Minute, want: 10 * time.Minute, addrs: 2},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			host := fmt.Sprintf("ttl%d.%s", i, zone)
			c.records(host)
			res, err := newProvider(t, c.opts).Resolve(context.Background(),
				providertest.NewRequest(withRefresh(source("db", host), c.lo, c.hi)))
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			if res.RefreshAfter != c.want {
				t.Errorf("RefreshAfter = %v, want %v", res.RefreshAfter, c.want)
			}
			if len(res.Endpoints) != c.addrs {
				t.Errorf("endpoints %v, want %d", addresses(res.Endpoints), c.addrs)
			}
		})
	}
}

// TestRecordsChange resolves one name while its records change, as the
// controller does at each refresh: each answer is the records of the moment.
func TestRecordsChange(t *testing.T) {
	s := startServer(t)
	p := newProvider(t, testOptions(s))
	host := "db." + zone
	req := providertest.NewRequest(source("db", host))
	steps := []struct {
		name   string
		change func()
		want   []string
	}{
		{"first records", func() {
			s.Set(host, mdns.TypeA, 1, "192.0.2.1")
			s.Set(host, mdns.TypeAAAA, 1, "2001:db8::1")
		}, []string{"192.0.2.1", "2001:db8::1"}},
		{"an address added", func() { s.Set(host, mdns.TypeA, 1, "192.0.2.1", "192.0.2.2") },
			[]string{"192.0.2.1", "192.0.2.2", "2001:db8::1"}},
		{"an address replaced", func() { s.Set(host, mdns.TypeA, 1, "192.0.2.2", "192.0.2.3") },
			[]string{"192.0.2.2", "192.0.2.3", "2001:db8::1"}},
		{"a family removed", func() { s.Set(host, mdns.TypeAAAA, 1) },
			[]string{"192.0.2.2", "192.0.2.3"}},
		{"made a CNAME", func() {
			s.Remove(host)
			s.Set(host, mdns.TypeCNAME, 1, "new."+zone+".")
			s.Set("new."+zone, mdns.TypeAAAA, 1, "2001:db8::2")
		}, []string{"2001:db8::2"}},
		{"every address removed", func() { s.Set("new."+zone, mdns.TypeTXT, 1, `"moved"`); s.Set("new."+zone, mdns.TypeAAAA, 1) },
			[]string{}},
	}
	for _, st := range steps {
		st.change()
		res, err := p.Resolve(context.Background(), req)
		if err != nil {
			t.Fatalf("%s: Resolve: %v", st.name, err)
		}
		if got := addresses(res.Endpoints); !slices.Equal(got, st.want) {
			t.Errorf("%s: addresses %v, want %v", st.name, got, st.want)
		}
	}

	// The name goes: the backend is gone. It comes back: it resolves again,
	// for the provider keeps nothing from one call to the next.
	s.Remove(host)
	_, err := p.Resolve(context.Background(), req)
	checkFailure(t, "name removed", err, failureWant{terminal: true, gone: true, reason: v1alpha1.ReasonBackendNotFound,
		contains: []string{"spec.sources[db].dns.name", host + " does not exist", "NXDOMAIN from " + s.Addr}})
	s.Set(host, mdns.TypeA, 1, "192.0.2.9")
	res, err := p.Resolve(context.Background(), req)
	if err != nil || !slices.Equal(addresses(res.Endpoints), []string{"192.0.2.9"}) {
		t.Errorf("name back: Resolve = %v, %v; want 192.0.2.9", addresses(res.Endpoints), err)
	}
}

// failureWant is how a Resolve must fail.
type failureWant struct {
	terminal, gone bool
	reason         string
	contains       []string
}

// checkFailure checks err against want.
func checkFailure(t *testing.T, name string, err error, want failureWant) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: Resolve succeeded, want a failure", name)
		return
	}
	var pe *providers.Error
	if !errors.As(err, &pe) {
		t.Errorf("%s: %v (%T) is not a *providers.Error", name, err, err)
		return
	}
	if pe.Terminal != want.terminal || pe.Gone != want.gone || pe.Reason != want.reason {
		t.Errorf("%s: terminal=%v gone=%v reason=%s, want terminal=%v gone=%v reason=%s (%v)",
			name, pe.Terminal, pe.Gone, pe.Reason, want.terminal, want.gone, want.reason, err)
	}
	for _, sub := range want.contains {
		if !strings.Contains(err.Error(), sub) {
			t.Errorf("%s: message %q lacks %q", name, err, sub)
		}
	}
}

// transientWant is a transient failure whose message holds contains.
func transientWant(contains ...string) failureWant {
	return failureWant{reason: v1alpha1.ReasonSourceFailed, contains: append([]string{"spec.sources[src].dns.name"}, contains...)}
}

// TestFailures checks how each kind of bad answer is classified: a missing
// name is gone, a server's trouble is transient, a bad spec is terminal.
func TestFailures(t *testing.T) {
	s := startServer(t)
	stopped := startServer(t)
	if err := stopped.Stop(); err != nil {
		t.Fatal(err)
	}
	s.Set("link."+zone, mdns.TypeCNAME, 60, "missing."+other+".")
	s.Set("long0."+zone, mdns.TypeCNAME, 60, "long1."+zone+".")
	for i := 1; i <= 9; i++ {
		s.Set(fmt.Sprintf("long%d.%s", i, zone), mdns.TypeCNAME, 60, fmt.Sprintf("long%d.%s.", i+1, zone))
	}
	s.Set("long10."+zone, mdns.TypeA, 60, "192.0.2.1")
	s.Set("half."+zone, mdns.TypeA, 60, "192.0.2.1")
	s.Set("half."+zone, mdns.TypeAAAA, 60, "2001:db8::1")
	// The AAAA answer of half is lost: not knowing it must not drain it,
	// whatever the A answer says.
	s.Fail("half."+zone, dnstest.ServFail, mdns.TypeAAAA)
	s.Set("servfail."+zone, mdns.TypeA, 60, "192.0.2.1")
	s.Fail("servfail."+zone, dnstest.ServFail)
	long := strings.Repeat("a", 63) + "."
	cases := []struct {
		name  string
		p     dns.Options
		src   v1alpha1.Source
		types []v1alpha1.AddressType
		want  failureWant
	}{
		{"NXDOMAIN", testOptions(s), source("src", "nowhere."+zone), dual,
			failureWant{terminal: true, gone: true, reason: v1alpha1.ReasonBackendNotFound,
				contains: []string{"spec.sources[src].dns.name", "nowhere." + zone + " does not exist"}}},
		{"NXDOMAIN at the end of a CNAME chain", testOptions(s), source("src", "link."+zone), ipv4,
			failureWant{terminal: true, gone: true, reason: v1alpha1.ReasonBackendNotFound,
				contains: []string{"link." + zone + " (CNAME to missing." + other + ") does not exist"}}},
		{"SERVFAIL", testOptions(s), source("src", "servfail."+zone), ipv4, transientWant(s.Addr + " answered SERVFAIL")},
		{"server stopped", testOptions(stopped), source("src", "half."+zone), dual, transientWant(stopped.Addr)},
		{"CNAME chain too long", testOptions(s), source("src", "long0."+zone), ipv4, transientWant("more than 8 CNAMEs")},
		{"an answer for one family only", testOptions(s), source("src", "half."+zone), dual,
			transientWant("AAAA lookup of half." + zone + ": " + s.Addr + " answered SERVFAIL")},
		{"name not a subdomain", testOptions(s), source("src", "under_score."+zone), dual,
			failureWant{terminal: true, reason: v1alpha1.ReasonInvalidSpec, contains: []string{"spec.sources[src].dns.name", `"under_score.`}}},
		{"name too long", testOptions(s), source("src", strings.Repeat(long, 4)+"test"), dual,
			failureWant{terminal: true, reason: v1alpha1.ReasonInvalidSpec, contains: []string{"spec.sources[src].dns.name"}}},
		{"empty name", testOptions(s), source("src", ""), dual,
			failureWant{terminal: true, reason: v1alpha1.ReasonInvalidSpec, contains: []string{"spec.sources[src].dns.name"}}},
		{"minRefresh zero", testOptions(s), v1alpha1.Source{Name: "src", DNS: &v1alpha1.DNSSource{
			Name: "half." + zone, MinRefresh: &metav1.Duration{}}}, dual,
			failureWant{terminal: true, reason: v1alpha1.ReasonInvalidSpec, contains: []string{"spec.sources[src].dns.minRefresh", "must be positive"}}},
		{"maxRefresh negative", testOptions(s), withRefresh(source("src", "half."+zone), 0, -time.Second), dual,
			failureWant{terminal: true, reason: v1alpha1.ReasonInvalidSpec, contains: []string{"spec.sources[src].dns.maxRefresh", "must be positive"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := newProvider(t, c.p).Resolve(context.Background(), providertest.NewRequest(c.src, c.types...))
			checkFailure(t, c.name, err, c.want)
			if len(res.Endpoints) != 0 {
				t.Errorf("endpoints %v returned with the failure", addresses(res.Endpoints))
			}
		})
	}
}

// TestTruncatedAnswerRetriesOverTCP checks that an answer too large for
// UDP is asked for again over TCP, and whole.
func TestTruncatedAnswerRetriesOverTCP(t *testing.T) {
	s := startServer(t)
	host := "big." + zone
	s.Set(host, mdns.TypeA, 60, manyA(100)...)
	res, err := newProvider(t, testOptions(s)).Resolve(context.Background(), providertest.NewRequest(source("big", host), ipv4...))
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	if len(res.Endpoints) != 100 {
		t.Errorf("%d endpoints, want all 100", len(res.Endpoints))
	}
	var nets []string
	for _, q := range s.Queries(host) {
		nets = append(nets, q.Net)
	}
	if !slices.Equal(nets, []string{"udp", "tcp"}) {
		t.Errorf("queries went over %v, want udp, then tcp after the truncated answer", nets)
	}
}

// TestResolversInTurn checks that a resolver that fails is skipped for the
// next, and that an NXDOMAIN is an answer, not a failure to skip.
func TestResolversInTurn(t *testing.T) {
	host := "db." + zone
	for _, c := range []struct {
		name  string
		first func(*dnstest.Server)
	}{
		{"SERVFAIL", func(s *dnstest.Server) { s.Fail(host, dnstest.ServFail) }},
		{"REFUSED", func(s *dnstest.Server) { s.Fail(host, dnstest.Refused) }},
		{"no answer", func(s *dnstest.Server) { s.Fail(host, dnstest.Silent) }},
		{"stopped", func(s *dnstest.Server) { _ = s.Stop() }},
		{"referral", func(s *dnstest.Server) { s.Set(host, mdns.TypeNS, 60, "ns.elsewhere.example.") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			first, second := startServer(t), startServer(t)
			for _, s := range []*dnstest.Server{first, second} {
				s.Set(host, mdns.TypeA, 60, "192.0.2.1")
			}
			c.first(first)
			res, err := newProvider(t, testOptions(first, second)).Resolve(context.Background(),
				providertest.NewRequest(source("db", host), ipv4...))
			if err != nil || !slices.Equal(addresses(res.Endpoints), []string{"192.0.2.1"}) {
				t.Errorf("Resolve = %v, %v; want the second resolver's 192.0.2.1", addresses(res.Endpoints), err)
			}
		})
	}

	t.Run("NXDOMAIN is final", func(t *testing.T) {
		first, second := startServer(t), startServer(t)
		second.Set(host, mdns.TypeA, 60, "192.0.2.1")
		_, err := newProvider(t, testOptions(first, second)).Resolve(context.Background(),
			providertest.NewRequest(source("db", host), ipv4...))
		checkFailure(t, "NXDOMAIN from the first", err, failureWant{terminal: true, gone: true,
			reason: v1alpha1.ReasonBackendNotFound, contains: []string{"NXDOMAIN from " + first.Addr}})
		if q := second.Queries(host); len(q) != 0 {
			t.Errorf("the second resolver was asked %d time(s) after the first answered NXDOMAIN", len(q))
		}
	})

	t.Run("every resolver fails", func(t *testing.T) {
		first, second := startServer(t), startServer(t)
		first.Fail(host, dnstest.ServFail)
		second.Fail(host, dnstest.Silent)
		_, err := newProvider(t, testOptions(first, second)).Resolve(context.Background(),
			providertest.NewRequest(source("src", host), ipv4...))
		checkFailure(t, "both fail", err, transientWant(
			first.Addr+" answered SERVFAIL", second.Addr+": no answer within "+queryTimeout.String()))
	})
}

// TestServerComesBack checks that a lookup fails while the server is down
// and succeeds again, with nothing to reset, once it is back.
func TestServerComesBack(t *testing.T) {
	s := startServer(t)
	host := "db." + zone
	s.Set(host, mdns.TypeA, 60, "192.0.2.1")
	p := newProvider(t, testOptions(s))
	req := providertest.NewRequest(source("src", host), ipv4...)
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	_, err := p.Resolve(context.Background(), req)
	checkFailure(t, "server down", err, transientWant(s.Addr))
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	res, err := p.Resolve(context.Background(), req)
	if err != nil || !slices.Equal(addresses(res.Endpoints), []string{"192.0.2.1"}) {
		t.Errorf("server back: Resolve = %v, %v; want 192.0.2.1", addresses(res.Endpoints), err)
	}
}

// TestCancelStopsWaiting cancels a Resolve that waits for a server that
// never answers, with a query timeout far longer than the test may run: it
// returns only if cancellation stops the wait.
func TestCancelStopsWaiting(t *testing.T) {
	s := startServer(t)
	host := "silent." + zone
	s.Fail(host, dnstest.Silent)
	opts := testOptions(s)
	opts.QueryTimeout = time.Hour
	p := newProvider(t, opts)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for len(s.Queries(host)) < 2 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	_, err := p.Resolve(ctx, providertest.NewRequest(source("src", host)))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Resolve = %v, want context.Canceled", err)
	}
	checkFailure(t, "cancelled", err, transientWant())
}

// TestNew checks which options are refused, naming the flag to fix.
func TestNew(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("search example.com\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		opts dns.Options
		want string
	}{
		{"no resolv.conf", dns.Options{ResolvConf: filepath.Join(dir, "missing")}, "set --dns-resolvers"},
		{"no nameserver", dns.Options{ResolvConf: empty}, "lists no nameserver; set --dns-resolvers"},
		{"neither host:port nor an address", dns.Options{Resolvers: []string{"2001:db8::1:53:x"}}, `--dns-resolvers: "2001:db8::1:53:x"`},
		{"port 0", dns.Options{Resolvers: []string{"10.0.0.1:0"}}, `--dns-resolvers: "10.0.0.1:0"`},
		{"port not a number", dns.Options{Resolvers: []string{"10.0.0.1:dns"}}, `--dns-resolvers: "10.0.0.1:dns"`},
		{"no host", dns.Options{Resolvers: []string{":53"}}, `--dns-resolvers: ":53"`},
		{"empty", dns.Options{Resolvers: []string{"10.0.0.1", ""}}, `--dns-resolvers: ""`},
		{"negative timeout", dns.Options{Resolvers: []string{"10.0.0.1"}, QueryTimeout: -time.Second}, "--dns-query-timeout"},
		{"negative floor", dns.Options{Resolvers: []string{"10.0.0.1"}, MinRefresh: -time.Second}, "--dns-min-refresh"},
		{"ceiling below floor", dns.Options{Resolvers: []string{"10.0.0.1"}, MinRefresh: time.Minute, MaxRefresh: time.Second}, "--dns-max-refresh=1s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := dns.New(c.opts); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("New(%+v) = %v, want an error containing %q", c.opts, err, c.want)
			}
		})
	}
}

func TestBindFlags(t *testing.T) {
	var opts dns.Options
	fs := pflag.NewFlagSet("controller", pflag.ContinueOnError)
	opts.BindFlags(fs)
	if opts.QueryTimeout != dns.DefaultQueryTimeout || opts.MinRefresh != dns.DefaultMinRefresh ||
		opts.MaxRefresh != dns.DefaultMaxRefresh || opts.MaxRecords != dns.DefaultMaxRecords || len(opts.Resolvers) != 0 {
		t.Errorf("defaults: %+v", opts)
	}
	if err := fs.Parse([]string{"--dns-resolvers=10.0.0.1:53,[2001:db8::53]:5353", "--dns-query-timeout=1s",
		"--dns-min-refresh=2s", "--dns-max-refresh=1h", "--dns-max-records=50"}); err != nil {
		t.Fatal(err)
	}
	want := dns.Options{Resolvers: []string{"10.0.0.1:53", "[2001:db8::53]:5353"}, QueryTimeout: time.Second,
		MinRefresh: 2 * time.Second, MaxRefresh: time.Hour, MaxRecords: 50}
	if !reflect.DeepEqual(opts, want) {
		t.Errorf("parsed %+v, want %+v", opts, want)
	}
	if _, err := dns.New(opts); err != nil {
		t.Errorf("New with the parsed flags: %v", err)
	}
}

// TestMaxRecords: a name answering more addresses than --dns-max-records
// publishes the first ones in sorted order, the same at every lookup, and the result
// names the limit, which the controller shows on status. The answer is
// large enough to come over TCP, as a real flood would.
func TestMaxRecords(t *testing.T) {
	s := startServer(t)
	s.Set("flood."+zone, mdns.TypeA, 60, manyA(200)...)
	opts := testOptions(s)
	opts.MaxRecords = 50
	p := newProvider(t, opts)
	req := providertest.NewRequest(source("flood", "flood."+zone))
	req.AddressTypes = []v1alpha1.AddressType{v1alpha1.AddressTypeIPv4}
	for range 2 {
		res, err := p.Resolve(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		all := manyA(200)
		slices.Sort(all)
		var got []string
		for _, e := range res.Endpoints {
			got = append(got, e.Address)
		}
		if !slices.Equal(got, all[:50]) {
			t.Fatalf("published %v, want the first 50 in sorted order %v", got, all[:50])
		}
		want := "spec.sources[flood].dns.name: 200 addresses answered, the first 50 published (the controller's --dns-max-records)"
		if res.Limit != want {
			t.Errorf("Limit = %q, want %q", res.Limit, want)
		}
	}
	if _, err := dns.New(dns.Options{MaxRecords: -1}); err == nil || !strings.Contains(err.Error(), "--dns-max-records=-1") {
		t.Errorf("New with MaxRecords -1: %v, want an error naming --dns-max-records", err)
	}
}
