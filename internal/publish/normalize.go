package publish

import (
	"cmp"
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/sliceplan"
	"github.com/backendslice/backendslice/providers"
)

// SourceResult is what one source gave: endpoints, or an error.
type SourceResult struct {
	// Name is the source's name in spec.sources.
	Name      string
	Endpoints []providers.Endpoint
	// Err is set when the source failed; its endpoints are then not used,
	// unless Held.
	Err error
	// Held marks Endpoints as the last answer of a source that now fails
	// transiently: they are published as they were, each with the health
	// this source gave.
	Held bool
	// Allowed, where Restricted, are the only networks this source's
	// endpoints may be in: the allowedCIDRs of the BackendProvider it
	// publishes through. A name cannot be checked against them, so a
	// restricted source publishes no FQDN endpoint.
	Allowed    []netip.Prefix
	Restricted bool
}

// Policy says what may be published.
type Policy struct {
	// AddressTypes are the families the spec publishes.
	AddressTypes []v1alpha1.AddressType
	// DeniedPrefixes are networks no endpoint may be in: cloud metadata
	// addresses the API server does not reject itself, and the cluster's own
	// Pod and Service ranges where the operator lists them.
	DeniedPrefixes []netip.Prefix
	// DeniedNames are DNS names no FQDN endpoint may have; an entry "*.x"
	// denies every name under x. Case, spaces around an entry and its
	// trailing dot do not matter.
	DeniedNames []string
	// ClusterDomain is the cluster's DNS domain (kubelet's --cluster-domain);
	// empty means DefaultClusterDomain. No FQDN endpoint may be in it, nor
	// end in .svc or .pod, which Pods' DNS search paths complete into it.
	ClusterDomain string
	// Cluster are the cluster's own networks and hosts, read from the
	// cluster (its ServiceCIDRs, its Nodes' addresses, and Pod ranges where
	// asked, and the API server's endpoints): an endpoint there would aim a
	// Service at another Service, a Pod, a kubelet or the API server.
	Cluster ClusterNetworks
	// Ports are the Service's ports; each endpoint is reached on their targetPorts.
	Ports []v1alpha1.ServicePort
}

// Dropped is an address that was not published, and why.
type Dropped = v1alpha1.DroppedAddress

// Normalize merges the endpoints of the sources that answered: canonical
// addresses, classified by family, de-duplicated by address (the first source
// in spec order wins, keeping the health it gave; within one source, the
// endpoint before the others in the order of before), and filtered by
// policy.
// Addresses that cannot or must not be published are returned as dropped:
// IPs the API server rejects or the policy denies, also when an IPv6 address
// embeds such an IPv4 one (see EmbeddedIPv4s); names that read as IPv4
// addresses (see NumericName), that are not valid DNS names, that the policy
// denies or that point back into the cluster's DNS domain.
func Normalize(results []SourceResult, pol Policy) ([]Endpoint, []Dropped) {
	want := map[discoveryv1.AddressType]bool{}
	for _, t := range pol.AddressTypes {
		want[discoveryv1.AddressType(t)] = true
	}
	// at is where in out each address is, and mine which of them the
	// source at hand put there.
	at := map[string]int{}
	var out []Endpoint
	var dropped []Dropped
	for _, r := range results {
		if r.Err != nil && !r.Held {
			continue
		}
		mine := map[string]bool{}
		for _, pe := range r.Endpoints {
			// Outside the source's allowedCIDRs is said first: a tenant
			// learns nothing of an address it may not publish anyway, not
			// even that it is the cluster's own.
			var reason string
			if r.Restricted {
				reason = outsideAllowed(CanonicalAddress(pe.Address), r.Allowed)
			}
			e, denied := normalizeOne(pe, want, pol)
			reason = cmp.Or(reason, denied)
			if reason != "" {
				dropped = append(dropped, Dropped{Source: r.Name, Address: pe.Address, Reason: reason})
				continue
			}
			i, seen := at[e.key()]
			switch {
			case !seen:
				at[e.key()], mine[e.key()] = len(out), true
				out = append(out, e)
			case mine[e.key()] && before(e, out[i]):
				out[i] = e
			}
		}
	}
	return out, dropped
}

// before tells whether a wins over b, two endpoints of one source at one
// address (two EC2 instances in two VPCs, two Consul instances on one
// node): the healthier (rank: ready, then serving), then by hostname, zone and
// ports. A provider's order is no guide, since it may list from a map and
// change at every answer; taking the first would flip what is published,
// and write it, at every refresh.
func before(a, b Endpoint) bool {
	return cmp.Or(cmp.Compare(rank(a), rank(b)), strings.Compare(a.Hostname, b.Hostname), strings.Compare(a.Zone, b.Zone),
		strings.Compare(sliceplan.GroupKey(a.AddressType, a.Ports), sliceplan.GroupKey(b.AddressType, b.Ports))) < 0
}

func normalizeOne(pe providers.Endpoint, want map[discoveryv1.AddressType]bool, pol Policy) (Endpoint, string) {
	e := Endpoint{Zone: pe.Zone, Serving: pe.Serving, Terminating: pe.Terminating}
	if len(validation.IsDNS1123Label(pe.Hostname)) == 0 {
		e.Hostname = pe.Hostname
	}
	e.Address = CanonicalAddress(pe.Address)
	if addr, err := netip.ParseAddr(pe.Address); err == nil {
		if reason := pol.deniesIP(addr); reason != "" {
			return e, reason
		}
		e.AddressType = discoveryv1.AddressTypeIPv4
		if addr.Unmap().Is6() {
			e.AddressType = discoveryv1.AddressTypeIPv6
		}
	} else {
		if reason := invalidName(e.Address, pol); reason != "" {
			return e, reason
		}
		e.AddressType = discoveryv1.AddressTypeFQDN
	}
	if !want[e.AddressType] {
		return e, fmt.Sprintf("%s address, but spec.addressTypes does not list %s; add it to publish this address",
			e.AddressType, e.AddressType)
	}
	e.Ports = endpointPorts(pol.Ports, pe.Port)
	return e, ""
}

// Denies names why the policy refuses an endpoint that is already
// published (its address canonical), or is "" when it may stay. The deny
// list can change while an endpoint is held, draining or coalesced, and
// such an endpoint must leave at once.
func (pol Policy) Denies(e Endpoint) string {
	if e.AddressType == discoveryv1.AddressTypeFQDN {
		return invalidName(e.Address, pol)
	}
	addr, err := netip.ParseAddr(e.Address)
	if err != nil {
		return "not an IP address"
	}
	return pol.deniesIP(addr)
}

// deniesIP names why an IP address must not be published: unsafe, denied
// by the controller's configuration, or in the cluster's own networks.
func (pol Policy) deniesIP(a netip.Addr) string {
	if reason := unsafeIP(a, pol.DeniedPrefixes); reason != "" {
		return reason
	}
	readings := []netip.Addr{a.Unmap()}
	for _, e := range EmbeddedIPv4s(a.Unmap()) {
		readings = append(readings, e.IPv4)
	}
	for _, r := range readings {
		if reason := pol.Cluster.reason(r); reason != "" {
			return reason
		}
	}
	return ""
}

// outsideAllowed names why address, canonical, is outside the networks
// its source's provider allows, or is "" when it is inside one.
func outsideAllowed(address string, allowed []netip.Prefix) string {
	addr, err := netip.ParseAddr(address)
	if err != nil {
		return "a DNS name cannot be checked against the BackendProvider's allowedCIDRs; publish addresses, or use a provider without allowedCIDRs"
	}
	for _, p := range allowed {
		if p.Contains(addr) {
			return ""
		}
	}
	return fmt.Sprintf("outside the networks the BackendProvider allows (spec.allowedCIDRs %v); ask the platform team to allow it, or remove it", allowed)
}

// CanonicalAddress is an address as Normalize publishes it: an IP in its
// canonical form (an IPv4-mapped IPv6 address as IPv4), a name in lower
// case without its trailing dot. Whoever matches a source's address with a
// published endpoint must use it, or the two will disagree.
//
// DNS is case-insensitive for ASCII letters only. strings.ToLower would
// also turn some other letters into ASCII ones (the Kelvin sign U+212A into
// k) and make a name the source never gave; left as they are, they fail
// Normalize's DNS name check.
func CanonicalAddress(a string) string {
	if ip, err := netip.ParseAddr(a); err == nil {
		return ip.Unmap().String()
	}
	return CanonicalName(a)
}

// CanonicalName is a DNS name as every check and comparison reads it: ASCII
// letters in lower case (see CanonicalAddress for why only those), without
// its trailing dot.
func CanonicalName(name string) string {
	return strings.TrimSuffix(strings.Map(asciiLower, name), ".")
}

// asciiLower is r in lower case if it is an ASCII letter, else r.
func asciiLower(r rune) rune {
	if 'A' <= r && r <= 'Z' {
		return r + 'a' - 'A'
	}
	return r
}

// unsafeIP names why an IP must not be published: the API server rejects
// some ranges, and the policy denies others.
func unsafeIP(a netip.Addr, denied []netip.Prefix) string {
	if a.Zone() != "" {
		return "an IPv6 zone (%iface) is local to one host; give the address without it"
	}
	// An IPv4-mapped IPv6 address is published as IPv4: judge it as one.
	a = a.Unmap()
	switch {
	case a.IsUnspecified():
		return "unspecified address (0.0.0.0 or ::) is not a backend"
	case a.IsLoopback():
		return "loopback address would point the Service at the client's own host"
	case a.IsLinkLocalUnicast(), a.IsLinkLocalMulticast():
		return "link-local address (169.254.0.0/16, fe80::/10) is not routable and holds cloud metadata services"
	case a.IsMulticast():
		return "multicast address is not a backend"
	}
	for _, p := range denied {
		// A prefix inside ::ffff:0:0/96 (written ::ffff:10.0.0.0/104) denies
		// those IPv4 addresses: a is judged unmapped, and a provider may
		// give either spelling. A wider IPv6 prefix (::/0) denies IPv6 only.
		if p.Contains(a) || (p.Bits() >= 96 && p.Addr().Is4In6() && p.Contains(netip.AddrFrom16(a.As16()))) {
			// The network is not named: the operator lists the cluster's
			// own networks there, which a tenant must not learn.
			return "address is in a network the controller denies (its --denied-cidrs: cloud metadata services, or networks of this cluster's own)"
		}
	}
	// An IPv6 address that a NAT64 gateway, a SIIT translator, a tunnel or
	// the host's stack turns into IPv4 traffic is judged as that IPv4 address
	// too, in every reading: 64:ff9b::a9fe:a9fe reaches 169.254.169.254. It
	// is published as the IPv6 address it is.
	for _, e := range EmbeddedIPv4s(a) {
		if reason := unsafeIP(e.IPv4, denied); reason != "" {
			return fmt.Sprintf("embeds IPv4 %s (%s), which is denied: %s", e.IPv4, e.Form, reason)
		}
	}
	return ""
}

// invalidName names why a DNS name, in ASCII lower case without its
// trailing dot, cannot be an FQDN endpoint.
func invalidName(name string, pol Policy) string {
	if name == "" {
		return "empty address"
	}
	if NumericName(name) {
		return numericNameReason(name)
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return "neither an IP address nor a valid DNS name: " + strings.Join(errs, "; ")
	}
	// A subdomain's labels may be any length; the API server's FQDN check
	// also holds each to a DNS label's 63 characters.
	for label := range strings.SplitSeq(name, ".") {
		if len(label) > validation.DNS1123LabelMaxLength {
			return fmt.Sprintf("neither an IP address nor a valid DNS name: label %q is longer than %d characters",
				label, validation.DNS1123LabelMaxLength)
		}
	}
	if !strings.Contains(name, ".") {
		return "a DNS name needs at least two labels (for example db.example.com)"
	}
	return DeniedNameReason(name, pol.DeniedNames, pol.ClusterDomain)
}

// DeniedNameReason says why name, in ASCII lower case without its
// trailing dot, must be neither published nor followed, or is "" when it
// may be: it matches deniedNames (the metadata services' names and the
// controller's --denied-names), or it leads back into the cluster, at the
// host or at metadata (ClusterNameReason). An FQDN endpoint gets these
// checks, and so does every CNAME target a dns source's lookup would
// follow.
func DeniedNameReason(name string, deniedNames []string, clusterDomain string) string {
	for _, d := range deniedNames {
		// Operators write names as they like: Metadata.Google.Internal.,
		// or " metadata.goog" after a comma in the flag.
		d = flagName(d)
		if name == d || (strings.HasPrefix(d, "*.") && strings.HasSuffix(name, d[1:])) {
			return fmt.Sprintf("name matches %q, denied by the controller's --denied-names (cloud metadata or cluster names)", d)
		}
	}
	return ClusterNameReason(name, clusterDomain)
}

// endpointPorts are the EndpointSlice ports for the Service's ports. A
// provider's port (a backend that tells its own, as RDS instances do) is used
// where the spec gives no targetPort.
func endpointPorts(ports []v1alpha1.ServicePort, override int32) []discoveryv1.EndpointPort {
	out := make([]discoveryv1.EndpointPort, 0, len(ports))
	for _, p := range ports {
		port := p.Port
		switch {
		case p.TargetPort != nil:
			port = *p.TargetPort
		case override != 0:
			port = override
		}
		proto := p.Protocol
		if proto == "" {
			proto = "TCP"
		}
		out = append(out, discoveryv1.EndpointPort{
			Name:        ptr.To(p.Name),
			Port:        ptr.To(port),
			Protocol:    ptr.To(corev1.Protocol(proto)),
			AppProtocol: p.AppProtocol,
		})
	}
	return out
}
