package sliceplan

import (
	"cmp"
	"maps"
	"slices"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/sets"
)

// Churn-aware placement. Every change to a slice is sent whole to every
// watcher (each node's kube-proxy, each mesh sidecar). A few sick instances
// spread over full slices make every flip a full-slice write, one per slice
// they sit in. Gathered in a small slice of their own, their flips become
// one small write.
//
// The rules, and how the planner keeps them:
//   - No delays: placement only chooses where an endpoint goes, never
//     whether its change is written now.
//   - Cheap moves: an endpoint leaves a slice only when that slice is
//     written anyway, and joins a volatile slice that is written anyway, with
//     two exceptions that each cost one write: a new (or quiet) volatile
//     slice takes volatile endpoints whose changes alone, in this pass,
//     write at least two other slices while most stable slices are quiet,
//     a cost the next change they share repays (gatherPays); or it takes
//     new volatile endpoints that no slice written anyway has room for,
//     where it replaces the write that would place them.
//   - Never more writes than without it, storms included: while nearly
//     every stable slice is written anyway (a rolling replacement), a
//     volatile slice would be a write of its own at every flip, where the
//     same endpoints in stable slices ride along. So no volatile slice is
//     made then, and one written anyway is deleted instead, its endpoints
//     back in the stable slices written anyway (disband).
//   - Deterministic: volatility is an input (Input.Volatile), and the
//     volatile slices are marked (VolatileAnnotation), so the same input
//     gives the same plan.
//   - Recoverable: the mark lives on the slice, so after a restart the
//     volatile slices stay what they are, and their endpoints stay in them
//     (nothing moves except in writes made anyway). Which endpoints are
//     volatile is relearned from their next changes (Churn), with no extra
//     write.
//   - Bounded: at most maxVolatileSlices volatile slices per group, each at
//     most volatileSize endpoints, within Input.MaxSlices.

const (
	// VolatileAnnotation marks a slice of endpoints that change often; it
	// tells the planner, and a reader, why the slice is small.
	VolatileAnnotation = "backendslice.io/placement"
	// VolatileValue is the value of VolatileAnnotation.
	VolatileValue = "volatile"
	// maxVolatileSlices bounds the volatile slices of one group: past them,
	// volatile endpoints stay where they are, as without churn-aware
	// placement.
	maxVolatileSlices = 3
)

// volatileSize is how many endpoints a volatile slice takes: a tenth of the
// limit, so that a flip sends a tenth of a full slice or less.
func volatileSize(limit int) int { return max(1, limit/10) }

// isVolatile tells whether a slice carries the volatile mark.
func isVolatile(s *discoveryv1.EndpointSlice) bool {
	return s.Annotations[VolatileAnnotation] == VolatileValue
}

// disband deletes the volatile slices written anyway while nearly every
// stable slice is written anyway too (a rolling replacement, a zone going
// down), and returns their endpoints to rest, so that the stable slices
// written anyway take them, when those have room for them and for rest. A
// volatile slice pays only while the stable slices are quiet: in such a
// pass each flip of its endpoints writes it, where the same endpoints in
// stable slices would ride along in writes made anyway. The delete takes
// the place of the volatile slice's own write, so it costs nothing; should
// the flapping outlast the storm, gather makes a volatile slice again when
// that pays.
func disband(drafts []*draft, rest []*discoveryv1.Endpoint, limit int) []*discoveryv1.Endpoint {
	stable, quiet := quietShare(drafts)
	room := -len(rest)
	for _, d := range drafts {
		if !d.volatile && !d.retired && d.dirty && len(d.eps) > 0 {
			room += max(0, limit-len(d.eps))
		}
	}
	for _, d := range drafts {
		// Left in place, the volatile slice's endpoints would write it at
		// their next flip; in stable slices they write only those of their
		// slices that are quiet: fewer than one when
		// len(d.eps) × quiet/stable < 1.
		if !d.volatile || !d.dirty || d.retired || len(d.eps) == 0 || len(d.eps)*quiet >= stable || len(d.eps) > room {
			continue
		}
		room -= len(d.eps)
		rest = append(rest, d.eps...)
		d.eps, d.retired = nil, true
	}
	return rest
}

// mover is a volatile endpoint that may move into a volatile slice: from a
// slice written anyway (from), or from rest (from == nil).
type mover struct {
	ep   *discoveryv1.Endpoint
	from *draft
}

// gather moves volatile endpoints into volatile slices where the rules
// above allow, and returns the drafts (with any volatile slice to create)
// and what is left to place.
func gather(drafts []*draft, rest []*discoveryv1.Endpoint, volatile sets.Set[string], limit, budget int) ([]*draft, []*discoveryv1.Endpoint) {
	size := volatileSize(limit)
	movers, stableRoom, newVolatile := collectMovers(drafts, rest, volatile, limit)
	if len(movers) == 0 {
		return drafts, rest
	}
	placed := map[*discoveryv1.Endpoint]bool{}
	take := func(d *draft) {
		for _, m := range movers {
			if len(d.eps) >= size {
				return
			}
			if !placed[m.ep] {
				d.eps = append(d.eps, m.ep)
				placed[m.ep] = true
			}
		}
	}
	// Volatile slices written anyway take what they have room for, the
	// fullest first, for nothing.
	for _, d := range writtenVolatile(drafts, size) {
		take(d)
	}
	// One more volatile slice, at the cost of one write, where it pays.
	if d := extraVolatile(drafts, movers, placed, size, budget, newVolatile == len(rest) && len(rest) > stableRoom && len(rest) <= size); d != nil {
		if d.old == nil {
			drafts = append(drafts, d)
		}
		d.dirty = true
		take(d)
	}
	if len(placed) == 0 {
		return drafts, rest
	}
	for _, d := range drafts {
		if !d.volatile && d.dirty {
			d.eps = slices.DeleteFunc(d.eps, func(ep *discoveryv1.Endpoint) bool { return placed[ep] })
		}
	}
	return drafts, slices.DeleteFunc(rest, func(ep *discoveryv1.Endpoint) bool { return placed[ep] })
}

// collectMovers lists the volatile endpoints that may move: those in
// stable slices written anyway, then those not placed yet (rest). It also
// returns the room the stable slices written anyway have, and how many
// movers come from rest.
func collectMovers(drafts []*draft, rest []*discoveryv1.Endpoint, volatile sets.Set[string], limit int) (movers []mover, stableRoom, fromRest int) {
	for _, d := range drafts {
		if d.volatile || d.retired || !d.dirty {
			continue
		}
		for _, ep := range d.eps {
			if volatile.Has(firstAddress(ep)) {
				movers = append(movers, mover{ep: ep, from: d})
			}
		}
		stableRoom += max(0, limit-len(d.eps))
	}
	for _, ep := range rest {
		if volatile.Has(firstAddress(ep)) {
			movers = append(movers, mover{ep: ep})
			fromRest++
		}
	}
	return movers, stableRoom, fromRest
}

// writtenVolatile returns the volatile slices that are written anyway and
// have room, the fullest first.
func writtenVolatile(drafts []*draft, size int) []*draft {
	var targets []*draft
	for _, d := range drafts {
		if d.volatile && d.dirty && !d.retired && len(d.eps) > 0 && len(d.eps) < size {
			targets = append(targets, d)
		}
	}
	slices.SortStableFunc(targets, func(a, b *draft) int { return cmp.Compare(len(b.eps), len(a.eps)) })
	return targets
}

// extraVolatile picks the volatile slice that takes the movers not placed
// yet at the cost of one write, or nil when that write does not pay. It
// pays when replacesPlacement says the slice takes the place of a write
// that would place new endpoints anyway, or when the movers' next shared
// change would otherwise write two or more slices (gatherPays). A quiet
// volatile slice with room goes first, the fullest; otherwise a new one,
// within the bounds.
func extraVolatile(drafts []*draft, movers []mover, placed map[*discoveryv1.Endpoint]bool, size, budget int, replacesPlacement bool) *draft {
	if len(placed) == len(movers) || (!replacesPlacement && !gatherPays(drafts, movers, placed)) {
		return nil
	}
	var best *draft
	count := 0
	for _, d := range drafts {
		if !d.volatile || d.retired || len(d.eps) == 0 {
			continue
		}
		count++
		if !d.dirty && len(d.eps) < size && (best == nil || len(d.eps) > len(best.eps)) {
			best = d
		}
	}
	switch {
	case best != nil:
		return best
	case count >= maxVolatileSlices || (budget > 0 && live(drafts) >= budget):
		return nil
	}
	return &draft{volatile: true}
}

// gatherPays tells whether gathering the movers not placed yet in one
// volatile slice saves writes later. Left where they are, their next shared
// change writes each slice holding them that is not written anyway. Two
// readings of how many that is must both say at least two:
//   - in this pass, the slices holding them that are written only because
//     volatile endpoints in them changed (churnOnly);
//   - the slices holding them, times the share of stable slices not written
//     for other changes in this pass. In a rolling replacement nearly every
//     slice is written anyway: a pass in which two of the movers' slices
//     happen to escape it says little, and a volatile slice there would be
//     one write more at every flip.
func gatherPays(drafts []*draft, movers []mover, placed map[*discoveryv1.Endpoint]bool) bool {
	holders, churnOnly := map[*draft]bool{}, 0
	for _, m := range movers {
		if placed[m.ep] || m.from == nil || holders[m.from] {
			continue
		}
		holders[m.from] = true
		if m.from.churnOnly {
			churnOnly++
		}
	}
	stable, quiet := quietShare(drafts)
	return churnOnly >= 2 && len(holders)*quiet >= 2*stable
}

// quietShare counts the group's existing stable slices, and the quiet ones
// among them: those not written in this pass for a change other than a
// volatile endpoint's. quiet/stable is how likely a stable slice is to be
// left alone by the changes other than flips; a rolling replacement takes
// it near zero.
func quietShare(drafts []*draft) (stable, quiet int) {
	for _, d := range drafts {
		if d.volatile || d.retired || d.old == nil {
			continue
		}
		stable++
		if !d.dirty || d.churnOnly {
			quiet++
		}
	}
	return stable, quiet
}

// Changed returns the addresses whose endpoint the plan for in would add,
// change or remove: every desired endpoint that no existing slice publishes
// as it is, and every endpoint the existing slices publish that is not
// desired. It is what Churn counts as a change. The addresses come sorted.
func Changed(in Input) []string {
	want := map[string]map[string]*discoveryv1.Endpoint{}
	for key, g := range desiredGroups(in.Desired) {
		want[key] = make(map[string]*discoveryv1.Endpoint, len(g.Endpoints))
		for i := range g.Endpoints {
			want[key][firstAddress(&g.Endpoints[i])] = &g.Endpoints[i]
		}
	}
	out := sets.New[string]()
	published := map[string]sets.Set[string]{}
	for i := range in.Existing {
		s := &in.Existing[i]
		key := GroupKey(s.AddressType, s.Ports)
		if published[key] == nil {
			published[key] = sets.New[string]()
		}
		for j := range s.Endpoints {
			have := &s.Endpoints[j]
			addr := firstAddress(have)
			published[key].Insert(addr)
			if ep, ok := want[key][addr]; !ok || !sameEndpoint(ep, have) {
				out.Insert(addr)
			}
		}
	}
	for key, eps := range want {
		for addr := range eps {
			if !published[key].Has(addr) {
				out.Insert(addr)
			}
		}
	}
	return sets.List(out)
}

// Churn tells which endpoints are volatile: those that changed at least
// Often times within the last Window. It keeps at most Most addresses per
// backend (those changed last), so a backend whose every address churns
// costs bounded memory.
type Churn struct {
	// Window is how far back changes count; 0 turns churn-aware placement
	// off.
	Window time.Duration
	// Often is how many changes within the window make an endpoint
	// volatile.
	Often int
	// Most is how many addresses one backend's history keeps.
	Most int
}

// History is one backend's recent changes: per address, the times of its
// last changes, at most Churn.Often of them, oldest first. The zero value
// is empty; a restart starts from it.
type History map[string][]time.Time

// Observe returns the history with the changes of addresses at now added,
// and what fell out of the window dropped. It leaves h alone, so that a
// caller can keep h until the changes are written.
func (c Churn) Observe(h History, changed []string, now time.Time) History {
	if c.Window <= 0 {
		return nil
	}
	out := make(History, len(h)+len(changed))
	for addr, times := range h {
		if kept := recent(times, now.Add(-c.Window)); len(kept) > 0 {
			out[addr] = kept
		}
	}
	for _, addr := range changed {
		times := append(slices.Clone(out[addr]), now)
		out[addr] = times[max(0, len(times)-c.Often):]
	}
	if over := len(out) - c.Most; c.Most > 0 && over > 0 {
		// Forget the addresses whose last change is oldest, by address on a tie.
		byAge := slices.SortedFunc(maps.Keys(out), func(a, b string) int {
			return cmp.Or(out[a][len(out[a])-1].Compare(out[b][len(out[b])-1]), cmp.Compare(a, b))
		})
		for _, addr := range byAge[:over] {
			delete(out, addr)
		}
	}
	return out
}

// Volatile is the set of addresses of h that changed at least Often times
// within the window before now; nil when none did.
func (c Churn) Volatile(h History, now time.Time) sets.Set[string] {
	var out sets.Set[string]
	for addr, times := range h {
		if c.Often > 0 && len(recent(times, now.Add(-c.Window))) >= c.Often {
			if out == nil {
				out = sets.New[string]()
			}
			out.Insert(addr)
		}
	}
	return out
}

// recent is the times after since, a clone.
func recent(times []time.Time, since time.Time) []time.Time {
	i, _ := slices.BinarySearchFunc(times, since, func(t, s time.Time) int {
		if t.After(s) {
			return 1
		}
		return -1
	})
	return slices.Clone(times[i:])
}
