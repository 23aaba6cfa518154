package importer

import (
	"cmp"
	"fmt"
	"net/netip"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/publish"
)

// candidate is one endpoint as consumers read it, as a static endpoint.
type candidate struct {
	origin   string
	family   v1alpha1.AddressType
	endpoint v1alpha1.StaticEndpoint
	ports    portSet
	// hints are the slice's, compared with the controller's own later.
	hints *discoveryv1.EndpointHints
}

// candidates reads the endpoints of groups, noting what is not carried.
func candidates(groups []group, nb *notebook) []candidate {
	var out []candidate
	for _, g := range groups {
		switch g.addressType {
		case "", discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6, discoveryv1.AddressTypeFQDN:
		default:
			nb.add(LeftOut, g.origin, "addressType %q is none of IPv4, IPv6 and FQDN: its %d endpoint(s) are not read", g.addressType, len(g.endpoints))
			continue
		}
		ports := newPortSet(g.origin, g.ports, nb)
		for _, e := range g.endpoints {
			if c, ok := readEndpoint(g, e, nb); ok {
				c.ports = ports
				out = append(out, c)
			}
		}
	}
	return out
}

// readEndpoint reads one endpoint of g, noting what is not carried.
func readEndpoint(g group, e discoveryv1.Endpoint, nb *notebook) (candidate, bool) {
	if len(e.Addresses) == 0 {
		nb.add(LeftOut, g.origin, "an endpoint without addresses is not read")
		return candidate{}, false
	}
	addr, family, why := readAddress(e.Addresses[0], g.addressType)
	if why != "" {
		nb.endpoint(LeftOut, g.origin, e.Addresses[0], why+": not read")
		return candidate{}, false
	}
	if addr != e.Addresses[0] {
		nb.endpoint(Info, g.origin, addr, fmt.Sprintf("written %s, carried in canonical form", e.Addresses[0]))
	}
	if len(e.Addresses) > 1 {
		nb.add(LeftOut, g.origin, "endpoint %s: its other addresses (%s) are not carried; consumers read only the first", addr, strings.Join(e.Addresses[1:], ", "))
	}
	health, why := healthOf(e.Conditions)
	if why != "" {
		nb.endpoint(Changed, g.origin, addr, why)
	}
	if e.NodeName != nil {
		nb.endpoint(LeftOut, g.origin, addr, "nodeName is not carried: an outside endpoint runs on no node, and the controller writes none")
	}
	if e.TargetRef != nil {
		nb.endpoint(LeftOut, g.origin, addr, "targetRef is not carried: the controller writes none")
	}
	if len(e.DeprecatedTopology) > 0 {
		nb.endpoint(LeftOut, g.origin, addr, "deprecatedTopology is not carried: the controller writes zone only")
	}
	c := candidate{origin: g.origin, family: family, hints: e.Hints, endpoint: v1alpha1.StaticEndpoint{
		Address: addr, Zone: ptr.Deref(e.Zone, ""), Hostname: ptr.Deref(e.Hostname, ""), Health: health,
	}}
	return c, true
}

// readAddress is the canonical form and family of an address of a slice
// of type t (an Endpoints address when empty), or why it cannot be read.
func readAddress(a string, t discoveryv1.AddressType) (string, v1alpha1.AddressType, string) {
	if t == discoveryv1.AddressTypeFQDN {
		n := publish.CanonicalName(a)
		if len(validation.IsDNS1123Subdomain(n)) > 0 {
			return "", "", "not a DNS name"
		}
		return n, v1alpha1.AddressTypeFQDN, ""
	}
	ip, err := netip.ParseAddr(a)
	switch {
	case err != nil:
		return "", "", "not an IP address"
	case ip.Zone() != "":
		return "", "", "an IPv6 address with a zone (%iface), which is local to one host"
	case ip.Is4In6():
		return "", "", fmt.Sprintf("an IPv4-mapped IPv6 address; write %s in an IPv4 slice", ip.Unmap())
	}
	family := v1alpha1.AddressTypeIPv4
	if ip.Is6() {
		family = v1alpha1.AddressTypeIPv6
	}
	if t != "" && string(t) != string(family) {
		return "", "", fmt.Sprintf("an %s address in a slice of addressType %s", family, t)
	}
	return ip.String(), family, ""
}

// healthOf is the static health closest to an endpoint's conditions, read
// as the API defines them (ready and serving true when unset, terminating
// false), and what differs when it is not the same.
func healthOf(c discoveryv1.EndpointConditions) (v1alpha1.Health, string) {
	ready, serving, terminating := ptr.Deref(c.Ready, true), ptr.Deref(c.Serving, true), ptr.Deref(c.Terminating, false)
	unsetServing := ""
	if c.Serving == nil {
		unsetServing = " (unset, which reads as true)"
	}
	switch {
	case terminating && serving:
		if ready {
			return v1alpha1.HealthDraining, "ready=true while terminating: published ready=false (Draining), as the API defines ready"
		}
		return v1alpha1.HealthDraining, ""
	case terminating:
		return v1alpha1.HealthUnhealthy, "terminating and not serving: published Unhealthy (terminating=false); neither takes traffic"
	case ready && !serving:
		return "", "ready=true, serving=false: published serving=true (Healthy), as the API defines ready"
	case ready:
		return "", ""
	case serving:
		return v1alpha1.HealthUnhealthy, "ready=false, serving=true" + unsetServing + ", not terminating: published serving=false (Unhealthy); kube-proxy sends traffic to neither"
	}
	return v1alpha1.HealthUnhealthy, ""
}

// dedupe keeps the first endpoint of each address, noting the others.
func dedupe(cands []candidate, nb *notebook) []candidate {
	first := map[string]candidate{}
	var out []candidate
	for _, c := range cands {
		f, seen := first[c.endpoint.Address]
		switch {
		case !seen:
			first[c.endpoint.Address] = c
			out = append(out, c)
		case f.endpoint == c.endpoint:
			nb.endpoint(Info, c.origin, c.endpoint.Address, "also in "+f.origin+": carried once")
		default:
			nb.endpoint(Changed, c.origin, c.endpoint.Address, "also in "+f.origin+" with other conditions, zone or hostname: carried as there")
		}
	}
	return out
}

// familyOrder sorts endpoints IPv4 first, then IPv6, then FQDN.
func familyOrder(f v1alpha1.AddressType) int {
	switch f {
	case v1alpha1.AddressTypeIPv4:
		return 0
	case v1alpha1.AddressTypeIPv6:
		return 1
	}
	return 2
}

// compareCandidates orders endpoints by family, then address.
func compareCandidates(a, b candidate) int {
	if c := cmp.Compare(familyOrder(a.family), familyOrder(b.family)); c != 0 {
		return c
	}
	ia, errA := netip.ParseAddr(a.endpoint.Address)
	ib, errB := netip.ParseAddr(b.endpoint.Address)
	if errA == nil && errB == nil {
		return ia.Compare(ib)
	}
	return cmp.Compare(a.endpoint.Address, b.endpoint.Address)
}
