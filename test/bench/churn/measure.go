package churn

import (
	"context"
	"fmt"

	discoveryv1 "k8s.io/api/discovery/v1"
)

// Run is one sequence replayed with one seed.
type Run struct {
	Ours, Upstream Counts
	// Floor is the sum over the syncs of the fewest writes that could have
	// made each change, starting from our slices.
	Floor int
}

// Row is one sequence and address family, over all seeds.
type Row struct {
	Sequence string
	Dual     bool
	Syncs    int
	Runs     []Run
}

// Family names the row's address families.
func (r Row) Family() string {
	if r.Dual {
		return "dual-stack"
	}
	return "IPv4"
}

// Measure replays every sequence, IPv4 and dual-stack, once a seed.
func Measure(ctx context.Context, seeds []uint64) ([]Row, error) {
	var rows []Row
	for _, s := range scripts {
		for _, dual := range []bool{false, true} {
			row := Row{Sequence: s.name, Dual: dual}
			for _, seed := range seeds {
				seq := s.sequence(seed)
				run, err := replay(ctx, seq, dual)
				if err != nil {
					return nil, fmt.Errorf("%s (%s, seed %d): %w", s.name, row.Family(), seed, err)
				}
				row.Syncs = len(seq.Steps)
				row.Runs = append(row.Runs, run)
			}
			rows = append(rows, row)
		}
	}
	return rows, nil
}

// replay syncs the setup through both writers uncounted, then every step,
// counting the writes and the floor.
func replay(ctx context.Context, seq Sequence, dual bool) (Run, error) {
	o := newOurs(dual)
	u, err := newUpstream(dual)
	if err != nil {
		return Run{}, err
	}
	writers := []writer{o, u}
	for _, w := range writers {
		if err := w.sync(ctx, seq.Setup); err != nil {
			return Run{}, fmt.Errorf("setup: %w", err)
		}
		if _, err := w.api().take(); err != nil {
			return Run{}, err
		}
	}
	var run Run
	prev := seq.Setup
	for i, st := range seq.Steps {
		mine, _, err := o.slices(ctx)
		if err != nil {
			return Run{}, err
		}
		run.Floor += floor(mine, prev, st, dual)
		for _, w := range writers {
			if err := w.sync(ctx, st); err != nil {
				return Run{}, fmt.Errorf("step %d: %w", i, err)
			}
		}
		prev = st
	}
	if run.Ours, err = o.api().take(); err != nil {
		return Run{}, err
	}
	if run.Upstream, err = u.api().take(); err != nil {
		return Run{}, err
	}
	return run, nil
}

// floor is the fewest writes that take the slices from publishing prev to
// publishing next: every slice holding a changed or removed endpoint is
// written once, and added endpoints that do not fit in the room those
// slices have left need a write for every perSlice of them.
func floor(sl []discoveryv1.EndpointSlice, prev, next state, dual bool) int {
	after := map[int]backend{}
	for _, b := range next {
		after[b.id] = b
	}
	changed := map[string]bool{}
	added := map[discoveryv1.AddressType]int{}
	before := map[int]bool{}
	for _, b := range prev {
		before[b.id] = true
		if a, ok := after[b.id]; !ok || a != b {
			for _, fa := range addresses(b.id, dual) {
				changed[fa.address] = !ok
			}
		}
	}
	for _, b := range next {
		if !before[b.id] {
			for _, fa := range addresses(b.id, dual) {
				added[fa.family]++
			}
		}
	}
	writes := 0
	room := map[discoveryv1.AddressType]int{}
	for _, s := range sl {
		touched, kept := false, 0
		for _, ep := range s.Endpoints {
			removed, hit := changed[ep.Addresses[0]]
			touched = touched || hit
			if !removed {
				kept++
			}
		}
		if touched {
			writes++
			room[s.AddressType] += perSlice - kept
		}
	}
	for family, n := range added {
		writes += (max(0, n-room[family]) + perSlice - 1) / perSlice
	}
	return writes
}
