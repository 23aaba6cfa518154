package churn

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/backendslice/backendslice/internal/coalesce"
)

// flips is a sequence on three serving backends in which each step flips
// the health of the backend it names.
func flips(ids ...int) Sequence {
	cur := backends(0, 3)
	seq := Sequence{Name: "flips", Setup: cur}
	for _, id := range ids {
		next := slices.Clone(cur)
		next[id].serving = !next[id].serving
		seq.Steps = append(seq.Steps, next)
		cur = next
	}
	return seq
}

func TestScheduleAndReplayCoalesced(t *testing.T) {
	const ms = time.Millisecond
	window := coalesce.Window{Quiet: time.Second, Max: 5 * time.Second}
	tests := []struct {
		name   string
		seq    Sequence
		gap    time.Duration
		window coalesce.Window
		// want are the publications, the writes of ours, every step's
		// delay and the steps never written.
		want        []publication
		writes      int
		delays      []time.Duration
		unpublished int
	}{
		{
			name: "window off publishes every change at once",
			seq:  flips(0, 1, 2), gap: 100 * ms,
			want:   []publication{{0, 0}, {100 * ms, 1}, {200 * ms, 2}},
			writes: 3, delays: []time.Duration{0, 0, 0},
		},
		{
			name: "changes faster than the quiet time fold into one write",
			seq:  flips(0, 1, 2), gap: 100 * ms, window: window,
			want:   []publication{{1200 * ms, 2}},
			writes: 1, delays: []time.Duration{1200 * ms, 1100 * ms, time.Second}, unpublished: 2,
		},
		{
			name: "changes slower than the quiet time are each published the quiet time late",
			seq:  flips(0, 1, 2), gap: 2 * time.Second, window: window,
			want:   []publication{{time.Second, 0}, {3 * time.Second, 1}, {5 * time.Second, 2}},
			writes: 3, delays: []time.Duration{time.Second, time.Second, time.Second},
		},
		{
			name: "a change arriving as the quiet time runs out is folded",
			seq:  flips(0, 1, 2), gap: time.Second, window: window,
			want:   []publication{{3 * time.Second, 2}},
			writes: 1, delays: []time.Duration{3 * time.Second, 2 * time.Second, time.Second}, unpublished: 2,
		},
		{
			name: "a flip undone within the window writes nothing",
			seq:  flips(0, 0), gap: 100 * ms, window: window,
			want:   []publication{{100 * ms, 1}},
			writes: 0, delays: []time.Duration{100 * ms, 0}, unpublished: 1,
		},
		{
			name: "a burst that never goes quiet is published at the max",
			// Backend 0 stays down, so no step goes back to the published state.
			seq: flips(0, 1, 2, 1, 2, 1, 2, 1), gap: 100 * ms,
			window: coalesce.Window{Quiet: 300 * ms, Max: 500 * ms},
			want:   []publication{{500 * ms, 5}, {time.Second, 7}},
			writes: 2, delays: []time.Duration{500 * ms, 400 * ms, 300 * ms, 200 * ms, 100 * ms, 0, 400 * ms, 300 * ms},
			unpublished: 6,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			setup, steps := answers(tt.seq, false)
			if got := schedule(tt.window, tt.gap, setup, steps); !slices.Equal(got, tt.want) {
				t.Errorf("publications: got %v, want %v", got, tt.want)
			}
			run, _, err := replayCoalesced(context.Background(), tt.seq, false, tt.window, tt.gap)
			if err != nil {
				t.Fatal(err)
			}
			if run.Ours.Writes() != tt.writes {
				t.Errorf("writes: got %+v, want %d", run.Ours, tt.writes)
			}
			if !slices.Equal(run.Delays, tt.delays) {
				t.Errorf("delays: got %v, want %v", run.Delays, tt.delays)
			}
			if run.Unpublished != tt.unpublished {
				t.Errorf("never published: got %d, want %d", run.Unpublished, tt.unpublished)
			}
		})
	}
}
