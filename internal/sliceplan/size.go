package sliceplan

import (
	"cmp"
	"maps"
	"slices"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
)

// A backend's slices are bounded (Input.MaxSlices) by raising how many
// endpoints each slice holds rather than by leaving endpoints out: the
// size is the smallest one, from the limit asked for up to the API's 1000,
// at which every group fits in the bound. Only when even 1000 a slice does
// not fit (more port sets than the bound allows slices) are endpoints left
// out.
//
// A size that follows the endpoint count exactly would rewrite a backend
// that hovers around a boundary: one endpoint more raises the size (cheap:
// slices keep what they hold and the new one fills a slice), one less
// lowers it again, and every slice now over the lower size is repacked.
// So a size the slices already use is kept, rather than lowered, for as
// long as it is no larger than what a third more endpoints would need:
// the slices are repacked only once the backend has shrunk by about a
// quarter since it needed that size, a shrink whose own writes touched
// most slices already. The size is read from the slices themselves, so a
// restart keeps it too.

// growthBand is how much larger (4/3) a backend may grow before the size
// its slices use now would no longer be enough; while it is, that size is
// kept.
func growthBand(n int) int { return (4*n + 2) / 3 }

// slicesAt is how many slices groups of the given sizes need at size
// endpoints a slice.
func slicesAt(counts []int, size int) int {
	n := 0
	for _, c := range counts {
		n += (c + size - 1) / size
	}
	return n
}

// smallestFit is the smallest size from lo to the API's limit at which the
// groups fit in most slices, and false when none does.
func smallestFit(counts []int, lo, most int) (int, bool) {
	if slicesAt(counts, apiMaxEndpointsPerSlice) > most {
		return apiMaxEndpointsPerSlice, false
	}
	// slicesAt only falls as the size grows: search for the first fit.
	hi := apiMaxEndpointsPerSlice
	for lo < hi {
		mid := lo + (hi-lo)/2
		if slicesAt(counts, mid) <= most {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo, true
}

// bounds is what Input.MaxSlices makes of a plan.
type bounds struct {
	// size is the most endpoints a slice holds.
	size int
	// budgets are the most slices each group (by key) may end with; nil
	// when the slices are not bounded.
	budgets map[string]int
	// leftOut is what no slice holds, by group.
	leftOut []Group
}

// bound works out the slice size and each group's budget of slices for
// the desired groups, whose slices are existing, and leaves out (removing
// them from desired) the endpoints that do not fit in MaxSlices slices
// even at the API's limit. The size the slices of desired groups already
// use (the most one holds) keeps a backend that hovers around a boundary
// from being repacked (sliceSize).
func (in Input) bound(desired map[string]*Group, existing map[string][]*discoveryv1.EndpointSlice) bounds {
	counts := make([]int, 0, len(desired))
	held := 0
	for key, g := range desired {
		counts = append(counts, len(g.Endpoints))
		for _, s := range existing[key] {
			held = max(held, len(s.Endpoints))
		}
	}
	size, need, fits := in.sliceSize(counts, held)
	b := bounds{size: size}
	if in.MaxSlices < 1 {
		return b
	}
	if !fits {
		b.leftOut = leaveOut(desired, size, in.MaxSlices)
	}
	b.budgets = budgets(desired, need, in.MaxSlices)
	return b
}

// sliceSize is how many endpoints a slice holds for groups of the given
// sizes, whose existing slices hold at most held endpoints; the smallest
// size at which they fit in MaxSlices slices; and whether they fit at all.
func (in Input) sliceSize(counts []int, held int) (size, need int, fits bool) {
	asked := in.maxPerSlice()
	if in.MaxSlices < 1 {
		return asked, asked, true
	}
	need, fits = smallestFit(counts, asked, in.MaxSlices)
	if !fits || held <= need {
		return need, need, fits
	}
	grown := make([]int, len(counts))
	for i, c := range counts {
		grown[i] = growthBand(c)
	}
	if roomy, ok := smallestFit(grown, asked, in.MaxSlices); !ok || held <= roomy {
		return min(held, apiMaxEndpointsPerSlice), need, true
	}
	return need, need, true
}

// budgets shares most slices between the groups: each the slices it needs
// at need endpoints a slice (they fit: need is the smallest size at which
// they do), and the slices to spare evenly, the first groups by key taking
// what does not divide. It depends on the desired endpoints alone, not on
// the size the slices use, so that a second plan over the first's result
// finds every group within its budget.
func budgets(desired map[string]*Group, need, most int) map[string]int {
	keys := slices.Sorted(maps.Keys(desired))
	out := make(map[string]int, len(keys))
	spare := most
	for _, k := range keys {
		out[k] = (len(desired[k].Endpoints) + need - 1) / need
		spare -= out[k]
	}
	for i, k := range keys {
		out[k] += spare / len(keys)
		if i < spare%len(keys) {
			out[k]++
		}
	}
	return out
}

// retire brings a group whose slices, as step 1 left them, are more than
// its budget back within it: the emptiest give their endpoints up to rest
// and go. The fullest stay, so that the fewest endpoints move; they can
// take every endpoint of the group, since the budget holds the group at
// the size.
func retire(drafts []*draft, rest []*discoveryv1.Endpoint, budget int) []*discoveryv1.Endpoint {
	if live(drafts) <= budget {
		return rest
	}
	byFill := slices.Clone(drafts)
	slices.SortStableFunc(byFill, func(a, b *draft) int { return cmp.Compare(len(b.eps), len(a.eps)) })
	for _, d := range byFill[budget:] {
		rest = append(rest, d.eps...)
		d.eps, d.dirty, d.retired = nil, true, true
	}
	return rest
}

// live counts the drafts that hold endpoints: the slices the group ends
// with so far.
func live(drafts []*draft) int {
	n := 0
	for _, d := range drafts {
		if len(d.eps) > 0 {
			n++
		}
	}
	return n
}

// roomiest is the slice holding endpoints that has the most room left,
// the first on a tie, or nil when none has any.
func roomiest(drafts []*draft, limit int) *draft {
	var best *draft
	for _, d := range drafts {
		if len(d.eps) > 0 && len(d.eps) < limit && (best == nil || len(d.eps) < len(best.eps)) {
			best = d
		}
	}
	return best
}

// leaveOut keeps, when the groups need more than most slices of size
// endpoints, what fits: groups with a ready endpoint first, then by key,
// each given the slices it needs while any are left; a group cut short
// keeps its ready endpoints first, then in address order. It returns what
// is left out, by group key, each group's endpoints in address order, and
// removes emptied groups from desired.
func leaveOut(desired map[string]*Group, size, most int) []Group {
	keys := make([]string, 0, len(desired))
	for k := range desired {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		return cmp.Or(cmp.Compare(bestRank(desired[a]), bestRank(desired[b])), strings.Compare(a, b))
	})
	var out []Group
	left := most
	for _, k := range keys {
		g := desired[k]
		keep := min(len(g.Endpoints), left*size)
		left -= (keep + size - 1) / size
		if keep == len(g.Endpoints) {
			continue
		}
		slices.SortFunc(g.Endpoints, byRank)
		cut := Group{AddressType: g.AddressType, Ports: make([]discoveryv1.EndpointPort, len(g.Ports))}
		for i := range g.Ports {
			cut.Ports[i] = *g.Ports[i].DeepCopy()
		}
		for i := range g.Endpoints[keep:] {
			cut.Endpoints = append(cut.Endpoints, *g.Endpoints[keep+i].DeepCopy())
		}
		slices.SortFunc(cut.Endpoints, func(a, b discoveryv1.Endpoint) int { return CompareAddresses(firstAddress(&a), firstAddress(&b)) })
		out = append(out, cut)
		g.Endpoints = g.Endpoints[:keep]
		if keep == 0 {
			delete(desired, k)
		}
	}
	slices.SortFunc(out, func(a, b Group) int {
		return strings.Compare(GroupKey(a.AddressType, a.Ports), GroupKey(b.AddressType, b.Ports))
	})
	return out
}

// rank orders endpoints for a bound: ready first, then serving, then the
// rest, so that what a bound leaves out is what carries the least traffic.
func rank(ep *discoveryv1.Endpoint) int {
	switch {
	case deref(ep.Conditions.Ready, true):
		return 0
	case deref(ep.Conditions.Serving, true):
		return 1
	}
	return 2
}

// byRank orders endpoints by rank, then address.
func byRank(a, b discoveryv1.Endpoint) int {
	return cmp.Or(cmp.Compare(rank(&a), rank(&b)), CompareAddresses(firstAddress(&a), firstAddress(&b)))
}

// bestRank is the rank of a group's best endpoint.
func bestRank(g *Group) int {
	best := 2
	for i := range g.Endpoints {
		best = min(best, rank(&g.Endpoints[i]))
	}
	return best
}
