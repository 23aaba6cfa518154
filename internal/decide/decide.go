// Package decide works out what one backend publishes: a pure function of
// what its sources said, what is published, the cluster, the time and the
// backend's memory (its drains and its coalescing window). It reads no
// API, no cache and no clock, and changes nothing: it returns the
// publication and the memory to keep, which the reconciler commits only
// once the writes that publish it succeeded. `backendslice render` and
// `backendslice validate` call it as the controller does.
//
// The probes run between its two halves (Normalize, then Decide): they
// read Secrets and talk to the prober, and only endpoints that may be
// published are probed.
package decide

import (
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/coalesce"
	"github.com/backendslice/backendslice/internal/publish"
)

// Config is the controller's configuration, as far as the decision reads it.
type Config struct {
	// DeniedPrefixes are networks no endpoint may be in.
	DeniedPrefixes []netip.Prefix
	// DeniedNames are DNS names no FQDN endpoint may have ("*.x" for all under x).
	DeniedNames []string
	// ClusterDomain is the cluster's DNS domain: no FQDN endpoint may be in it.
	ClusterDomain string
	// DefaultDrainPeriod applies where the spec sets none.
	DefaultDrainPeriod time.Duration
	// MaxEndpointsPerBackend bounds the endpoints of each address family
	// that one backend publishes (0: no bound).
	MaxEndpointsPerBackend int
	// Coalesce folds bursts of provider changes into one write; off when
	// its quiet time is zero.
	Coalesce coalesce.Window
}

// DefaultDeniedCIDRs are the cloud metadata addresses that the API server
// does not already reject (it rejects 169.254.0.0/16 as link-local): AWS's
// IPv6 instance metadata, Alibaba Cloud's metadata service and Azure's
// WireServer (168.63.129.16, a public address that only Azure's hosts
// answer: the VM agent's channel to the host, which hands out extension
// settings and, with them, secrets).
func DefaultDeniedCIDRs() []string {
	return []string{"fd00:ec2::254/128", "100.100.100.200/32", "168.63.129.16/32"}
}

// Inputs are what a pass knows when it decides.
type Inputs struct {
	// Backend is the ExternalBackend: its spec, generation and status.
	Backend *v1alpha1.ExternalBackend
	// Sources is what the sources said.
	Sources Sources
	// Published are our slices of the backend's Service, as the cache shows them.
	Published []discoveryv1.EndpointSlice
	// Served are the IP families the cluster gives Services addresses of.
	Served sets.Set[corev1.IPFamily]
	// Cluster are the cluster's own networks and hosts: no endpoint may be there.
	Cluster publish.ClusterNetworks
	// Now is the time of the pass.
	Now time.Time
	// Config is the controller's.
	Config Config
	// Candidates are what Normalize made of the answers, their endpoints
	// then probed.
	Candidates Candidates
}

// Memory is what a backend remembers between passes for the decision.
type Memory struct {
	// Drains holds when each draining endpoint started to drain.
	Drains []v1alpha1.DrainingEndpoint
	// Burst is the coalescing window's state.
	Burst coalesce.State
}

// Publication is what to publish: the endpoints and how they came to be.
type Publication struct {
	// Endpoints to publish, draining ones included.
	Endpoints []publish.Endpoint
	// Dropped are the addresses normalisation refused, with why.
	Dropped []v1alpha1.DroppedAddress
	// Draining are the drains of the endpoints published.
	Draining []v1alpha1.DrainingEndpoint
	// NotServed counts the endpoints of families the cluster does not serve.
	NotServed publish.LeftOut
	// Families are the IP families the Service may have: the spec's,
	// less those the cluster does not serve.
	Families []v1alpha1.AddressType
	// Held is true when the coalescing window kept the published endpoints.
	Held bool
	// Sources records which sources publish each endpoint, for the
	// slices (publish.SourcesAnnotation); nil for a backend of one source.
	Sources publish.Attribution
	// Limit names the endpoints left out past --max-endpoints-per-backend.
	Limit string
	// RequeueAfter is when a drain ends or the coalescing window closes.
	RequeueAfter time.Duration
}

// Decide works out what to publish from what the sources said (through
// inputs.Candidates) and what is published: vanished endpoints draining,
// limited to --max-endpoints-per-backend, and, while the coalescing window
// holds a provider change back, what is published now. It returns the
// memory to keep once the publication is written.
func Decide(inputs Inputs, mem Memory) (Publication, Memory) {
	xb := inputs.Backend
	recorded := publish.SourcesFromSlices(inputs.Published)
	withdrawn := inputs.withdrawn(recorded)
	// Status lists the first drains only, and its patch may fail: the
	// slices record every drain start. The memory keeps the ones this
	// process started, since the cache may not show its last slice write yet.
	draining := mergeDrains(mem.Drains, publish.DrainsFromSlices(inputs.Published), xb.Status.Draining)
	drained := publish.Drain(publish.DrainInput{
		Current:      inputs.Candidates.Endpoints,
		Published:    publish.FromSlices(inputs.Published),
		Draining:     draining,
		Now:          inputs.Now,
		Period:       drainPeriod(xb, inputs.Config.DefaultDrainPeriod),
		HoldVanished: publish.HeldForUnknown(inputs.Sources.Unknown, recorded),
		Withdrawn:    withdrawn,
	})
	next := Memory{Drains: drained.Draining, Burst: mem.Burst}
	pub := Publication{
		Endpoints:    drained.Endpoints,
		Dropped:      inputs.Candidates.Dropped,
		Draining:     drained.Draining,
		NotServed:    inputs.Candidates.NotServed,
		Sources:      publish.Attribute(inputs.Sources.Results, inputs.Sources.Unknown, recorded),
		RequeueAfter: drained.NextExpiry,
		Families:     servedFamilies(xb.Spec.AddressTypes, inputs.Served),
	}
	// Bounded before the coalescing window's fingerprint, so that
	// endpoints coming and going among those left out hold nothing back.
	pub.Endpoints, pub.Draining, pub.Limit = limitEndpoints(inputs.Config.MaxEndpointsPerBackend, pub.Endpoints, pub.Draining)
	if wait, hold := holdBack(inputs, &next.Burst, pub.Endpoints); hold {
		pub.Endpoints = slices.DeleteFunc(publish.FromSlices(inputs.Published), withdrawn)
		pub.Draining = draining
		pub.Sources = recorded
		pub.Held = true
		if pub.RequeueAfter == 0 || wait < pub.RequeueAfter {
			pub.RequeueAfter = wait
		}
	}
	return pub, next
}

// withdrawn tells, of a published endpoint no answer has, whether it must
// not be published any more, whatever the drain period or the coalescing
// window say: the addresses of refused sources, those dropped this pass
// (an allowedCIDRs narrowed), and anything the deny list refuses now.
func (inputs Inputs) withdrawn(recorded publish.Attribution) func(publish.Endpoint) bool {
	pol := inputs.policy()
	leaving := sets.New[string]()
	for _, d := range inputs.Candidates.Dropped {
		leaving.Insert(publish.CanonicalAddress(d.Address))
	}
	src := inputs.Sources
	return func(e publish.Endpoint) bool {
		return !inputs.Candidates.answered.Has(e.Address) &&
			(src.Withdrawn.Has(e.Address) || slices.ContainsFunc(recorded[e.Address], src.Refused.Has) ||
				leaving.Has(e.Address) || pol.Denies(e) != "" || !src.MayPublish(e))
	}
}

// holdBack asks the coalescing window whether a provider change to eps
// must wait, and for how long, updating burst. A spec change not yet
// handled goes out at once.
func holdBack(inputs Inputs, burst *coalesce.State, eps []publish.Endpoint) (time.Duration, bool) {
	if !inputs.Config.Coalesce.Enabled() {
		// Off: not even the fingerprint, a hash of every endpoint, is needed.
		return 0, false
	}
	specChanged := inputs.Backend.Generation != inputs.Backend.Status.ObservedGeneration
	d := inputs.Config.Coalesce.Decide(burst, publish.Fingerprint(eps), inputs.Now, specChanged)
	return d.Wait, !d.Publish
}

// servedFamilies are the IP families of spec that the cluster serves.
func servedFamilies(spec []v1alpha1.AddressType, served sets.Set[corev1.IPFamily]) []v1alpha1.AddressType {
	var out []v1alpha1.AddressType
	for _, t := range spec {
		if t != v1alpha1.AddressTypeFQDN && served.Has(corev1.IPFamily(t)) {
			out = append(out, t)
		}
	}
	return out
}

// mergeDrains is every drain start known, each address once, the first
// list that has it winning: memory, then the slices, then status.
func mergeDrains(lists ...[]v1alpha1.DrainingEndpoint) []v1alpha1.DrainingEndpoint {
	var out []v1alpha1.DrainingEndpoint
	known := map[string]bool{}
	for _, l := range lists {
		for _, d := range l {
			if !known[d.Address] {
				known[d.Address] = true
				out = append(out, d)
			}
		}
	}
	return out
}

// drainPeriod is the spec's drain period, or the controller's default.
func drainPeriod(xb *v1alpha1.ExternalBackend, byDefault time.Duration) time.Duration {
	if d := xb.Spec.DrainPeriod; d != nil {
		return d.Duration
	}
	return byDefault
}
