package sliceplan

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/sets"
)

// flipped returns the endpoints of addr(0..n-1), the ones in down not
// serving.
func flipped(n int, down ...int) []discoveryv1.Endpoint {
	eps := endpoints(span(v4, 0, n))
	for _, i := range down {
		eps[i].Conditions = discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(false), Terminating: ptr(false)}
	}
	return eps
}

// storm is eps with the endpoints numbered gone replaced by as many new
// ones, numbered from 400 on: a step of a rolling replacement.
func storm(eps []discoveryv1.Endpoint, gone ...int) []discoveryv1.Endpoint {
	out := slices.DeleteFunc(eps, func(ep discoveryv1.Endpoint) bool {
		return slices.ContainsFunc(gone, func(i int) bool { return firstAddress(&ep) == v4(i) })
	})
	for i := range gone {
		out = append(out, ready(v4(400+i)))
	}
	return out
}

// marked is a slice of ours carrying the volatile mark.
func marked(s discoveryv1.EndpointSlice) discoveryv1.EndpointSlice {
	s.Annotations = template().metaFor(s.Endpoints, true)
	return s
}

// TestChurnPlacement plans single passes with volatile endpoints: 400
// endpoints in four full slices of 100, volatile slices of 10.
func TestChurnPlacement(t *testing.T) {
	sick := []int{5, 105, 205, 305} // one in each slice
	var everyTenth []int
	for i := 0; i < 400; i += 10 {
		everyTenth = append(everyTenth, i)
	}
	full := existingChunks(v4, repeat(4, 100)...)
	volatileSlice := func(name string, addrs ...int) discoveryv1.EndpointSlice {
		var eps []discoveryv1.Endpoint
		for _, i := range addrs {
			eps = append(eps, ready(v4(i)))
		}
		return marked(slice(name, ipv4, port, eps))
	}
	without := func(n int, gone ...int) []string {
		return where(v4, n, func(i int) bool { return !slices.Contains(gone, i) })
	}
	cases := []struct {
		name     string
		volatile []int
		desired  []discoveryv1.Endpoint
		existing []discoveryv1.EndpointSlice
		// plan counts creates, updates, deletes; blind those without churn-aware placement.
		plan, blind [3]int
		// volatileSlices maps each volatile slice to what it holds after.
		volatileSlices map[string][]string
	}{{
		name:     "volatile endpoints changing in four slices gather in one new small slice: one write more, once",
		volatile: sick, desired: flipped(400, sick...), existing: full,
		plan: [3]int{1, 4, 0}, blind: [3]int{0, 4, 0},
		volatileSlices: map[string][]string{"db-ipv4-4": {v4(5), v4(105), v4(205), v4(305)}},
	}, {
		name:     "once gathered, their next flip writes the small slice only",
		volatile: sick, desired: flipped(400),
		existing: []discoveryv1.EndpointSlice{
			slice("db-ipv4-0", ipv4, port, endpoints(without(100, 5))), slice("db-ipv4-1", ipv4, port, endpoints(without(200, 105)[100:])),
			slice("db-ipv4-2", ipv4, port, endpoints(without(300, 205)[200:])), slice("db-ipv4-3", ipv4, port, endpoints(without(400, 305)[300:])),
			marked(slice("db-ipv4-4", ipv4, port, []discoveryv1.Endpoint{flipped(400, sick...)[5], flipped(400, sick...)[105], flipped(400, sick...)[205], flipped(400, sick...)[305]})),
		},
		plan: [3]int{0, 1, 0}, blind: [3]int{0, 1, 0},
		volatileSlices: map[string][]string{"db-ipv4-4": {v4(5), v4(105), v4(205), v4(305)}},
	}, {
		name:     "a volatile endpoint changing alone stays where it is: moving it would cost a write",
		volatile: sick, desired: flipped(400, 5), existing: full,
		plan: [3]int{0, 1, 0}, blind: [3]int{0, 1, 0},
	}, {
		name:     "a volatile slice written anyway takes a volatile endpoint from a slice written anyway, for nothing",
		volatile: []int{5, 105, 399}, desired: append(flipped(399, 5, 105), flipped(400, 399)[399]),
		existing: []discoveryv1.EndpointSlice{
			slice("db-ipv4-0", ipv4, port, endpoints(span(v4, 0, 100))), slice("db-ipv4-1", ipv4, port, endpoints(without(200, 105)[100:])),
			slice("db-ipv4-2", ipv4, port, endpoints(span(v4, 200, 300))), slice("db-ipv4-3", ipv4, port, endpoints(span(v4, 300, 399))),
			volatileSlice("db-ipv4-4", 105, 399),
		},
		plan: [3]int{0, 2, 0}, blind: [3]int{0, 2, 0},
		volatileSlices: map[string][]string{"db-ipv4-4": {v4(5), v4(105), v4(399)}},
	}, {
		name:     "a volatile endpoint coming back goes into a new small slice instead of the full one it left",
		volatile: []int{5}, desired: flipped(400),
		existing: []discoveryv1.EndpointSlice{
			slice("db-ipv4-0", ipv4, port, endpoints(without(100, 5))), full[1], full[2], full[3],
		},
		plan: [3]int{1, 0, 0}, blind: [3]int{0, 1, 0},
		volatileSlices: map[string][]string{"db-ipv4-4": {v4(5)}},
	}, {
		name:     "after a restart nothing is volatile yet: the volatile slice keeps its endpoints and its flip writes it alone",
		volatile: nil, desired: flipped(400, 5),
		existing: []discoveryv1.EndpointSlice{
			slice("db-ipv4-0", ipv4, port, endpoints(without(100, 5))), full[1], full[2], full[3], volatileSlice("db-ipv4-4", 5),
		},
		plan: [3]int{0, 1, 0}, blind: [3]int{0, 1, 0},
		volatileSlices: map[string][]string{"db-ipv4-4": {v4(5)}},
	}, {
		name:     "new stable endpoints do not go into a volatile slice written anyway",
		volatile: []int{5}, desired: append(flipped(400, 5), ready(v4(400))),
		existing: []discoveryv1.EndpointSlice{
			slice("db-ipv4-0", ipv4, port, endpoints(without(100, 5))), full[1], full[2], slice("db-ipv4-3", ipv4, port, endpoints(span(v4, 300, 399))),
			volatileSlice("db-ipv4-4", 5), slice("db-ipv4-5", ipv4, port, endpoints(span(v4, 399, 400))),
		},
		plan: [3]int{0, 2, 0}, blind: [3]int{0, 2, 0},
		volatileSlices: map[string][]string{"db-ipv4-4": {v4(5)}},
	}, {
		name:     "two slices written only for volatile endpoints' flips while the other two are written anyway: no volatile slice, whose flips would cost a write more in a storm",
		volatile: sick[:2], desired: storm(flipped(400, 5, 105), 250, 350),
		existing: full,
		plan:     [3]int{0, 4, 0}, blind: [3]int{0, 4, 0},
	}, {
		name:     "a volatile slice written anyway while every stable slice is written anyway is deleted, its endpoints back in the stable slices",
		volatile: sick, desired: storm(flipped(400), 50, 150, 250, 350),
		existing: []discoveryv1.EndpointSlice{
			slice("db-ipv4-0", ipv4, port, endpoints(without(100, 5))), slice("db-ipv4-1", ipv4, port, endpoints(without(200, 105)[100:])),
			slice("db-ipv4-2", ipv4, port, endpoints(without(300, 205)[200:])), slice("db-ipv4-3", ipv4, port, endpoints(without(400, 305)[300:])),
			marked(slice("db-ipv4-4", ipv4, port, []discoveryv1.Endpoint{flipped(400, sick...)[5], flipped(400, sick...)[105], flipped(400, sick...)[205], flipped(400, sick...)[305]})),
		},
		plan: [3]int{0, 4, 1}, blind: [3]int{0, 4, 1},
	}, {
		name:     "at most three volatile slices of ten: the other volatile endpoints stay in place",
		volatile: everyTenth, desired: flipped(400, everyTenth...),
		existing: full,
		plan:     [3]int{1, 4, 0}, blind: [3]int{0, 4, 0},
		volatileSlices: map[string][]string{"db-ipv4-4": nil},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := Input{Template: template(), Desired: []Group{group(ipv4, port, tc.desired)}, Existing: tc.existing,
				TakenNames: names(tc.existing), MaxEndpointsPerSlice: 100, MaxSlices: 100}
			blind := in
			if tc.volatile != nil {
				in.Volatile = sets.New[string]()
				for _, i := range tc.volatile {
					in.Volatile.Insert(v4(i))
				}
			}
			plan := Compute(in)
			if got := [3]int{len(plan.Create), len(plan.Update), len(plan.Delete)}; got != tc.plan {
				t.Errorf("creates, updates, deletes = %v, want %v", got, tc.plan)
			}
			b := Compute(blind)
			if got := [3]int{len(b.Create), len(b.Update), len(b.Delete)}; got != tc.blind {
				t.Errorf("without churn-aware placement: creates, updates, deletes = %v, want %v", got, tc.blind)
			}
			after := apply(t, in, plan)
			checkInvariants(t, in, after)
			for _, s := range after {
				if !isVolatile(&s) {
					continue
				}
				want, ok := tc.volatileSlices[s.Name]
				var have []string
				for _, ep := range s.Endpoints {
					have = append(have, firstAddress(&ep))
				}
				switch {
				case !ok:
					t.Errorf("unexpected volatile slice %s holding %v", s.Name, have)
				case len(want) > 0 && !slices.Equal(slices.Sorted(slices.Values(have)), slices.Sorted(slices.Values(want))):
					t.Errorf("volatile slice %s holds %v, want %v", s.Name, have, want)
				case len(s.Endpoints) > volatileSize(100):
					t.Errorf("volatile slice %s holds %d endpoints, more than %d", s.Name, len(s.Endpoints), volatileSize(100))
				}
			}
		})
	}
}

func TestChanged(t *testing.T) {
	existing := existingChunks(v4, 3, 2)
	desired := flipped(6, 1) // 1 flips, 5 is new, ...
	desired = slices.Delete(desired, 3, 4)
	in := Input{Template: template(), Desired: []Group{group(ipv4, port, desired)}, Existing: existing}
	if got, want := Changed(in), []string{v4(1), v4(3), v4(5)}; !slices.Equal(got, want) {
		t.Errorf("Changed = %v, want %v (a flip, a removal, an addition)", got, want)
	}
	in.Desired = []Group{group(ipv4, port+1, endpoints(span(v4, 0, 1)))}
	if got := Changed(in); len(got) != 5 {
		t.Errorf("Changed after a port change = %v, want all five addresses (the group moved)", got)
	}
}

func TestChurnHistory(t *testing.T) {
	c := Churn{Window: time.Minute, Often: 3, Most: 4}
	t0 := time.Unix(1000, 0)
	var h History
	for i, step := range []struct {
		at      time.Duration
		changed []string
		want    []string
	}{
		{0, []string{"a", "b"}, nil},
		{10 * time.Second, []string{"a"}, nil},
		{20 * time.Second, []string{"a", "b"}, []string{"a"}},
		// a's changes at 0s and 10s left the window; b's at 0s too, but
		// b changed at 20s and 70s and now.
		{70 * time.Second, []string{"b"}, nil},
		{71 * time.Second, []string{"b"}, []string{"b"}},
		// Five addresses: a, changed last longest ago, is forgotten.
		{75 * time.Second, []string{"c", "d", "e"}, []string{"b"}},
		{90 * time.Second, nil, nil},
	} {
		now := t0.Add(step.at)
		h = c.Observe(h, step.changed, now)
		got := sets.List(c.Volatile(h, now))
		if step.want == nil {
			step.want = []string{}
		}
		if !slices.Equal(got, step.want) && (len(got) != 0 || len(step.want) != 0) {
			t.Errorf("step %d: volatile %v, want %v (history %v)", i, got, step.want, h)
		}
		if len(h) > c.Most {
			t.Errorf("step %d: history keeps %d addresses, more than %d", i, len(h), c.Most)
		}
		for addr, times := range h {
			if len(times) > c.Often {
				t.Errorf("step %d: %s keeps %d times, more than %d", i, addr, len(times), c.Often)
			}
		}
	}
	if got := (Churn{}).Observe(History{"a": {t0}}, []string{"a"}, t0); got != nil {
		t.Errorf("churn-aware placement off: history %v, want none", got)
	}
}

// TestChurnTracesWriteNoMore replays traces through the planner with and
// without churn-aware placement, volatility learned as the controller does
// (Changed, Churn), and checks that churn-aware placement never writes more
// over a whole trace, and writes less where a few endpoints flap together.
// The traces: a few endpoints flapping together, one flapping alone, one
// leaving and coming back, a zone going down and up, a rolling replacement
// during a flap storm, and uniform random flips.
func TestChurnTracesWriteNoMore(t *testing.T) {
	const n = 300
	c := Churn{Window: time.Minute, Often: 3, Most: 1000}
	traces := map[string]func(r *rand.Rand, step int, cur map[int]discoveryv1.Endpoint){
		"three flap together": func(_ *rand.Rand, step int, cur map[int]discoveryv1.Endpoint) {
			flapTogether(step, cur)
		},
		"three flap at random": func(r *rand.Rand, _ int, cur map[int]discoveryv1.Endpoint) {
			for _, i := range flappers {
				cur[i] = flipped(n, slices.Repeat([]int{i}, r.IntN(2))...)[i]
			}
		},
		"one leaves and comes back": func(_ *rand.Rand, step int, cur map[int]discoveryv1.Endpoint) {
			if step%2 == 0 {
				delete(cur, 42)
			} else {
				cur[42] = ready(v4(42))
			}
		},
		"a zone down and up": func(_ *rand.Rand, step int, cur map[int]discoveryv1.Endpoint) {
			for i := 0; i < n; i += 3 {
				cur[i] = flipped(n, slices.Repeat([]int{i}, boolInt(step >= 5 && step < 15))...)[i]
			}
		},
		"rolling replacement in a flap storm": func(r *rand.Rand, step int, cur map[int]discoveryv1.Endpoint) {
			for k := range 10 {
				delete(cur, step*10+k)
				cur[n+step*10+k] = ready(v4(n + step*10 + k))
			}
			for _, i := range []int{250, 251, 299} {
				cur[i] = flipped(n, slices.Repeat([]int{i}, r.IntN(2))...)[i]
			}
		},
		// Replacements at random, as the bench's: nearly every slice is
		// written at every step anyway, and a volatile slice would be one
		// write more at every flip.
		"rolling replacement at random while three flap": func(r *rand.Rand, step int, cur map[int]discoveryv1.Endpoint) {
			replaceAtRandom(r, step, cur, 8, flappers)
			flapTogether(step, cur)
		},
		// The volatile slice made while the three flap alone must go when
		// the replacement starts.
		"three flap, then a rolling replacement at random": func(r *rand.Rand, step int, cur map[int]discoveryv1.Endpoint) {
			if step >= 10 {
				replaceAtRandom(r, step-10, cur, 8, flappers)
			}
			flapTogether(step, cur)
		},
		"uniform random flips": func(r *rand.Rand, _ int, cur map[int]discoveryv1.Endpoint) {
			for range 3 {
				i := r.IntN(n)
				cur[i] = flipped(n, slices.Repeat([]int{i}, r.IntN(2))...)[i]
			}
		},
	}
	for name, change := range traces {
		for seed := uint64(1); seed <= 5; seed++ {
			t.Run(fmt.Sprintf("%s/seed=%d", name, seed), func(t *testing.T) {
				r := rand.New(rand.NewPCG(seed, 0))
				aware, blind := replayTrace(t, c, r, n, change, true), replayTrace(t, c, rand.New(rand.NewPCG(seed, 0)), n, change, false)
				if aware > blind {
					t.Errorf("churn-aware placement writes %d, more than %d without it", aware, blind)
				}
				if name == "three flap together" && 2*aware > blind {
					t.Errorf("churn-aware placement writes %d, want at most half of %d", aware, blind)
				}
			})
		}
	}
}

// flappers are the endpoints of the flapping traces, one in each of the
// three slices.
var flappers = []int{7, 130, 260}

// flapTogether flips the flappers of n = 300 endpoints: down at odd steps.
func flapTogether(step int, cur map[int]discoveryv1.Endpoint) {
	for _, i := range flappers {
		cur[i] = flipped(300, slices.Repeat([]int{i}, step%2)...)[i]
	}
}

// replaceAtRandom replaces k endpoints of the first 300 still there, other
// than keep and drawn by r, by new ones numbered from 300 on: step of a
// rolling replacement.
func replaceAtRandom(r *rand.Rand, step int, cur map[int]discoveryv1.Endpoint, k int, keep []int) {
	var old []int
	for _, i := range slices.Sorted(maps.Keys(cur)) {
		if i < 300 && !slices.Contains(keep, i) {
			old = append(old, i)
		}
	}
	for j, pick := range r.Perm(len(old))[:k] {
		delete(cur, old[pick])
		cur[300+step*k+j] = ready(v4(300 + step*k + j))
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// replayTrace plays 30 steps, 5 s apart, of a trace over n endpoints in
// slices of 100 and returns the writes.
func replayTrace(t *testing.T, c Churn, r *rand.Rand, n int, change func(*rand.Rand, int, map[int]discoveryv1.Endpoint), aware bool) int {
	cur := map[int]discoveryv1.Endpoint{}
	for i := range n {
		cur[i] = ready(v4(i))
	}
	var state []discoveryv1.EndpointSlice
	var h History
	total := 0
	t0 := time.Unix(0, 0)
	for step := -1; step < 30; step++ {
		if step >= 0 {
			change(r, step, cur)
		}
		var eps []discoveryv1.Endpoint
		for _, i := range slices.Sorted(maps.Keys(cur)) {
			eps = append(eps, cur[i])
		}
		in := Input{Template: template(), Desired: []Group{group(ipv4, port, eps)}, Existing: state, TakenNames: names(state), MaxEndpointsPerSlice: 100, MaxSlices: 100}
		if aware {
			now := t0.Add(time.Duration(step) * 5 * time.Second)
			h = c.Observe(h, Changed(in), now)
			in.Volatile = c.Volatile(h, now)
		}
		plan := Compute(in)
		if step >= 0 {
			total += writes(plan)
		}
		state = apply(t, in, plan)
		checkInvariants(t, in, state)
	}
	return total
}
