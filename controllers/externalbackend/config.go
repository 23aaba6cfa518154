package externalbackend

import (
	"net/netip"
	"time"

	"github.com/backendslice/backendslice/internal/coalesce"
	"github.com/backendslice/backendslice/internal/decide"
	"github.com/backendslice/backendslice/internal/publish"
	"github.com/backendslice/backendslice/internal/sliceplan"
)

// Config is the controller's configuration, from its flags.
type Config struct {
	// MaxEndpointsPerSlice applies where the spec sets none.
	MaxEndpointsPerSlice int32
	// MinEndpointsPerSlice is the floor of a slice's size, whatever the
	// spec says (0: none).
	MinEndpointsPerSlice int32
	// MaxEndpointsPerBackend bounds the endpoints of each address family
	// that one backend publishes (0: no bound), so that no backend costs
	// the controller and the API server more than that much memory and
	// writes, whatever its sources find.
	MaxEndpointsPerBackend int
	// MaxSlicesPerBackend bounds the slices of one backend (0: no bound):
	// its slices hold more endpoints (up to 1000) rather than be more, so
	// that a change that touches every slice (a label) costs at most that
	// many writes.
	MaxSlicesPerBackend int
	// MaxProbeTargets bounds the endpoints of one backend that are probed
	// (0: no bound).
	MaxProbeTargets int
	// ProbeCASecrets are the Secrets of the controller's namespace that a
	// probe's caSecretRef may name: the namespace is the platform team's,
	// and a tenant must not pick any Secret of it.
	ProbeCASecrets []string
	// NamespaceShare is how many reconciles of one namespace run at once
	// (0: one less than the workers, so that another namespace always
	// finds one free).
	NamespaceShare int
	// DefaultDrainPeriod applies where the spec sets none.
	DefaultDrainPeriod time.Duration
	// DeniedPrefixes are networks no endpoint may be in.
	DeniedPrefixes []netip.Prefix
	// DeniedNames are DNS names no FQDN endpoint may have ("*.x" for all under x).
	DeniedNames []string
	// ClusterDomain is the cluster's DNS domain (kubelet's --cluster-domain,
	// "cluster.local" by default): no FQDN endpoint may be in it or end in
	// .svc or .pod, which would point a Service back into the cluster.
	ClusterDomain string
	// ResolveTimeout bounds one provider call.
	ResolveTimeout time.Duration
	// ReconcileTimeout bounds one whole reconcile: the sources (resolved at
	// once), the reads and the writes; the status patch has its own.
	ReconcileTimeout time.Duration
	// AllowSourcesWithoutProvider lets a source that names no
	// BackendProvider publish through the controller's own connections
	// (its flags), as before BackendProviders existed. Off, such a source
	// is refused: only the platform team's providers can be used.
	AllowSourcesWithoutProvider bool
	// DenyPodCIDRs refuses endpoints in the Nodes' Pod ranges
	// (spec.podCIDRs), read and watched. The binary's --deny-pod-cidrs
	// turns it on by default: an endpoint there reaches another
	// namespace's Pods. Off only where Pod addresses are real backends
	// outside the cluster. The Nodes' own addresses are always refused.
	DenyPodCIDRs bool
	// Namespace is the controller's own: the only one whose Secrets it
	// reads (those BackendProviders name).
	Namespace string
	// SoleWriter says no other instance writes our slices (leader election
	// is on): a pass that places endpoints then trusts its cache once the
	// cache shows its own writes, instead of listing the slices past it.
	SoleWriter bool
	// Coalesce folds bursts of provider changes into one write; off when
	// its quiet time is zero.
	Coalesce coalesce.Window
	// Churn finds the endpoints that change often, which the slice planner
	// gathers in small slices of their own; off when its window is zero.
	Churn sliceplan.Churn
	// StatusCatchUpRate bounds the status writes a second that only catch
	// up with what this version shows (a field it added, a message it
	// words otherwise), all backends together; 0: no bound. They always
	// wait behind every change (see catchup.go).
	StatusCatchUpRate float64
}

// Decision is the configuration the decision reads (internal/decide).
func (c Config) Decision() decide.Config {
	return decide.Config{
		DeniedPrefixes:         c.DeniedPrefixes,
		DeniedNames:            c.DeniedNames,
		ClusterDomain:          c.ClusterDomain,
		DefaultDrainPeriod:     c.DefaultDrainPeriod,
		MaxEndpointsPerBackend: c.MaxEndpointsPerBackend,
		Coalesce:               c.Coalesce,
	}
}

// DefaultChurn is churn-aware placement as the controller runs it unless
// configured: an endpoint that changed 3 times within a minute is volatile,
// and each backend remembers the recent changes of at most 1,000 addresses.
// An AZ going down and up, or a rolling replacement, changes an endpoint
// once or twice: only flapping ones reach 3.
func DefaultChurn() sliceplan.Churn {
	return sliceplan.Churn{Window: time.Minute, Often: 3, Most: 1000}
}

// DefaultDeniedCIDRs are the cloud metadata addresses denied to endpoints
// unless configured (decide.DefaultDeniedCIDRs).
func DefaultDeniedCIDRs() []string { return decide.DefaultDeniedCIDRs() }

// DefaultDeniedNames are the metadata services' names an FQDN endpoint
// must not aim at, each with every name under it (publish.DeniedMetadataNames).
func DefaultDeniedNames() []string { return publish.DeniedMetadataNames() }

// DefaultReconcileTimeout bounds one reconcile unless configured: the
// longest provider call (--resolve-timeout, 10s by default) plus the writes.
const DefaultReconcileTimeout = 30 * time.Second
