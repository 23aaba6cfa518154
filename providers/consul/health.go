package consul

import (
	"strings"

	"github.com/hashicorp/consul/api"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/backendslice/backendslice/providers"
)

// instance is what a watch keeps of one service instance: what endpoints
// are built from and nothing more, so that two answers compare equal when
// nothing that matters changed (Consul answers a blocking query on changes
// we do not look at too).
type instance struct {
	// Node is the Consul node name.
	Node string
	// Address is the service address, else the node address.
	Address string
	// Tags are the service's tags, which sources select by.
	Tags []string
	// ServiceMeta and NodeMeta are where a zone is looked up; sources
	// also select by node meta.
	ServiceMeta, NodeMeta map[string]string
	// Health is the worst status of the instance's checks other than
	// maintenance.
	Health health
	// Maintenance is true when the node or the service is in maintenance mode.
	Maintenance bool
}

// instancesOf reduces a health answer to instances, in Consul's order.
// Instances without any address cannot be published and are left out.
func instancesOf(entries []*api.ServiceEntry) []instance {
	out := make([]instance, 0, len(entries))
	for _, e := range entries {
		if e == nil || e.Service == nil || e.Node == nil {
			continue
		}
		in := instance{
			Node:        e.Node.Node,
			Address:     e.Service.Address,
			Tags:        e.Service.Tags,
			ServiceMeta: e.Service.Meta,
			NodeMeta:    e.Node.Meta,
		}
		if in.Address == "" {
			in.Address = e.Node.Address
		}
		if in.Address == "" {
			continue
		}
		// An instance without checks passes, as Consul has it.
		for _, c := range e.Checks {
			if c.CheckID == api.NodeMaint || strings.HasPrefix(c.CheckID, api.ServiceMaintPrefix) {
				in.Maintenance = in.Maintenance || c.Status == api.HealthCritical
				continue
			}
			in.Health = max(in.Health, healthOf(c.Status))
		}
		out = append(out, in)
	}
	return out
}

// health is a check status, ordered from best to worst.
type health int

// Check statuses.
const (
	passing health = iota
	warning
	critical
)

// healthOf reads a check status. One Consul does not define counts as
// critical: serving on a status we do not understand is not safe.
func healthOf(status string) health {
	switch status {
	case api.HealthPassing:
		return passing
	case api.HealthWarning:
		return warning
	}
	return critical
}

// endpointsOf maps instances to endpoints as one source asks:
//
//   - passing serves; warning serves unless onlyPassing; critical does not;
//   - maintenance (the node's or the service's) drains: Terminating, with
//     Serving still telling the health of the other checks, as an
//     EndpointSlice tells a terminating endpoint's health;
//   - the zone is zoneKey's value in the service meta, else the node meta;
//   - the hostname is the node name when it is a DNS-1123 label.
//
// Instances sharing an address (two instances on one node without a
// service address) are one endpoint: the one in the best state wins, since
// the address does take traffic through it. The result is a new slice.
func endpointsOf(ins []instance, onlyPassing bool, zoneKey string) []providers.Endpoint {
	out := make([]providers.Endpoint, 0, len(ins))
	at := make(map[string]int, len(ins))
	for _, in := range ins {
		ep := providers.Endpoint{
			Address:     in.Address,
			Serving:     in.Health == passing || (in.Health == warning && !onlyPassing),
			Terminating: in.Maintenance,
		}
		if zoneKey != "" {
			ep.Zone = in.ServiceMeta[zoneKey]
			if ep.Zone == "" {
				ep.Zone = in.NodeMeta[zoneKey]
			}
		}
		if len(validation.IsDNS1123Label(in.Node)) == 0 {
			ep.Hostname = in.Node
		}
		i, dup := at[ep.Address]
		switch {
		case !dup:
			at[ep.Address] = len(out)
			out = append(out, ep)
		case rank(ep) > rank(out[i]):
			out[i] = ep
		}
	}
	return out
}

// rank orders endpoint states from most to least useful for traffic.
func rank(e providers.Endpoint) int {
	switch {
	case e.Serving && !e.Terminating:
		return 2
	case e.Serving:
		return 1
	}
	return 0
}
