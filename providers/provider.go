// Package providers defines how the controller learns a backend's endpoints:
// one small Provider interface per source kind, a Registry that maps source
// kinds to providers, the shared Endpoint model and typed errors.
package providers

import (
	"context"
	"time"

	"github.com/backendslice/backendslice/api/v1alpha1"
)

// Kind names a source kind as it appears in spec.sources[]: the field that
// is set. Each kind's package declares its own.
type Kind string

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
	// Settings are what the kind's row (its Connect) read from the
	// provider's spec and Secrets, of a type the kind's package declares;
	// nil for a kind whose provider needs nothing more than the name.
	Settings any
}

// SettingsOf are conn's settings when they are of type T, the kind's own;
// false for no connection or one of another kind.
func SettingsOf[T any](conn *Connection) (T, bool) {
	var zero T
	if conn == nil {
		return zero, false
	}
	s, ok := conn.Settings.(T)
	return s, ok
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
