// Package churn measures EndpointSlice churn: it replays seeded, scripted
// changes of a backend's endpoints through two writers, ours (the planner in
// internal/sliceplan) and the upstream EndpointSlice reconciler
// (k8s.io/endpointslice), each on its own client-go fake, and counts the
// creates, updates, deletes and bytes each one writes, next to the floor: the
// fewest writes any writer could have made from our slices.
//
// The benchmark runs with `make bench-churn` and writes docs/benchmarks.md
// and docs/churn.png; it is not part of `make test`.
package churn

import (
	"math/rand/v2"
	"net/netip"
	"slices"
)

const (
	// perSlice is the endpoint limit of one slice for both writers.
	perSlice = 100
	// fleet is how many backends the large sequences run with.
	fleet = 1000
)

// zones are the zones backends live in; upstream sees one Node per zone.
var zones = []string{"zone-a", "zone-b", "zone-c"}

// backend is one backend at one sync: one IPv4 address and, in dual-stack
// runs, one IPv6 address, both derived from its id.
type backend struct {
	id      int
	zone    string
	serving bool
}

// state is every backend at one sync, in id order.
type state []backend

// v4 is the backend's IPv4 address, in the benchmarking range 198.18.0.0/15.
func v4(id int) string {
	return netip.AddrFrom4([4]byte{198, 18 + byte(id>>16), byte(id >> 8), byte(id)}).String()
}

// v6 is the backend's IPv6 address, in the documentation range 2001:db8::/32.
func v6(id int) string {
	a := [16]byte{0x20, 0x01, 0x0d, 0xb8}
	a[13], a[14], a[15] = byte(id>>16), byte(id>>8), byte(id)
	return netip.AddrFrom16(a).String()
}

// Sequence is a scripted change: Setup is synced first and not counted, then
// every state of Steps is synced and counted.
type Sequence struct {
	Name  string
	Setup state
	Steps []state
}

// script builds a sequence from a seeded source of randomness.
type script struct {
	name  string
	build func(r *rand.Rand) (setup state, steps []state)
}

// scripts are the sequences of the benchmark, in report order.
var scripts = []script{
	{"scale 0->1000 by 50", func(*rand.Rand) (state, []state) {
		var steps []state
		for n := 50; n <= fleet; n += 50 {
			steps = append(steps, backends(0, n))
		}
		return nil, steps
	}},
	{"scale 0->1000 at once", func(*rand.Rand) (state, []state) {
		return nil, []state{backends(0, fleet)}
	}},
	{"rolling replace 25 at a time", func(r *rand.Rand) (state, []state) {
		cur := backends(0, fleet)
		order := r.Perm(fleet)
		var steps []state
		for i := 0; i < fleet; i += 25 {
			gone := map[int]bool{}
			for _, k := range order[i : i+25] {
				gone[k] = true
			}
			next := slices.DeleteFunc(slices.Clone(cur), func(b backend) bool { return gone[b.id] })
			next = append(next, backends(fleet+i, 25)...)
			steps = append(steps, next)
			cur = next
		}
		return backends(0, fleet), steps
	}},
	flapping,
	{"10% zone moves x10", func(r *rand.Rand) (state, []state) {
		return mutate(r, 10, fleet/10, func(b *backend) { b.zone = otherZone(r, b.zone) })
	}},
	{"scale 1000->0", func(*rand.Rand) (state, []state) {
		return backends(0, fleet), []state{nil}
	}},
	{"no-change resync", func(*rand.Rand) (state, []state) {
		setup := backends(0, fleet)
		return setup, []state{slices.Clone(setup)}
	}},
}

// flapping is the sequence the coalescing window is measured on: many small
// changes in a row, as health checks that flap send them.
var flapping = script{"1% health flapping x100", func(r *rand.Rand) (state, []state) {
	return mutate(r, 100, fleet/100, func(b *backend) { b.serving = !b.serving })
}}

// sequence builds the script's sequence for a seed.
func (s script) sequence(seed uint64) Sequence {
	setup, steps := s.build(rand.New(rand.NewPCG(seed, 0)))
	return Sequence{Name: s.name, Setup: setup, Steps: steps}
}

// backends returns n serving backends with ids from first on, spread over
// the zones round robin; what a seed varies is which backends change.
func backends(first, n int) state {
	out := make(state, n)
	for i := range out {
		id := first + i
		out[i] = backend{id: id, zone: zones[id%len(zones)], serving: true}
	}
	return out
}

// mutate starts from the fleet and, in each of steps syncs, changes n backends
// picked at random.
func mutate(r *rand.Rand, steps, n int, change func(*backend)) (state, []state) {
	setup := backends(0, fleet)
	cur := setup
	out := make([]state, steps)
	for i := range out {
		next := slices.Clone(cur)
		for _, k := range r.Perm(fleet)[:n] {
			change(&next[k])
		}
		out[i] = next
		cur = next
	}
	return setup, out
}

// otherZone is a random zone other than z.
func otherZone(r *rand.Rand, z string) string {
	i := slices.Index(zones, z)
	return zones[(i+1+r.IntN(len(zones)-1))%len(zones)]
}
