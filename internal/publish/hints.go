package publish

import (
	"slices"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"

	"github.com/backendslice/backendslice/internal/sliceplan"
)

// TopologyModeAnnotation asks for topology aware routing on a Service;
// "Auto" turns it on.
const TopologyModeAnnotation = "service.kubernetes.io/topology-mode"

// WantsZoneHints reports whether the Service asks for endpoints in the
// client's zone: trafficDistribution PreferClose (or its newer name
// PreferSameZone), or the topology-mode annotation set to Auto.
func WantsZoneHints(trafficDistribution *string, annotations map[string]string) bool {
	switch ptr.Deref(trafficDistribution, "") {
	case "PreferClose", "PreferSameZone":
		return true
	}
	return strings.EqualFold(annotations[TopologyModeAnnotation], "auto")
}

// ZoneHints returns the groups with zone hints set or cleared. When the
// Service asks for them and every ready endpoint of an address type has a
// zone, each endpoint of that type with a zone gets hints.forZones=[its
// zone] (one zone, well within the API's limit of 8); otherwise no endpoint
// of that type carries hints, since kube-proxy ignores hints unless every
// ready endpoint has them. The input is not changed.
func ZoneHints(groups []sliceplan.Group, trafficDistribution *string, annotations map[string]string) []sliceplan.Group {
	want := WantsZoneHints(trafficDistribution, annotations)
	missing := map[discoveryv1.AddressType]bool{}
	for _, g := range groups {
		for _, ep := range g.Endpoints {
			if ptr.Deref(ep.Conditions.Ready, true) && ptr.Deref(ep.Zone, "") == "" {
				missing[g.AddressType] = true
			}
		}
	}
	out := slices.Clone(groups)
	for i := range out {
		out[i].Endpoints = slices.Clone(out[i].Endpoints)
		hinted := want && !missing[out[i].AddressType]
		for j := range out[i].Endpoints {
			ep := &out[i].Endpoints[j]
			ep.Hints = nil
			if zone := ptr.Deref(ep.Zone, ""); hinted && zone != "" {
				ep.Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: zone}}}
			}
		}
	}
	return out
}
