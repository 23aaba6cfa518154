package churn

import (
	"context"
	"fmt"
	"slices"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/backendslice/backendslice/controllers/externalbackend"
	"github.com/backendslice/backendslice/internal/sliceplan"
)

// churn is churn-aware placement as the controller runs it by default.
var churn = externalbackend.DefaultChurn()

// Run is one sequence replayed with one seed.
type Run struct {
	// Ours is churn-aware placement on, as the controller runs it.
	Ours Counts
	// Blind is ours with churn-aware placement off: today's planner.
	Blind Counts
	// Upstream has one replay of the seed a repetition: upstream's
	// reconciler is not deterministic, ours is (see Measure).
	Upstream []Counts
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

// Measure replays every sequence, IPv4 and dual-stack, once a seed through
// ours and repetitions times a seed through upstream. Upstream's reconciler
// fills slices in Go's map iteration order, which changes from one replay to
// the next, so one replay of it is one draw; ours is deterministic, which
// Measure checks rather than assumes (see measureRow).
func Measure(ctx context.Context, seeds []uint64, repetitions int) ([]Row, error) {
	var rows []Row
	for _, s := range slices.Concat(realistic, scripts) {
		for _, dual := range []bool{false, true} {
			row, err := measureRow(ctx, s, dual, seeds, repetitions)
			if err != nil {
				return nil, err
			}
			rows = append(rows, row)
		}
	}
	return rows, nil
}

// measureRow replays one sequence in one family with every seed. It replays
// ours a second time with the first seed and fails unless that writes the
// same: only then is one replay of ours a seed the whole truth.
func measureRow(ctx context.Context, s script, dual bool, seeds []uint64, repetitions int) (Row, error) {
	row := Row{Sequence: s.name, Dual: dual}
	for i, seed := range seeds {
		seq := s.sequence(seed)
		where := fmt.Sprintf("%s (%s, seed %d)", s.name, row.Family(), seed)
		run, err := replay(ctx, seq, dual, repetitions)
		if err != nil {
			return Row{}, fmt.Errorf("%s: %w", where, err)
		}
		if i == 0 {
			again, floor, err := replayOurs(ctx, seq, dual, churn)
			if err != nil {
				return Row{}, fmt.Errorf("%s, ours again: %w", where, err)
			}
			if again != run.Ours || floor != run.Floor {
				return Row{}, fmt.Errorf("%s: ours is not deterministic: %+v (floor %d), then %+v (floor %d)",
					where, run.Ours, run.Floor, again, floor)
			}
		}
		row.Syncs = len(seq.Steps)
		row.Runs = append(row.Runs, run)
	}
	return row, nil
}

// replay replays the sequence through ours, counting its writes and the
// floor, and repetitions times through upstream, each time on a fresh
// reconciler and API server.
func replay(ctx context.Context, seq Sequence, dual bool, repetitions int) (Run, error) {
	var run Run
	var err error
	if run.Ours, run.Floor, err = replayOurs(ctx, seq, dual, churn); err != nil {
		return Run{}, fmt.Errorf("ours: %w", err)
	}
	if run.Blind, _, err = replayOurs(ctx, seq, dual, sliceplan.Churn{}); err != nil {
		return Run{}, fmt.Errorf("ours without churn-aware placement: %w", err)
	}
	for k := range repetitions {
		u, err := newUpstream(dual)
		if err != nil {
			return Run{}, err
		}
		c, err := play(ctx, u, seq, nil)
		if err != nil {
			return Run{}, fmt.Errorf("upstream, repetition %d: %w", k+1, err)
		}
		run.Upstream = append(run.Upstream, c)
	}
	return run, nil
}

// replayOurs replays the sequence through ours on a fresh API server and
// returns its writes and the floor, taken from our slices before every step.
func replayOurs(ctx context.Context, seq Sequence, dual bool, c sliceplan.Churn) (Counts, int, error) {
	o := newOurs(dual, c)
	total := 0
	counts, err := play(ctx, o, seq, func(prev, next state) error {
		mine, _, err := o.slices(ctx)
		if err != nil {
			return err
		}
		total += floor(mine, prev, next, dual)
		return nil
	})
	return counts, total, err
}

// play syncs the setup through w uncounted, then every step, and returns
// the writes of the steps. before, unless nil, runs ahead of every step with
// the state the step leaves and the one it syncs.
func play(ctx context.Context, w writer, seq Sequence, before func(prev, next state) error) (Counts, error) {
	var epoch time.Time
	if err := w.sync(ctx, seq.Setup, epoch); err != nil {
		return Counts{}, fmt.Errorf("setup: %w", err)
	}
	if _, err := w.api().take(); err != nil {
		return Counts{}, err
	}
	prev := seq.Setup
	for i, st := range seq.Steps {
		if before != nil {
			if err := before(prev, st); err != nil {
				return Counts{}, fmt.Errorf("step %d: %w", i, err)
			}
		}
		if err := w.sync(ctx, st, epoch.Add(time.Duration(i+1)*seq.Gap)); err != nil {
			return Counts{}, fmt.Errorf("step %d: %w", i, err)
		}
		prev = st
	}
	return w.api().take()
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
