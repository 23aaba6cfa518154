// Package publish turns what providers found into the endpoints the
// controller publishes: canonical addresses split by family, unsafe addresses
// dropped with a reason, vanished endpoints kept as terminating while they
// drain, grouped by address type and ports for the slice planner. It is pure:
// no client, no clock (the caller passes the time).
package publish

import (
	"cmp"
	"hash/fnv"
	"io"
	"slices"
	"strconv"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"

	"github.com/backendslice/backendslice/internal/sliceplan"
)

// Endpoint is one endpoint to publish.
type Endpoint struct {
	AddressType discoveryv1.AddressType
	// Address is canonical: the form the API server accepts and prints.
	Address  string
	Zone     string
	Hostname string
	Serving  bool
	// Terminating endpoints are published with ready=false.
	Terminating bool
	// Ports are the EndpointSlice ports this endpoint is reached on.
	Ports []discoveryv1.EndpointPort
}

// Ready is the EndpointSlice ready condition: serving and not terminating.
func (e Endpoint) Ready() bool { return e.Serving && !e.Terminating }

// key identifies an endpoint across sources and slices.
func (e Endpoint) key() string { return string(e.AddressType) + "/" + e.Address }

// toAPI is the EndpointSlice form of the endpoint.
func (e Endpoint) toAPI() discoveryv1.Endpoint {
	ep := discoveryv1.Endpoint{
		Addresses: []string{e.Address},
		Conditions: discoveryv1.EndpointConditions{
			Ready:       ptr.To(e.Ready()),
			Serving:     ptr.To(e.Serving),
			Terminating: ptr.To(e.Terminating),
		},
	}
	if e.Hostname != "" {
		ep.Hostname = ptr.To(e.Hostname)
	}
	if e.Zone != "" {
		ep.Zone = ptr.To(e.Zone)
	}
	return ep
}

// FromSlices reads back the endpoints our slices publish now. An endpoint
// present in several slices (a stale cache, two writers) is read once.
func FromSlices(sl []discoveryv1.EndpointSlice) []Endpoint {
	seen := map[string]bool{}
	var out []Endpoint
	for _, s := range sl {
		for _, ep := range s.Endpoints {
			if len(ep.Addresses) == 0 {
				continue
			}
			e := Endpoint{
				AddressType: s.AddressType,
				Address:     ep.Addresses[0],
				Zone:        ptr.Deref(ep.Zone, ""),
				Hostname:    ptr.Deref(ep.Hostname, ""),
				// The API defaults a missing serving to ready.
				Serving:     ptr.Deref(ep.Conditions.Serving, ptr.Deref(ep.Conditions.Ready, false)),
				Terminating: ptr.Deref(ep.Conditions.Terminating, false),
				Ports:       s.Ports,
			}
			if seen[e.key()] {
				continue
			}
			seen[e.key()] = true
			out = append(out, e)
		}
	}
	return out
}

// Groups splits endpoints by address type and port set for the planner.
// Output is sorted so that equal input gives equal plans.
func Groups(eps []Endpoint) []sliceplan.Group {
	byKey := map[string]*sliceplan.Group{}
	var keys []string
	for _, e := range eps {
		k := sliceplan.GroupKey(e.AddressType, e.Ports)
		g, ok := byKey[k]
		if !ok {
			g = &sliceplan.Group{AddressType: e.AddressType, Ports: e.Ports}
			byKey[k] = g
			keys = append(keys, k)
		}
		g.Endpoints = append(g.Endpoints, e.toAPI())
	}
	slices.Sort(keys)
	out := make([]sliceplan.Group, 0, len(keys))
	for _, k := range keys {
		g := byKey[k]
		slices.SortFunc(g.Endpoints, func(a, b discoveryv1.Endpoint) int {
			return cmp.Compare(a.Addresses[0], b.Addresses[0])
		})
		out = append(out, *g)
	}
	return out
}

// Fingerprint sums a hash of each endpoint, every field included, so that
// two lists of the same endpoints in any order have the same fingerprint and
// a change to any endpoint changes it. The coalescing window compares
// fingerprints instead of keeping every backend's endpoints.
func Fingerprint(eps []Endpoint) uint64 {
	h := fnv.New64a()
	// field writes one field and a separator, so that no two lists of
	// fields hash the same input. It runs at every reconcile with the
	// window on, for every endpoint: no formatting, one hasher.
	field := func(s string) {
		_, _ = io.WriteString(h, s)
		_, _ = h.Write([]byte{0})
	}
	var sum uint64
	for _, e := range eps {
		h.Reset()
		field(string(e.AddressType))
		field(e.Address)
		field(e.Zone)
		field(e.Hostname)
		field(strconv.FormatBool(e.Serving))
		field(strconv.FormatBool(e.Terminating))
		for _, p := range e.Ports {
			field(ptr.Deref(p.Name, ""))
			field(string(ptr.Deref(p.Protocol, "")))
			field(strconv.Itoa(int(ptr.Deref(p.Port, 0))))
			field(ptr.Deref(p.AppProtocol, ""))
		}
		sum += h.Sum64()
	}
	return sum
}
