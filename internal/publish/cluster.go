package publish

import (
	"fmt"
	"net/netip"
)

// ClusterNetworks are the cluster's own networks and hosts, read from the
// cluster: an endpoint there would aim a Service back into the cluster
// (CVE-2021-25740), at another Service, a Pod, a Node's kubelet or the API
// server.
//
// A drop's reason, which tenants read on status and in events, says only
// that the address is the cluster's own: naming whose it is (a Node and
// its InternalIP, the API server, a ServiceCIDR and its range) would let a
// tenant map the cluster by listing candidates. Whose says it, for the
// controller's own logs.
type ClusterNetworks struct {
	// Ranges are networks: the ServiceCIDRs' ranges, and the Nodes' Pod
	// ranges where the controller denies them.
	Ranges []ClusterRange
	// Hosts are single addresses (unmapped), each with the name of whose
	// it is: the Nodes' InternalIP and ExternalIP addresses and the API
	// server's own. A map, since a cluster has thousands of Nodes and every
	// endpoint is looked up. Shared between reconciles: read it only.
	Hosts map[netip.Addr]string
}

// ClusterRange is a network of the cluster's own, and whose it is.
type ClusterRange struct {
	Prefix netip.Prefix
	// Of names whose the network is, for the controller's logs only:
	// "ServiceCIDR kubernetes", "Node a's Pod range".
	Of string
}

// ClusterAddressReason is the reason a drop of an address of the
// cluster's own gives, whichever it is: the same words for a Node's, the
// API server's, a Service range's and a Pod range's.
func ClusterAddressReason(a netip.Addr) string {
	return fmt.Sprintf("%s is an address of this cluster's own network (nodes, pods, services or control plane); it can't be published: a Service must not point back into the cluster", a)
}

// reason names why a is one of the cluster's own addresses, without
// saying whose, or is "" when it is not.
func (c ClusterNetworks) reason(a netip.Addr) string {
	if c.whose(a) == "" {
		return ""
	}
	return ClusterAddressReason(a)
}

// Whose names whose address (an IP, in any spelling Normalize reads,
// embedded IPv4 included) is among the cluster's own networks and hosts,
// with the network it is in: for the controller's logs, never for status
// or events. It is "" when the address is none of them.
func (c ClusterNetworks) Whose(address string) string {
	a, err := netip.ParseAddr(address)
	if err != nil {
		return ""
	}
	readings := []netip.Addr{a.Unmap().WithZone("")}
	for _, e := range EmbeddedIPv4s(readings[0]) {
		readings = append(readings, e.IPv4)
	}
	for _, r := range readings {
		if of := c.whose(r); of != "" {
			return fmt.Sprintf("%s is %s", r, of)
		}
	}
	return ""
}

// whose names whose a is, or is "" when a is not the cluster's.
func (c ClusterNetworks) whose(a netip.Addr) string {
	if of, ok := c.Hosts[a]; ok {
		return of
	}
	for _, r := range c.Ranges {
		if r.Prefix.Contains(a) {
			return fmt.Sprintf("in %s (%s)", r.Prefix, r.Of)
		}
	}
	return ""
}
