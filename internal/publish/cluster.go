package publish

import (
	"fmt"
	"net/netip"
)

// ClusterNetworks are the cluster's own networks and hosts, read from the
// cluster: an endpoint there would aim a Service back into the cluster
// (CVE-2021-25740), at another Service, a Pod, a Node's kubelet or the API
// server.
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
	// Of names it in a drop's reason: "ServiceCIDR kubernetes", "Node a's
	// Pod range".
	Of string
}

// reason names why a is one of the cluster's own addresses, or is "" when
// it is not.
func (c ClusterNetworks) reason(a netip.Addr) string {
	if of, ok := c.Hosts[a]; ok {
		return fmt.Sprintf("address %s is %s: a Service must not point back into the cluster", a, of)
	}
	for _, r := range c.Ranges {
		if r.Prefix.Contains(a) {
			return fmt.Sprintf("address %s is inside the cluster's own network %s (%s): a Service must not point back into the cluster", a, r.Prefix, r.Of)
		}
	}
	return ""
}
