// Package providers defines how the controller learns a backend's endpoints:
// one small Provider interface per source kind, a Registry that maps source
// kinds to providers, the shared Endpoint model and typed errors.
package providers

import (
	"context"
	"time"

	"github.com/backendslice/backendslice/api/v1alpha1"
)

// Kind names a source kind as it appears in spec.sources[]: the field that is set.
type Kind string

// Source kinds, one per field of v1alpha1.Source.
const (
	KindStatic Kind = "static"
	KindDNS    Kind = "dns"
	KindConsul Kind = "consul"
	KindAWSRDS Kind = "awsRDS"
	KindAWSEC2 Kind = "awsEC2"
	KindPlugin Kind = "plugin"

	KindAWSElastiCache Kind = "awsElastiCache"
	KindAWSMemoryDB    Kind = "awsMemoryDB"
)

// Endpoint is one address of a backend as a provider found it. Providers fill
// it as the backend describes itself; normalisation canonicalises the address,
// classifies its family and drops what must not be published.
type Endpoint struct {
	// Address is an IP address or, for FQDN publication, a DNS name.
	Address string
	// Zone is the backend's availability zone, if known.
	Zone string
	// Hostname is a DNS-1123 label naming the endpoint, if known.
	Hostname string
	// Serving is true when the endpoint can take traffic.
	Serving bool
	// Terminating is true when the backend is going away (maintenance,
	// deletion): it is published as ready=false while it drains.
	Terminating bool
	// Port, when not zero, is the backend's own port (an RDS instance tells
	// its own); it is used for every Service port that sets no targetPort.
	Port int32
}

// Request is what a provider is asked to resolve.
type Request struct {
	// Namespace and Backend name the ExternalBackend, for logs and shared watches.
	Namespace, Backend string
	// Source is the spec entry to resolve.
	Source v1alpha1.Source
	// AddressTypes are the families the spec publishes.
	AddressTypes []v1alpha1.AddressType
	// DeniedName, when set, says why a name an answer leads to (a CNAME
	// target a dns source's lookup would follow) must not be followed, or
	// is "" when it may: the controller's checks of a name (its cluster
	// domain, localhost, the metadata services' names and its
	// --denied-names). Nil follows every name: offline callers only.
	DeniedName func(name string) string
	// Connection is the BackendProvider the source names in providerRef,
	// read and admitted by the controller; nil for a source without one,
	// which the provider serves with the connection of the controller's
	// own flags.
	Connection *Connection
}

// Connection is one BackendProvider as a provider uses it: where to
// connect and with what, the Secrets already read. The controller builds
// it afresh for each request, so a changed provider or a rotated Secret
// applies from the next request on.
type Connection struct {
	// Name is the BackendProvider's name. Providers keep clients and
	// shared watches per Key, so that two providers never share an answer.
	Name string
	// Key changes whenever anything that changes what the connection can
	// reach changes (the spec, the CA): a provider makes new clients for a
	// new key. A rotated token keeps the key: clients ask Token per query.
	Key string
	// One of these is set, of the source's kind, by its row's Connect; a
	// kind whose provider needs nothing more than the name sets none.
	Consul *ConsulConnection
	AWS    *AWSConnection
	DNS    *DNSConnection
	Plugin *PluginConnection
}

// ConsulConnection is a Consul cluster's HTTP API.
type ConsulConnection struct {
	// Address is host:port, or a URL whose https:// scheme turns TLS on.
	Address string
	// CAPEM verifies the agent's certificate; setting it implies https.
	CAPEM []byte
	// ServerName is verified in the agent's certificate; implies https.
	ServerName string
	// Datacenter is queried where the source names none.
	Datacenter string
	// Token returns the current ACL token ("" for none). It is asked
	// before every query, so a rotated Secret applies without a restart.
	Token func() (string, error)
}

// AWSConnection is an AWS account and region.
type AWSConnection struct {
	Region string
	// AssumeRoleARN is assumed through STS; empty reads as the controller.
	AssumeRoleARN string
	// EndpointURL replaces the RDS, EC2, ElastiCache, MemoryDB and STS
	// endpoints when set.
	EndpointURL string
	// ConsentTag, when set, publishes only instances, clusters and caches
	// whose tag of this key lists the request's namespace (comma-separated).
	ConsentTag string
}

// PluginConnection is a provider plugin: where it listens, how it is
// trusted, and the bounds the platform team set on it.
type PluginConnection struct {
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

// DNSConnection is a set of DNS resolvers, host:port.
type DNSConnection struct {
	Resolvers []string
}

// Result is what a provider found.
type Result struct {
	// Endpoints found, in any order.
	Endpoints []Endpoint
	// RefreshAfter is when the provider wants to be asked again; zero means
	// the answer holds until the spec changes (or a watch says otherwise).
	RefreshAfter time.Duration
	// Limit, when set, says which limit of the provider's cut the answer
	// short (field, what was left out, the flag): the controller shows it
	// on status.
	Limit string
}

// Provider resolves one kind of source. Implementations are read-only and
// idempotent: resolving twice with nothing changed gives the same endpoints.
// Errors are *Error values (see Transient and Terminal).
type Provider interface {
	// Kind is the source kind this provider resolves.
	Kind() Kind
	// Resolve returns the endpoints of one source.
	Resolve(ctx context.Context, req Request) (Result, error)
}

// Checker is implemented by the providers of kinds whose BackendProviders
// have a connection (consul, aws, dns): it tells whether a connection
// works, so that a BackendProvider's Ready condition says more than that
// its Secrets parse. A check is one cheap call that needs no permission
// beyond what sources through the connection need, and changes nothing.
type Checker interface {
	// CheckConnection makes that call through conn (nil: the controller's
	// own connection of the kind, which a BackendProvider that names none
	// of its own uses) and returns why the connection does not work,
	// naming the address it asked, or nil. It returns when ctx ends.
	CheckConnection(ctx context.Context, conn *Connection) error
}
