package sliceplan

import (
	"slices"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
)

// unserving is an endpoint its source calls unhealthy.
func unserving(addr string) discoveryv1.Endpoint {
	ep := ready(addr)
	ep.Conditions.Ready, ep.Conditions.Serving = ptr(false), ptr(false)
	return ep
}

// held is IPv4 slices db-ipv4-0, -1, ... holding the given runs of v4.
func held(runs ...[]string) []discoveryv1.EndpointSlice {
	var out []discoveryv1.EndpointSlice
	for k, r := range runs {
		out = append(out, slice(sliceName(v4, k), ipv4, port, endpoints(r)))
	}
	return out
}

func TestComputeSliceBound(t *testing.T) {
	all := func(n int) []Group { return []Group{group(ipv4, port, endpoints(span(v4, 0, n)))} }
	runCases(t, []planCase{{
		name: "under the bound the size asked for is kept",
		max:  10, maxSlices: 5, desired: all(45),
		creates: 5, size: 10,
		want: chunks(v4, 10, 10, 10, 10, 5),
	}, {
		name: "over the bound slices hold more: 45 in 3 slices hold 15",
		max:  10, maxSlices: 3, desired: all(45),
		creates: 3, size: 15,
		want: chunks(v4, 15, 15, 15),
	}, {
		name: "the size is raised at most to the API's 1000",
		max:  100, maxSlices: 2,
		desired: []Group{group(ipv6, port, endpoints(span(v6, 0, 2000)))},
		creates: 2, size: 1000,
		want: chunks(v6, 1000, 1000),
	}, {
		name: "the families share the bound: 25 IPv4 and 25 IPv6 in 4 slices hold 13",
		max:  10, maxSlices: 4,
		desired: []Group{group(ipv4, port, endpoints(span(v4, 0, 25))), group(ipv6, port, endpoints(span(v6, 0, 25)))},
		creates: 4, size: 13,
		want: map[string][]string{
			"db-ipv4-0": span(v4, 0, 13), "db-ipv4-1": span(v4, 13, 25),
			"db-ipv6-0": span(v6, 0, 13), "db-ipv6-1": span(v6, 13, 25),
		},
	}, {
		name: "one endpoint past the boundary is one update, not a repack",
		max:  10, maxSlices: 3, desired: all(31),
		existing: existingChunks(v4, 10, 10, 10),
		updates:  1, size: 11,
		want: map[string][]string{
			"db-ipv4-0": append(span(v4, 0, 10), v4(30)), "db-ipv4-1": span(v4, 10, 20), "db-ipv4-2": span(v4, 20, 30),
		},
	}, {
		name: "one endpoint back below the boundary keeps the size the slices use: one update",
		max:  10, maxSlices: 3,
		desired:  []Group{group(ipv4, port, endpoints(span(v4, 0, 15), span(v4, 16, 31)))},
		existing: held(append(span(v4, 0, 10), v4(30)), span(v4, 10, 20), span(v4, 20, 30)),
		updates:  1, size: 11,
		want: map[string][]string{
			"db-ipv4-0": append(span(v4, 0, 10), v4(30)), "db-ipv4-1": slices.Concat(span(v4, 10, 15), span(v4, 16, 20)), "db-ipv4-2": span(v4, 20, 30),
		},
	}, {
		name: "a backend shrunk by more than a quarter is repacked to the smaller size",
		max:  10, maxSlices: 3, desired: all(36),
		existing: existingChunks(v4, 20, 20, 20),
		updates:  3, size: 12,
		want: map[string][]string{
			"db-ipv4-0": span(v4, 0, 12), "db-ipv4-1": span(v4, 20, 32), "db-ipv4-2": slices.Concat(span(v4, 12, 20), span(v4, 32, 36)),
		},
	}, {
		name: "far from the bound a smaller size asked for applies at once",
		max:  50, maxSlices: 100, desired: all(100),
		existing: existingChunks(v4, 100),
		creates:  1, updates: 1, size: 50,
		want: chunks(v4, 50, 50),
	}, {
		name: "at the bound new endpoints go to the slices with room, not to a new slice",
		max:  10, maxSlices: 4, desired: all(40),
		existing: existingChunks(v4, 8, 8, 8, 8),
		updates:  4, size: 10,
		want: map[string][]string{
			"db-ipv4-0": append(span(v4, 0, 8), v4(32), v4(33)), "db-ipv4-1": append(span(v4, 8, 16), v4(34), v4(35)),
			"db-ipv4-2": append(span(v4, 16, 24), v4(36), v4(37)), "db-ipv4-3": append(span(v4, 24, 32), v4(38), v4(39)),
		},
	}, {
		name: "slices past the bound give their endpoints to the others and go",
		max:  5, maxSlices: 4, desired: all(30),
		existing: existingChunks(v4, 6, 6, 6, 6, 6),
		updates:  3, deletes: 1, size: 8,
		want: map[string][]string{
			"db-ipv4-0": append(span(v4, 0, 6), v4(24), v4(25)), "db-ipv4-1": append(span(v4, 6, 12), v4(26), v4(27)),
			"db-ipv4-2": append(span(v4, 12, 18), v4(28), v4(29)), "db-ipv4-3": span(v4, 18, 24),
		},
	}, {
		name: "more port sets than slices: groups with a ready endpoint first, then by key",
		max:  10, maxSlices: 2,
		desired: []Group{
			group(ipv4, 5001, []discoveryv1.Endpoint{unserving(v4(0))}),
			group(ipv4, 5002, endpoints([]string{v4(1)})),
			group(ipv4, 5003, endpoints([]string{v4(2)})),
			group(ipv4, 5004, endpoints([]string{v4(3)})),
		},
		creates: 2, size: 1000,
		want:    map[string][]string{"db-ipv4-0": {v4(1)}, "db-ipv4-1": {v4(2)}},
		leftOut: []string{v4(0), v4(3)},
	}, {
		name: "a group cut short keeps its ready endpoints first, then the lowest addresses",
		max:  100, maxSlices: 1,
		desired: []Group{group(ipv6, port, slices.Concat(
			[]discoveryv1.Endpoint{unserving(v6(0))}, endpoints(span(v6, 1, 1002))))},
		creates: 1, size: 1000,
		want:    map[string][]string{"db-ipv6-0": span(v6, 1, 1001)},
		leftOut: []string{v6(0), v6(1001)},
	}, {
		name: "a rotation among the endpoints left out writes nothing",
		max:  100, maxSlices: 1,
		desired:  []Group{group(ipv6, port, endpoints(span(v6, 0, 1000), []string{v6(5000), v6(5001)}))},
		existing: []discoveryv1.EndpointSlice{slice("db-ipv6-0", ipv6, port, endpoints(span(v6, 0, 1000)))},
		size:     1000,
		want:     map[string][]string{"db-ipv6-0": span(v6, 0, 1000)},
		leftOut:  []string{v6(5000), v6(5001)},
	}})
}

// TestSliceBoundHovering: a backend of 2,000 endpoints under a bound of
// 100 slices of 10 (so 20 a slice) grows by 100 (each new endpoint joins
// another slice, which then holds 21), shrinks back to 2,000 and hovers
// there, an endpoint coming and another going, again and again: every
// change writes one slice, the one that takes or loses the endpoint. A
// size that followed the count would go back to 20 at 2,000 and repack
// every slice holding 21.
func TestSliceBoundHovering(t *testing.T) {
	const n = 2000
	in := Input{Template: template(), MaxEndpointsPerSlice: 10, MaxSlices: 100}
	var state []discoveryv1.EndpointSlice
	plan := func(addrs []string) Plan {
		in.Desired = []Group{group(ipv6, port, endpoints(addrs))}
		in.Existing, in.TakenNames = state, names(state)
		p := Compute(in)
		state = apply(t, in, p)
		return p
	}
	if p := plan(span(v6, 0, n)); len(p.Create) != 100 || p.Size != 20 {
		t.Fatalf("first plan: %d creates of %d, want 100 of 20", len(p.Create), p.Size)
	}
	// The backend is the addresses from lo to hi, less the first gone.
	lo, hi, writes := 0, n, 0
	change := func(what string) {
		t.Helper()
		p := plan(span(v6, lo, hi))
		w := len(p.Create) + len(p.Update) + len(p.Delete)
		writes += w
		if w != 1 || len(state) > in.MaxSlices {
			t.Fatalf("%s (%d endpoints): %d writes at size %d, %d slices; want 1 write, at most %d slices",
				what, hi-lo, w, p.Size, len(state), in.MaxSlices)
		}
	}
	for range 100 {
		hi++
		change("growing")
	}
	for range 100 {
		lo++
		change("shrinking")
	}
	for k := range 40 {
		if k%2 == 0 {
			hi++
		} else {
			lo++
		}
		change("hovering")
	}
	t.Logf("240 changes around 2,000 endpoints: %d slice writes", writes)
	checkInvariants(t, in, state)
}

// TestSliceSizeFollowsTheBackendDown: the size the slices use is kept
// while a third more endpoints than the backend has would still need it,
// then it follows the count.
func TestSliceSizeFollowsTheBackendDown(t *testing.T) {
	in := Input{Template: template(), MaxEndpointsPerSlice: 10, MaxSlices: 10}
	var state []discoveryv1.EndpointSlice
	counts := []int{200, 190, 160, 143, 142, 120, 100, 76, 40}
	// 200 needs 20 a slice. 143 needs 15, but 4/3 of it, 191, still
	// needs 20: kept. 4/3 of 142, 190, needs 19: 142's own 15 it is. 4/3
	// of 120 needs 16: 15 kept. 4/3 of 100 needs 14: 100's own 10.
	want := []int{20, 20, 20, 20, 15, 15, 10, 10, 10}
	for i, n := range counts {
		in.Desired = []Group{group(ipv4, port, endpoints(span(v4, 0, n)))}
		in.Existing, in.TakenNames = state, names(state)
		p := Compute(in)
		state = apply(t, in, p)
		checkInvariants(t, in, state)
		if p.Size != want[i] {
			t.Errorf("at %d endpoints the size is %d, want %d", n, p.Size, want[i])
		}
	}
}
