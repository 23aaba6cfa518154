// Package dns resolves dns sources: the A and AAAA records of a DNS name,
// asked of the configured resolvers with github.com/miekg/dns so that the
// answer's TTLs are seen and decide when to look again.
//
// What an answer means for the endpoints:
//   - addresses found: one serving endpoint each, for the families the spec
//     publishes; CNAME chains are followed.
//   - NXDOMAIN: the backend is gone (providers.Gone, BackendNotFound): its
//     endpoints drain. The failure is terminal, so the controller schedules
//     no further lookup; the name is asked again when the spec changes or
//     the backend is reconciled for another reason.
//   - NOERROR without addresses of the families asked for (NODATA): an empty
//     answer, so the endpoints drain as they would for a static source that
//     lists nothing. The name exists and answered; keeping addresses it no
//     longer has would keep traffic on machines that left. It is asked again
//     after the SOA's negative-caching TTL, so records that come back are
//     published again.
//   - SERVFAIL, REFUSED, a referral, a CNAME loop, a timeout or a network
//     error from every resolver: a transient failure, so the controller keeps
//     the last known endpoints and retries.
//   - a CNAME chain that leads into a name the controller denies
//     (Request.DeniedName: the cluster's DNS domain, localhost, a metadata
//     service's name): the chain is not followed there, nothing of the
//     answer is published, and the failure is transient. It is transient,
//     not terminal, because the spec is not what is wrong: the records are,
//     and they change without the spec changing (the owner fixes them, or
//     a hijacked record is taken back), which only a lookup again notices;
//     meanwhile the last known endpoints are kept, as for a failing
//     resolver. The message names the source's own name only, never
//     where its chain led: that may be another team's record.
//
// FQDN: when spec.addressTypes lists FQDN, the name itself is published as
// one FQDN endpoint, besides the addresses of the IP families listed. The
// name is published as written, not looked up for it: consumers of an FQDN
// endpoint resolve it with their own resolvers.
//
// Names are absolute: no search list is applied, since a search list would
// make the answer depend on where the controller runs and could aim a
// Service at an in-cluster name.
package dns

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	mdns "github.com/miekg/dns"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
)

// Defaults of Options, and of the controller's flags.
const (
	// DefaultResolvConf is read for resolvers when none are given.
	DefaultResolvConf = "/etc/resolv.conf"
	// DefaultQueryTimeout bounds one query to one resolver.
	DefaultQueryTimeout = 2 * time.Second
	// DefaultMinRefresh is the shortest time between lookups of a name
	// where the spec sets no minRefresh.
	DefaultMinRefresh = 5 * time.Second
	// DefaultMaxRefresh is the longest time between lookups of a name
	// where the spec sets no maxRefresh.
	DefaultMaxRefresh = 5 * time.Minute
	// DefaultMaxRecords bounds the addresses taken from one name's answers:
	// a name that rotates thousands of records would otherwise cost as
	// many endpoints, and the writes of every change to them.
	DefaultMaxRecords = 1000
)

// Options configure the dns provider. Zero fields take the defaults above.
type Options struct {
	// Resolvers are the DNS servers asked, in order, as host:port (port 53
	// when left out). Empty means the nameservers of ResolvConf.
	Resolvers []string
	// ResolvConf is the resolver configuration read when Resolvers is empty.
	ResolvConf string
	// QueryTimeout bounds one query to one resolver; a resolver that does
	// not answer in time is skipped for the next.
	QueryTimeout time.Duration
	// MinRefresh and MaxRefresh clamp the answer's TTL into the time until
	// the name is looked up again, where the spec sets no bound.
	MinRefresh, MaxRefresh time.Duration
	// MaxRecords bounds the addresses taken from one name (A and AAAA
	// together); zero means DefaultMaxRecords.
	MaxRecords int
}

// BindFlags registers the --dns-* flags of the controller on fs.
func (o *Options) BindFlags(fs *pflag.FlagSet) {
	fs.StringSliceVar(&o.Resolvers, "dns-resolvers", nil,
		"DNS resolvers for dns sources, as host:port, asked in order (default: the nameservers of "+DefaultResolvConf+")")
	fs.DurationVar(&o.QueryTimeout, "dns-query-timeout", DefaultQueryTimeout,
		"how long one DNS query waits for one resolver before asking the next")
	fs.DurationVar(&o.MinRefresh, "dns-min-refresh", DefaultMinRefresh,
		"shortest time between lookups of a DNS name, whatever its TTL or the spec says")
	fs.DurationVar(&o.MaxRefresh, "dns-max-refresh", DefaultMaxRefresh,
		"longest time between lookups of a DNS name, whatever its TTL, where the spec sets no maxRefresh")
	fs.IntVar(&o.MaxRecords, "dns-max-records", DefaultMaxRecords,
		"most addresses taken from one DNS name's answers (A and AAAA together); past it the first in sorted order are published and the Synced condition says so")
}

// Provider resolves dns sources. It keeps no state between calls: each
// Resolve asks the resolvers, which do the caching.
type Provider struct {
	// resolvers are the controller's own, asked for sources that name no
	// BackendProvider.
	resolvers    resolverSet
	queryTimeout time.Duration
	minRefresh   time.Duration
	maxRefresh   time.Duration
	maxRecords   int
	udp, tcp     *mdns.Client
}

// New returns a dns provider configured by opts; the error names the flag
// to fix.
func New(opts Options) (*Provider, error) {
	p := &Provider{
		queryTimeout: orDefault(opts.QueryTimeout, DefaultQueryTimeout),
		minRefresh:   orDefault(opts.MinRefresh, DefaultMinRefresh),
		maxRefresh:   orDefault(opts.MaxRefresh, DefaultMaxRefresh),
		maxRecords:   cmp.Or(opts.MaxRecords, DefaultMaxRecords),
	}
	switch {
	case p.maxRecords < 1:
		return nil, fmt.Errorf("--dns-max-records=%d: must be at least 1", p.maxRecords)
	case p.queryTimeout < 0:
		return nil, fmt.Errorf("--dns-query-timeout=%s: must be positive", p.queryTimeout)
	case p.minRefresh < 0:
		return nil, fmt.Errorf("--dns-min-refresh=%s: must be positive", p.minRefresh)
	case p.maxRefresh < p.minRefresh:
		return nil, fmt.Errorf("--dns-max-refresh=%s: must not be shorter than --dns-min-refresh=%s", p.maxRefresh, p.minRefresh)
	}
	addrs, err := resolvers(opts)
	if err != nil {
		return nil, err
	}
	p.resolvers = resolverSet{addrs: addrs, from: "--dns-resolvers"}
	p.udp = &mdns.Client{Net: "udp", Timeout: p.queryTimeout}
	p.tcp = &mdns.Client{Net: "tcp", Timeout: p.queryTimeout}
	return p, nil
}

// orDefault is v, or def when v is zero.
func orDefault(v, def time.Duration) time.Duration {
	if v == 0 {
		return def
	}
	return v
}

// resolvers are the host:port addresses to ask, from the options or the
// resolver configuration file.
func resolvers(opts Options) ([]string, error) {
	if len(opts.Resolvers) == 0 {
		file := opts.ResolvConf
		if file == "" {
			file = DefaultResolvConf
		}
		cfg, err := mdns.ClientConfigFromFile(file)
		if err != nil {
			return nil, fmt.Errorf("reading the DNS resolvers from %s: %w; set --dns-resolvers", file, err)
		}
		if len(cfg.Servers) == 0 {
			return nil, fmt.Errorf("%s lists no nameserver; set --dns-resolvers", file)
		}
		out := make([]string, 0, len(cfg.Servers))
		for _, s := range cfg.Servers {
			out = append(out, net.JoinHostPort(s, cfg.Port))
		}
		return out, nil
	}
	out := make([]string, 0, len(opts.Resolvers))
	for _, r := range opts.Resolvers {
		addr, err := hostPort(r)
		if err != nil {
			return nil, fmt.Errorf("--dns-resolvers: %q: %w", r, err)
		}
		out = append(out, addr)
	}
	return out, nil
}

// resolverSet is the resolvers one source is asked of, in order, as
// host:port, and where they were configured, for messages.
type resolverSet struct {
	addrs []string
	from  string
}

// resolversOf are the resolvers of a source: the BackendProvider's when the
// request names one, else the controller's own.
func (p *Provider) resolversOf(cc *providers.Connection) (resolverSet, error) {
	if cc == nil {
		return p.resolvers, nil
	}
	from := "BackendProvider " + cc.Name
	settings, ok := providers.SettingsOf[*Settings](cc)
	switch {
	case !ok:
		return resolverSet{}, providers.Terminalf(v1alpha1.ReasonInvalidSpec,
			"%s is not a DNS connection; name a DNS BackendProvider in providerRef", from)
	case len(settings.Resolvers) == 0:
		return resolverSet{}, providers.Terminalf(v1alpha1.ReasonInvalidSpec, "%s lists no DNS resolvers", from)
	}
	set := resolverSet{addrs: make([]string, 0, len(settings.Resolvers)), from: from}
	for _, r := range settings.Resolvers {
		addr, err := hostPort(r)
		if err != nil {
			return resolverSet{}, providers.Terminalf(v1alpha1.ReasonInvalidSpec, "%s: resolver %q: %v", from, r, err)
		}
		set.addrs = append(set.addrs, addr)
	}
	return set, nil
}

// errNotHostPort says what a resolver address must look like.
var errNotHostPort = errors.New("not host:port, such as 10.96.0.10:53 or [2001:db8::53]:53")

// hostPort is s as host:port, adding port 53 to a bare IP or host name.
func hostPort(s string) (string, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		if _, ipErr := netip.ParseAddr(s); ipErr == nil || (s != "" && !strings.Contains(s, ":")) {
			return net.JoinHostPort(s, "53"), nil
		}
		return "", errNotHostPort
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 || host == "" {
		return "", errNotHostPort
	}
	return s, nil
}

// Kind is the dns kind.
func (*Provider) Kind() providers.Kind { return Kind }

// Resolve looks up the source's name and returns one serving endpoint per
// address of the families asked for, plus the name itself when FQDN is.
// RefreshAfter is the answer's smallest TTL, clamped to the refresh bounds.
// The name is asked of the resolvers of the BackendProvider the request
// names, else of the controller's own.
func (p *Provider) Resolve(ctx context.Context, req providers.Request) (providers.Result, error) {
	src := req.Source.DNS
	if src == nil {
		return providers.Result{}, providers.Terminalf(v1alpha1.ReasonInvalidSpec,
			"spec.sources[%s]: not a dns source", req.Source.Name)
	}
	field := fmt.Sprintf("spec.sources[%s].dns", req.Source.Name)
	name := strings.TrimSuffix(src.Name, ".")
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return providers.Result{}, providers.Terminalf(v1alpha1.ReasonInvalidSpec,
			"%s.name: %q is not a valid DNS name: %s; use a name such as db.example.com",
			field, src.Name, strings.Join(errs, "; "))
	}
	lo, hi, err := p.refreshBounds(field, src)
	if err != nil {
		return providers.Result{}, err
	}
	servers, err := p.resolversOf(req.Connection)
	if err != nil {
		return providers.Result{}, err
	}

	var eps []providers.Endpoint
	var qtypes []uint16
	for _, t := range req.AddressTypes {
		switch t {
		case v1alpha1.AddressTypeFQDN:
			eps = append(eps, providers.Endpoint{Address: name, Serving: true})
		case v1alpha1.AddressTypeIPv4:
			qtypes = append(qtypes, mdns.TypeA)
		case v1alpha1.AddressTypeIPv6:
			qtypes = append(qtypes, mdns.TypeAAAA)
		}
	}
	if len(qtypes) == 0 {
		// Only the name is published: nothing to look up, and nothing that
		// changes until the spec does.
		return providers.Result{Endpoints: eps}, nil
	}

	answers := make([]answer, len(qtypes))
	errs := make([]error, len(qtypes))
	var wg sync.WaitGroup
	for i, qt := range qtypes {
		wg.Go(func() { answers[i], errs[i] = p.lookup(ctx, servers, mdns.Fqdn(name), qt, req.DeniedName) })
	}
	wg.Wait()
	if err := failure(field, name, errs); err != nil {
		return providers.Result{}, err
	}

	var addrs []string
	var ttl minTTL
	for _, a := range answers {
		addrs = append(addrs, a.addrs...)
		ttl.merge(a.ttl)
	}
	slices.Sort(addrs)
	addrs = slices.Compact(addrs)
	var limit string
	if len(addrs) > p.maxRecords {
		// The first in sorted order, so that the same answer publishes
		// the same ones, and a rotation among the rest writes nothing.
		limit = fmt.Sprintf("%s.name: %d addresses answered, the first %d published (the controller's --dns-max-records)",
			field, len(addrs), p.maxRecords)
		addrs = addrs[:p.maxRecords]
	}
	for _, a := range addrs {
		eps = append(eps, providers.Endpoint{Address: a, Serving: true})
	}
	return providers.Result{Endpoints: eps, RefreshAfter: ttl.refresh(lo, hi), Limit: limit}, nil
}

// refreshBounds are the shortest and longest times until the next lookup:
// the spec's, else the provider's, and never below the provider's floor
// (--dns-min-refresh). A spec floor above the default ceiling wins over it;
// two spec bounds that contradict each other are an invalid spec.
func (p *Provider) refreshBounds(field string, src *v1alpha1.DNSSource) (lo, hi time.Duration, err error) {
	lo, hi = p.minRefresh, p.maxRefresh
	if d := src.MinRefresh; d != nil {
		if d.Duration <= 0 {
			return 0, 0, providers.Terminalf(v1alpha1.ReasonInvalidSpec, "%s.minRefresh: %s must be positive", field, d.Duration)
		}
		lo = d.Duration
	}
	if d := src.MaxRefresh; d != nil {
		if d.Duration <= 0 {
			return 0, 0, providers.Terminalf(v1alpha1.ReasonInvalidSpec, "%s.maxRefresh: %s must be positive", field, d.Duration)
		}
		hi = d.Duration
	}
	switch {
	case lo <= hi:
	case src.MinRefresh != nil && src.MaxRefresh != nil:
		return 0, 0, providers.Terminalf(v1alpha1.ReasonInvalidSpec,
			"%s.minRefresh: %s is longer than maxRefresh %s", field, lo, hi)
	case src.MinRefresh != nil:
		hi = lo
	default:
		lo = hi
	}
	// The controller's floor holds whatever the spec says: a spec must not
	// be able to make the controller look up a name in a tight loop.
	return max(lo, p.minRefresh), max(hi, p.minRefresh), nil
}

// failure is the provider error for the lookups' errors of name, nil when
// none failed. A chain into a denied name fails the whole source, whatever
// the other lookup found. Any lookup that failed for an unknown reason
// makes the failure transient, so the last known endpoints are kept: only
// a certain answer drains them.
func failure(field, name string, errs []error) error {
	var gone *nxdomain
	var transient joined
	for _, err := range errs {
		var nx *nxdomain
		switch {
		case err == nil:
		case errors.Is(err, errDeniedTarget):
			return providers.Transient(fmt.Errorf("%s.name: %s: %w; nothing of its answer is published: point the name at the backend outside the cluster",
				field, name, errDeniedTarget))
		case errors.As(err, &nx):
			gone = nx
		default:
			transient = append(transient, err)
		}
	}
	switch {
	case len(transient) > 0:
		return providers.Transient(fmt.Errorf("%s.name: %w", field, transient))
	case gone != nil:
		return providers.Gone(v1alpha1.ReasonBackendNotFound,
			fmt.Errorf("%s.name: %w; its endpoints drain: fix the name or create its records", field, gone))
	}
	return nil
}

// joined are errors told in one line, as a condition message reads best
// (errors.Join puts each on a line of its own).
type joined []error

func (j joined) Error() string {
	msgs := make([]string, len(j))
	for i, err := range j {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; ")
}

// Unwrap returns the errors, for errors.Is and errors.As.
func (j joined) Unwrap() []error { return j }

var _ providers.Provider = (*Provider)(nil)
