package decide

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/publish"
)

// Sources is what the sources said, and what admission let each publish.
type Sources struct {
	// Results of each source, in spec order; a failing source's result
	// carries its held answer.
	Results []publish.SourceResult
	// Grants are what admission let each source publish, in spec order.
	Grants []Grant
	// Unknown names the sources that have failed ever since the controller
	// started: the slices' record of who published what narrows what they hold.
	Unknown sets.Set[string]
	// Refused names the sources admission refused: what the slices record
	// as theirs leaves at once too, after a restart as before one.
	Refused sets.Set[string]
	// Withdrawn are the addresses that sources refused by admission
	// published: they leave at once, neither held nor drained.
	Withdrawn sets.Set[string]
}

// Grant is what admission let one source publish.
type Grant struct {
	// Refused is true when the source may not publish.
	Refused bool
	// Restricted is true when the source's provider has allowedCIDRs,
	// Allowed.
	Restricted bool
	Allowed    []netip.Prefix
}

// MayPublish tells whether some source that admission lets publish may
// publish e: one without allowedCIDRs, or one whose allowedCIDRs hold it.
// What none may publish leaves at once, whatever published it before:
// the answer of a revoked source is not remembered after a restart, and
// an endpoint already draining is in no answer.
func (s Sources) MayPublish(e publish.Endpoint) bool {
	addr, err := netip.ParseAddr(e.Address)
	for _, g := range s.Grants {
		switch {
		case g.Refused:
		case !g.Restricted:
			return true
		case err == nil && slices.ContainsFunc(g.Allowed, func(p netip.Prefix) bool { return p.Contains(addr) }):
			return true
		}
	}
	return false
}

// Candidates are the endpoints the sources' answers may publish, before
// the probes, the drains and the window.
type Candidates struct {
	// Endpoints are normalised and of the families the cluster serves.
	Endpoints []publish.Endpoint
	// Dropped are the addresses normalisation refused, with why.
	Dropped []v1alpha1.DroppedAddress
	// NotServed counts the endpoints of families the cluster does not serve.
	NotServed publish.LeftOut
	// answered are the addresses of every normalised answer, served or not.
	answered sets.Set[string]
}

// Normalize is the first half of the decision: the sources' answers
// normalised under the deny lists, the spec's families and ports, and
// limited to the families the cluster serves.
func Normalize(inputs Inputs) Candidates {
	current, dropped := publish.Normalize(inputs.Sources.Results, inputs.policy())
	answered := sets.New[string]()
	for _, e := range current {
		answered.Insert(e.Address)
	}
	served := func(t discoveryv1.AddressType) bool { return inputs.Served.Has(corev1.IPFamily(t)) }
	current, notServed := publish.OnlyServed(current, served)
	return Candidates{Endpoints: current, Dropped: dropped, NotServed: notServed, answered: answered}
}

// policy is what normalisation allows for the backend.
func (inputs Inputs) policy() publish.Policy {
	return publish.Policy{
		AddressTypes:   inputs.Backend.Spec.AddressTypes,
		DeniedPrefixes: inputs.Config.DeniedPrefixes,
		DeniedNames:    inputs.Config.DeniedNames,
		ClusterDomain:  inputs.Config.ClusterDomain,
		Cluster:        inputs.Cluster,
		Ports:          inputs.Backend.Spec.Service.Ports,
	}
}

// limitEndpoints keeps at most most endpoints of each family
// (publish.Limit: ready ones first, then by address; 0: no bound), and
// the drain records of those kept. It also returns the Synced note naming
// the limit when it left endpoints out. A draining endpoint left out goes
// at once: the bound holds whatever the drains, or a source rotating its
// addresses could keep every one it ever had published while they drain.
func limitEndpoints(most int, eps []publish.Endpoint, draining []v1alpha1.DrainingEndpoint) ([]publish.Endpoint, []v1alpha1.DrainingEndpoint, string) {
	kept, left := publish.Limit(eps, most)
	if left.Total() == 0 {
		return eps, draining, ""
	}
	return kept, onlyOf(draining, kept), fmt.Sprintf(
		"%d endpoint(s) not published (%s): past the controller's limit of %d endpoints of one address family per backend (--max-endpoints-per-backend), which publishes ready endpoints first, then by address",
		left.Total(), familyCounts(left), most)
}

// onlyOf is the drain records of draining whose endpoint is in eps.
func onlyOf(draining []v1alpha1.DrainingEndpoint, eps []publish.Endpoint) []v1alpha1.DrainingEndpoint {
	kept := sets.New[string]()
	for _, e := range eps {
		kept.Insert(e.Address)
	}
	return slices.DeleteFunc(slices.Clone(draining), func(d v1alpha1.DrainingEndpoint) bool { return !kept.Has(d.Address) })
}

// familyCounts reads "IPv4 120, IPv6 3", families in order.
func familyCounts(left publish.LeftOut) string {
	var parts []string
	for _, f := range []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6, discoveryv1.AddressTypeFQDN} {
		if n := left[f]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", f, n))
		}
	}
	return strings.Join(parts, ", ")
}
