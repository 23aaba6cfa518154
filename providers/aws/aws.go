// Package aws resolves awsRDS, awsEC2, awsElastiCache and awsMemoryDB
// sources with aws-sdk-go-v2.
//
// The providers share one Session: its credentials, its SDK clients and,
// above all, its Describe listings. A listing is one paginated Describe of a
// whole region (DescribeDBInstances, DescribeDBClusters, DescribeInstances,
// DescribeReplicationGroups, DescribeCacheClusters, DescribeServerlessCaches
// or MemoryDB's DescribeClusters) for one identity (the controller's own, an allowed
// assumeRoleARN or a BackendProvider's role, at one endpoint). Every backend reads the listing's cached answer; the
// listing is listed again only when its answer is older than the refresh
// interval (less a random jitter of up to a tenth, so that listings do not
// refresh in lockstep). The number of AWS calls therefore grows with the
// number of regions, identities and pages, not with the number of backends
// or reconciles. Each Result asks to be resolved again after the refresh
// interval, by which time the answer it was built from has expired.
//
// A listing, and the SDK clients of its identity, live as long as a source
// reads them: Resolve records which listings each source of each backend
// reads, and Forget (called by the controller after each reconcile and when
// a backend goes) lets go of the sources that are no longer in the spec. So
// the regions tenants write cost memory only while some backend names them.
// Close ends the listings in flight.
//
// Credentials come from the SDK's default chain (IRSA web identity,
// environment, shared config, instance profile). A source's assumeRoleARN is
// assumed only when it is listed in --aws-allowed-role-arns, so that a
// tenant cannot make the controller act as a role of their choosing.
//
// A source that names a BackendProvider (providers.Request.Connection) reads
// the provider's account and region instead: its role (assumed through STS
// without the allow-list, since the platform team wrote it), its region, its
// endpoint for RDS, EC2 and STS, and, when the provider sets a consent tag,
// only the instances and clusters whose owners listed the backend's
// namespace in that tag (see target). Listings are shared by identity, so
// two accounts or endpoints never share one, and the consent filter is
// applied per source on the shared listing, without further calls.
//
// Failures keep the last known endpoints (see providers.Error):
//   - AccessDenied, UnauthorizedOperation and other refusals of the
//     identity, and missing credentials, are terminal until the
//     configuration changes;
//   - throttling and network errors are transient: the SDK's retryer backs
//     off and retries within a call, and the controller retries after it;
//   - a listing whose pages AWS ends with a repeated pagination token is
//     transient: the pages read are part of the region only, and
//     publishing them would drain the instances on the pages never read;
//   - an instance, cluster or cache that is not in the listing, nor in
//     one that started after the source missed it, is gone
//     (BackendNotFound): its endpoints drain.
package aws

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials/stscreds"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/elasticache"
	"github.com/aws/aws-sdk-go-v2/service/memorydb"
	"github.com/aws/aws-sdk-go-v2/service/rds"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/clock"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
)

// Defaults of Options, and of the controller's flags.
const (
	// DefaultRefreshInterval is how old a region's listing may grow before
	// it is listed again.
	DefaultRefreshInterval = time.Minute
	// DefaultMaxAttempts is how many times the SDK tries one call when it
	// is throttled or the network fails.
	DefaultMaxAttempts = 5
	// DefaultMaxBackoff caps the SDK's wait between two attempts.
	DefaultMaxBackoff = 20 * time.Second
	// DefaultErrorHold is how long a failed listing is answered from memory
	// before it is tried again, so that a throttled account is not called
	// by every backend that retries.
	DefaultErrorHold = 10 * time.Second
	// DefaultFetchTimeout bounds one listing, all its pages and retries.
	DefaultFetchTimeout = 2 * time.Minute
)

// jitter is the largest fraction of the refresh interval taken off a
// listing's lifetime.
const jitter = 0.1

// Resolver resolves an RDS instance's endpoint name; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Options configure the AWS providers. Zero fields take the defaults above.
type Options struct {
	// AllowedRoleARNs are the roles a source's assumeRoleARN may name.
	AllowedRoleARNs []string
	// EndpointURL, when set, is the base endpoint of the RDS, EC2,
	// ElastiCache and MemoryDB clients
	// (a VPC endpoint, or a test server) of the sources that name no
	// BackendProvider.
	EndpointURL string
	// RefreshInterval is how old a region's listing may grow before it is
	// listed again, and when a backend is resolved again.
	RefreshInterval time.Duration
	// MaxAttempts and MaxBackoff configure the SDK's retryer.
	MaxAttempts int
	MaxBackoff  time.Duration
	// ErrorHold is how long a failed listing is answered from memory;
	// refusals (access denied, no credentials) are not held.
	ErrorHold time.Duration
	// FetchTimeout bounds one listing.
	FetchTimeout time.Duration

	// Credentials replaces the default credential chain (tests use static
	// keys); nil keeps the chain.
	Credentials awssdk.CredentialsProvider
	// Resolver resolves RDS endpoint names; nil is net.DefaultResolver.
	Resolver Resolver
	// Clock tells listings' age; nil is the real clock.
	Clock clock.PassiveClock
	// Log receives each failed listing with AWS's whole answer, which
	// backends' status tells redacted; the zero Logger discards.
	Log logr.Logger
}

// BindFlags registers the --aws-* flags of the controller on fs.
func (o *Options) BindFlags(fs *pflag.FlagSet) {
	fs.StringSliceVar(&o.AllowedRoleARNs, "aws-allowed-role-arns", nil,
		"IAM role ARNs that awsRDS, awsEC2, awsElastiCache and awsMemoryDB sources may name in assumeRoleARN (default: none, every source uses the controller's own credentials)")
	fs.StringVar(&o.EndpointURL, "aws-endpoint-url", "",
		"base URL of the RDS, EC2, ElastiCache and MemoryDB APIs, for VPC endpoints (default: the region's public endpoint)")
	fs.DurationVar(&o.RefreshInterval, "aws-refresh-interval", DefaultRefreshInterval,
		"how often each region's RDS, EC2, ElastiCache and MemoryDB listings are refreshed; all backends share them")
	fs.IntVar(&o.MaxAttempts, "aws-max-attempts", DefaultMaxAttempts,
		"attempts of one AWS call when it is throttled or the network fails")
	fs.DurationVar(&o.MaxBackoff, "aws-max-backoff", DefaultMaxBackoff,
		"longest wait between two attempts of one AWS call")
}

// Session holds what the AWS providers share: configuration, SDK clients
// by identity and region, and the Describe listings. Its methods are safe for
// concurrent use.
type Session struct {
	base     awssdk.Config
	allowed  map[string]bool
	endpoint string
	refresh  time.Duration
	hold     time.Duration
	timeout  time.Duration
	resolver Resolver
	clock    clock.PassiveClock
	log      logr.Logger

	// ctx ends the listings in flight on Close; wg waits for them.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// mu guards the fields below.
	mu sync.Mutex
	// clients are the SDK clients of the identities some listing lists as.
	clients map[identity]*clients
	// listings are the listings some source reads.
	listings map[listingKey]*shared
	// sources are the listings each source of each backend read when it was
	// last resolved.
	sources map[types.NamespacedName]map[interest][]listingKey
	// closed is set by Close: nothing is kept or listed after it.
	closed bool
}

// identity is who calls AWS, and where.
type identity struct {
	// role is the assumed role ARN, or "" for the controller's own credentials.
	role, region string
	// endpoint replaces the RDS and EC2 endpoints, and stsEndpoint the one
	// the role is assumed through; "" is the region's public one.
	endpoint, stsEndpoint string
}

// clients are the SDK clients of one identity.
type clients struct {
	rds         *rds.Client
	ec2         *ec2.Client
	elastiCache *elasticache.Client
	memoryDB    *memorydb.Client
	// listings is how many listings in Session.listings list with them.
	listings int
}

// interest names one source of a backend among those the session tracks.
// RDS and EC2 sources are told apart by kind, since each provider forgets
// only its own.
type interest struct {
	kind   providers.Kind
	source string
}

// New returns a session configured by opts; the error names the flag to fix.
func New(ctx context.Context, opts Options) (*Session, error) {
	s := &Session{
		allowed:  map[string]bool{},
		endpoint: opts.EndpointURL,
		refresh:  orDefault(opts.RefreshInterval, DefaultRefreshInterval),
		hold:     orDefault(opts.ErrorHold, DefaultErrorHold),
		timeout:  orDefault(opts.FetchTimeout, DefaultFetchTimeout),
		resolver: opts.Resolver,
		clock:    opts.Clock,
		log:      opts.Log,
		clients:  map[identity]*clients{},
		listings: map[listingKey]*shared{},
		sources:  map[types.NamespacedName]map[interest][]listingKey{},
	}
	attempts := opts.MaxAttempts
	if attempts == 0 {
		attempts = DefaultMaxAttempts
	}
	backoff := orDefault(opts.MaxBackoff, DefaultMaxBackoff)
	switch {
	case s.refresh < 0:
		return nil, fmt.Errorf("--aws-refresh-interval=%s: must be positive", s.refresh)
	case attempts < 1:
		return nil, fmt.Errorf("--aws-max-attempts=%d: must be at least 1", attempts)
	case backoff < 0:
		return nil, fmt.Errorf("--aws-max-backoff=%s: must be positive", backoff)
	}
	for _, arn := range opts.AllowedRoleARNs {
		if !isRoleARN(arn) {
			return nil, fmt.Errorf("--aws-allowed-role-arns: %q is not an IAM role ARN such as arn:aws:iam::123456789012:role/name", arn)
		}
		s.allowed[arn] = true
	}
	if s.resolver == nil {
		s.resolver = net.DefaultResolver
	}
	if s.clock == nil {
		s.clock = clock.RealClock{}
	}
	loads := []func(*config.LoadOptions) error{
		config.WithRetryer(func() awssdk.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = attempts
				o.MaxBackoff = backoff
			})
		}),
	}
	if opts.Credentials != nil {
		loads = append(loads, config.WithCredentialsProvider(opts.Credentials))
	}
	var err error
	if s.base, err = config.LoadDefaultConfig(ctx, loads...); err != nil {
		return nil, fmt.Errorf("loading the AWS configuration: %w", err)
	}
	s.base.Credentials = markFailures{s.base.Credentials}
	// Wrapped once loaded, since loading configures the SDK's own client
	// (AWS_CA_BUNDLE); one client, and its connections, then serves every
	// identity and service (see ownBodies).
	s.base.HTTPClient = ownBodies{s.base.HTTPClient}
	// Listings outlive the Resolve that starts them (see cachedListing.list), so
	// they hang off the session, not off a caller.
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// credentialsError is a failure to get credentials. The SDK reports it as
// an untyped "get identity" error, so the session marks it on the way.
type credentialsError struct{ err error }

func (e *credentialsError) Error() string { return e.err.Error() }
func (e *credentialsError) Unwrap() error { return e.err }

// markFailures wraps a credentials provider so that its failures are
// *credentialsError values.
type markFailures struct{ p awssdk.CredentialsProvider }

// Retrieve returns the wrapped provider's credentials, or its failure as a
// *credentialsError.
func (m markFailures) Retrieve(ctx context.Context) (awssdk.Credentials, error) {
	c, err := m.p.Retrieve(ctx)
	if err != nil {
		return c, &credentialsError{err}
	}
	return c, nil
}

// orDefault is v, or def when v is zero.
func orDefault(v, def time.Duration) time.Duration {
	if v == 0 {
		return def
	}
	return v
}

// RDS returns the awsRDS provider of the session.
func (s *Session) RDS() *RDSProvider { return &RDSProvider{member{s, KindRDS}} }

// EC2 returns the awsEC2 provider of the session.
func (s *Session) EC2() *EC2Provider { return &EC2Provider{member{s, KindEC2}} }

// ElastiCache returns the awsElastiCache provider of the session.
func (s *Session) ElastiCache() *ElastiCacheProvider {
	return &ElastiCacheProvider{member{s, KindElastiCache}}
}

// MemoryDB returns the awsMemoryDB provider of the session.
func (s *Session) MemoryDB() *MemoryDBProvider {
	return &MemoryDBProvider{member{s, KindMemoryDB}}
}

// isRoleARN tells whether arn looks like an IAM role ARN.
func isRoleARN(arn string) bool {
	return strings.HasPrefix(arn, "arn:") && strings.Contains(arn, ":role/")
}

// roleSessionName names the controller's sessions of assumed roles in the
// accounts' CloudTrail.
const roleSessionName = "backendslice"

// configOf is the SDK configuration of id: the session's, in id's region,
// with id's role assumed (through STS, with stsOpts) when it names one.
func (s *Session) configOf(id identity, stsOpts ...func(*sts.Options)) awssdk.Config {
	cfg := s.base.Copy()
	cfg.Region = id.region
	if id.role != "" {
		opts := append([]func(*sts.Options){func(o *sts.Options) { o.BaseEndpoint = endpointOf(id.stsEndpoint) }}, stsOpts...)
		client := sts.NewFromConfig(cfg, opts...)
		cfg.Credentials = markFailures{awssdk.NewCredentialsCache(stscreds.NewAssumeRoleProvider(client, id.role,
			func(o *stscreds.AssumeRoleOptions) { o.RoleSessionName = roleSessionName }))}
	}
	return cfg
}

// newClients makes the SDK clients of id.
func (s *Session) newClients(id identity) *clients {
	cfg := s.configOf(id)
	base := endpointOf(id.endpoint)
	return &clients{
		rds:         rds.NewFromConfig(cfg, func(o *rds.Options) { o.BaseEndpoint = base }),
		ec2:         ec2.NewFromConfig(cfg, func(o *ec2.Options) { o.BaseEndpoint = base }),
		elastiCache: elasticache.NewFromConfig(cfg, func(o *elasticache.Options) { o.BaseEndpoint = base }),
		memoryDB:    memorydb.NewFromConfig(cfg, func(o *memorydb.Options) { o.BaseEndpoint = base }),
	}
}

// endpointOf is a client's BaseEndpoint: nil, the region's public
// endpoint, for "".
func endpointOf(url string) *string {
	if url == "" {
		return nil
	}
	return awssdk.String(url)
}

// publishName publishes a backend AWS gives a DNS name (an RDS instance's
// endpoint, a cache node's): the name itself when FQDN is asked for, and
// the addresses it resolves to of the IP families asked for, each as
// base says. what names the backend in a failure to resolve.
func (s *Session) publishName(ctx context.Context, field, what, name string, base providers.Endpoint, types []v1alpha1.AddressType) ([]providers.Endpoint, error) {
	var out []providers.Endpoint
	if wants(types, v1alpha1.AddressTypeFQDN) {
		ep := base
		ep.Address = name
		out = append(out, ep)
	}
	v4, v6 := wants(types, v1alpha1.AddressTypeIPv4), wants(types, v1alpha1.AddressTypeIPv6)
	if !v4 && !v6 {
		return out, nil
	}
	addrs, err := s.resolver.LookupNetIP(ctx, "ip", name)
	if err != nil {
		if ctx.Err() != nil {
			return nil, providers.Transient(fmt.Errorf("%s: resolving %s: %w", field, name, ctx.Err()))
		}
		return nil, providers.Transient(fmt.Errorf("%s: resolving the endpoint %s of %s: %w", field, name, what, err))
	}
	for _, a := range addrs {
		a = a.Unmap()
		if (a.Is4() && v4) || (a.Is6() && v6) {
			ep := base
			ep.Address = a.String()
			out = append(out, ep)
		}
	}
	return out, nil
}

// collect reads every page of a paginator (more and next are its
// HasMorePages and NextPage, made with StopOnDuplicateToken) into one map,
// by key: put adds a page's items. token is the pagination token a page
// names. A listing whose last page still names a token stopped on a
// repeated one, and fails (see stoppedEarly).
func collect[V, P, O any](ctx context.Context, more func() bool, next func(context.Context, ...func(*O)) (P, error), token func(P) *string, put func(out map[string]V, page P)) (map[string]V, error) {
	out := map[string]V{}
	var last *string
	for more() {
		page, err := next(ctx)
		if err != nil {
			return out, err
		}
		last = token(page)
		put(out, page)
	}
	return out, stoppedEarly(last)
}

// wants tells whether the spec publishes address type t.
func wants(types []v1alpha1.AddressType, t v1alpha1.AddressType) bool {
	return slices.Contains(types, t)
}

// hostname is name when it is a DNS-1123 label (RDS identifiers, EC2
// instance IDs and cache cluster IDs are), so that headless Services
// publish it; else "".
func hostname(name string) string {
	if len(validation.IsDNS1123Label(name)) == 0 {
		return name
	}
	return ""
}

// tagMap is a list of AWS tags (each service has a Tag type of its own,
// all with a Key and a Value) by key; kv reads one.
func tagMap[T any](list []T, kv func(T) (key, value *string)) map[string]string {
	out := make(map[string]string, len(list))
	for _, t := range list {
		k, v := kv(t)
		out[awssdk.ToString(k)] = awssdk.ToString(v)
	}
	return out
}

// hasTags tells whether have carries every tag of want.
func hasTags(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}
