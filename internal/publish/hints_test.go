package publish

import (
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/utils/ptr"

	"github.com/backendslice/backendslice/internal/sliceplan"
)

func TestZoneHints(t *testing.T) {
	ep := func(addr, zone string, ready bool) discoveryv1.Endpoint {
		e := discoveryv1.Endpoint{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)}}
		if zone != "" {
			e.Zone = ptr.To(zone)
		}
		return e
	}
	hinted := func(e discoveryv1.Endpoint) discoveryv1.Endpoint {
		e.Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: *e.Zone}}}
		return e
	}
	group := func(at discoveryv1.AddressType, eps ...discoveryv1.Endpoint) sliceplan.Group {
		return sliceplan.Group{AddressType: at, Endpoints: eps}
	}
	v4a, v4b := ep("192.0.2.1", "zone-a", true), ep("192.0.2.2", "zone-b", true)
	v4none := ep("192.0.2.3", "", true)
	v4notReady := ep("192.0.2.4", "", false)
	v4notReadyZoned := ep("192.0.2.5", "zone-c", false)
	v6a := ep("2001:db8::1", "zone-a", true)
	v6none := ep("2001:db8::2", "", true)
	stale := v4a
	stale.Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "zone-z"}}}
	auto := map[string]string{TopologyModeAnnotation: "Auto"}

	tests := []struct {
		name        string
		traffic     *string
		annotations map[string]string
		in, want    []sliceplan.Group
	}{{
		name:    "PreferClose, every endpoint zoned",
		traffic: ptr.To("PreferClose"),
		in:      []sliceplan.Group{group(discoveryv1.AddressTypeIPv4, v4a, v4b)},
		want:    []sliceplan.Group{group(discoveryv1.AddressTypeIPv4, hinted(v4a), hinted(v4b))},
	}, {
		name:    "PreferSameZone reads as PreferClose",
		traffic: ptr.To("PreferSameZone"),
		in:      []sliceplan.Group{group(discoveryv1.AddressTypeIPv4, v4a)},
		want:    []sliceplan.Group{group(discoveryv1.AddressTypeIPv4, hinted(v4a))},
	}, {
		name:        "topology-mode Auto annotation",
		annotations: auto,
		in:          []sliceplan.Group{group(discoveryv1.AddressTypeIPv4, v4a, v4b)},
		want:        []sliceplan.Group{group(discoveryv1.AddressTypeIPv4, hinted(v4a), hinted(v4b))},
	}, {
		name:        "topology-mode auto in lower case",
		annotations: map[string]string{TopologyModeAnnotation: "auto"},
		in:          []sliceplan.Group{group(discoveryv1.AddressTypeIPv4, v4a)},
		want:        []sliceplan.Group{group(discoveryv1.AddressTypeIPv4, hinted(v4a))},
	}, {
		name:        "topology-mode other than Auto",
		annotations: map[string]string{TopologyModeAnnotation: "Disabled"},
		in:          []sliceplan.Group{group(discoveryv1.AddressTypeIPv4, v4a)},
		want:        []sliceplan.Group{group(discoveryv1.AddressTypeIPv4, v4a)},
	}, {
		name: "not asked for",
		in:   []sliceplan.Group{group(discoveryv1.AddressTypeIPv4, v4a, v4b)},
		want: []sliceplan.Group{group(discoveryv1.AddressTypeIPv4, v4a, v4b)},
	}, {
		name:    "other traffic distribution",
		traffic: ptr.To("PreferSameNode"),
		in:      []sliceplan.Group{group(discoveryv1.AddressTypeIPv4, v4a)},
		want:    []sliceplan.Group{group(discoveryv1.AddressTypeIPv4, v4a)},
	}, {
		name:    "a ready endpoint without a zone: no hints at all",
		traffic: ptr.To("PreferClose"),
		in:      []sliceplan.Group{group(discoveryv1.AddressTypeIPv4, v4a, v4none)},
		want:    []sliceplan.Group{group(discoveryv1.AddressTypeIPv4, v4a, v4none)},
	}, {
		name:    "a not ready endpoint without a zone does not count",
		traffic: ptr.To("PreferClose"),
		in:      []sliceplan.Group{group(discoveryv1.AddressTypeIPv4, v4a, v4notReady, v4notReadyZoned)},
		want:    []sliceplan.Group{group(discoveryv1.AddressTypeIPv4, hinted(v4a), v4notReady, hinted(v4notReadyZoned))},
	}, {
		name:    "address types decide apart",
		traffic: ptr.To("PreferClose"),
		in: []sliceplan.Group{
			group(discoveryv1.AddressTypeIPv4, v4a),
			group(discoveryv1.AddressTypeIPv6, v6a, v6none),
		},
		want: []sliceplan.Group{
			group(discoveryv1.AddressTypeIPv4, hinted(v4a)),
			group(discoveryv1.AddressTypeIPv6, v6a, v6none),
		},
	}, {
		name:    "an unzoned endpoint in another group of the same type counts",
		traffic: ptr.To("PreferClose"),
		in: []sliceplan.Group{
			group(discoveryv1.AddressTypeIPv4, v4a),
			{AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{{Port: ptr.To[int32](80)}}, Endpoints: []discoveryv1.Endpoint{v4none}},
		},
		want: []sliceplan.Group{
			group(discoveryv1.AddressTypeIPv4, v4a),
			{AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{{Port: ptr.To[int32](80)}}, Endpoints: []discoveryv1.Endpoint{v4none}},
		},
	}, {
		name:    "hints that no longer apply are cleared",
		traffic: nil,
		in:      []sliceplan.Group{group(discoveryv1.AddressTypeIPv4, stale)},
		want:    []sliceplan.Group{group(discoveryv1.AddressTypeIPv4, v4a)},
	}, {
		name:    "wrong hints are replaced",
		traffic: ptr.To("PreferClose"),
		in:      []sliceplan.Group{group(discoveryv1.AddressTypeIPv4, stale)},
		want:    []sliceplan.Group{group(discoveryv1.AddressTypeIPv4, hinted(v4a))},
	}, {
		name:    "no groups",
		traffic: ptr.To("PreferClose"),
		want:    []sliceplan.Group{},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := make([]sliceplan.Group, len(tt.in))
			for i, g := range tt.in {
				before[i] = g
				before[i].Endpoints = append([]discoveryv1.Endpoint(nil), g.Endpoints...)
			}
			got := ZoneHints(tt.in, tt.traffic, tt.annotations)
			if !equality.Semantic.DeepEqual(got, tt.want) {
				t.Errorf("ZoneHints:\n got %+v\nwant %+v", got, tt.want)
			}
			if !equality.Semantic.DeepEqual(tt.in, before) {
				t.Errorf("ZoneHints changed its input: %+v", tt.in)
			}
		})
	}
}
