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
	"time"
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
	// Gap is the time between two syncs: churn-aware placement counts
	// an endpoint's changes within a window of time.
	Gap time.Duration
}

// script builds a sequence from a seeded source of randomness. Syncs come
// gap apart (defaultGap when zero).
type script struct {
	name  string
	build func(r *rand.Rand) (setup state, steps []state)
	gap   time.Duration
}

// defaultGap is the time between syncs of the uniform sequences.
const defaultGap = 10 * time.Second

// sick is how many instances of the fleet are sick in the realistic
// sequences, and poll the time between two answers of their source.
const (
	sick = 5
	poll = 5 * time.Second
)

// scripts are the sequences of the benchmark, in report order.
var scripts = []script{
	{"scale 0->1000 by 50", func(*rand.Rand) (state, []state) {
		var steps []state
		for n := 50; n <= fleet; n += 50 {
			steps = append(steps, backends(0, n))
		}
		return nil, steps
	}, 0},
	{"scale 0->1000 at once", func(*rand.Rand) (state, []state) {
		return nil, []state{backends(0, fleet)}
	}, 0},
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
	}, 0},
	flapping,
	{"10% zone moves x10", func(r *rand.Rand) (state, []state) {
		return mutate(r, 10, fleet/10, func(b *backend) { b.zone = otherZone(r, b.zone) })
	}, 0},
	{"scale 1000->0", func(*rand.Rand) (state, []state) {
		return backends(0, fleet), []state{nil}
	}, 0},
	{"no-change resync", func(*rand.Rand) (state, []state) {
		setup := backends(0, fleet)
		return setup, []state{slices.Clone(setup)}
	}, 0},
}

// realistic are the sequences of the typical failures of external backends,
// in report order: a few sick instances whose health checks flap, flipping
// together (one cause, such as a sick host or dependency) or each at random;
// a replica leaving and rejoining as its replication lag crosses the
// threshold; a zone going down and coming back; a rolling replacement while
// a few instances flap. The source answers every poll (5 s).
var realistic = []script{
	{"5 of 1000 sick, flapping together, 10 min", func(r *rand.Rand) (state, []state) {
		return flap(r, 120, func(int, *rand.Rand) bool { return true })
	}, poll},
	{"5 of 1000 sick, flapping at random, 10 min", func(r *rand.Rand) (state, []state) {
		return flap(r, 120, func(_ int, r *rand.Rand) bool { return r.IntN(2) == 0 })
	}, poll},
	{"replica lagging in and out, 10 min", func(r *rand.Rand) (state, []state) {
		setup := backends(0, fleet)
		lagging := r.IntN(fleet)
		steps := make([]state, 60)
		for i := range steps {
			steps[i] = slices.Clone(setup)
			if i%2 == 0 {
				steps[i] = slices.DeleteFunc(steps[i], func(b backend) bool { return b.id == lagging })
			}
		}
		return setup, steps
	}, 2 * poll},
	{"zone outage and recovery", func(*rand.Rand) (state, []state) {
		setup := backends(0, fleet)
		down := slices.Clone(setup)
		for i := range down {
			down[i].serving = down[i].zone != zones[0]
		}
		return setup, []state{down, slices.Clone(setup)}
	}, 5 * time.Minute},
	{"rolling replace 25 at a time, 5 flapping", func(r *rand.Rand) (state, []state) {
		cur := backends(0, fleet)
		order := r.Perm(fleet)
		flappers := order[fleet-sick:] // never replaced
		var steps []state
		for i := 0; i < fleet-sick; i += 25 {
			gone := map[int]bool{}
			for _, k := range order[i:min(i+25, fleet-sick)] {
				gone[k] = true
			}
			next := slices.DeleteFunc(slices.Clone(cur), func(b backend) bool { return gone[b.id] })
			next = append(next, backends(fleet+i, len(gone))...)
			for j := range next {
				if slices.Contains(flappers, next[j].id) {
					next[j].serving = !next[j].serving
				}
			}
			steps = append(steps, next)
			cur = next
		}
		return backends(0, fleet), steps
	}, poll},
}

// flap starts from the fleet with sick instances picked at random, and in
// each of steps polls flips every sick instance for which flips says so.
func flap(r *rand.Rand, steps int, flips func(i int, r *rand.Rand) bool) (state, []state) {
	setup := backends(0, fleet)
	ill := r.Perm(fleet)[:sick]
	cur := setup
	out := make([]state, steps)
	for i := range out {
		next := slices.Clone(cur)
		for _, k := range ill {
			if flips(i, r) {
				next[k].serving = !next[k].serving
			}
		}
		out[i] = next
		cur = next
	}
	return setup, out
}

// flapping is the sequence the coalescing window is measured on: many small
// changes in a row, as health checks that flap send them.
var flapping = script{"1% health flapping x100", func(r *rand.Rand) (state, []state) {
	return mutate(r, 100, fleet/100, func(b *backend) { b.serving = !b.serving })
}, 0}

// sequence builds the script's sequence for a seed.
func (s script) sequence(seed uint64) Sequence {
	setup, steps := s.build(rand.New(rand.NewPCG(seed, 0)))
	gap := s.gap
	if gap == 0 {
		gap = defaultGap
	}
	return Sequence{Name: s.name, Setup: setup, Steps: steps, Gap: gap}
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
