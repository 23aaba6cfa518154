package churn

import (
	"strings"
	"testing"
)

// updates is a run's counts of n updates.
func updates(n int) Counts { return Counts{Updates: n} }

func TestUpstreamOverRepetitions(t *testing.T) {
	// Two seeds, three repetitions: the repetitions' means over the seeds
	// are 11, 13 and 12; upstream's mean is 12, its worst run 14.
	upstream := [][]Counts{
		{updates(10), updates(14), updates(12)},
		{updates(12), updates(12), updates(12)},
	}
	tests := []struct {
		name string
		// ours are the writes of ours with each seed.
		ours []int
		// want is the verdict in Worse, "" when the row is not listed.
		want   string
		within bool
	}{
		{name: "ours writes fewer", ours: []int{10, 10}, within: true},
		{name: "ours writes more, by less than the spread", ours: []int{12, 14}, want: "+1.0, within upstream's spread of 2.0 (11.0–13.0): no difference", within: true},
		{name: "ours writes more, by the spread", ours: []int{14, 14}, want: "+2.0, within", within: true},
		{name: "ours writes more, beyond the spread", ours: []int{14, 16}, want: "+3.0, beyond upstream's spread of 2.0 (11.0–13.0)"},
		{name: "ours writes less, but more on its worst seed", ours: []int{15, 5}, want: "-2.0, within", within: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			row := Row{Sequence: "s"}
			for i, n := range tt.ours {
				// Without churn-aware placement, the same writes: this
				// test is of the comparison with upstream.
				row.Runs = append(row.Runs, Run{Ours: updates(n), Blind: updates(n), Upstream: upstream[i]})
			}
			if u := row.Upstream(); u.Mean.Writes != 12 || u.Mean.Updates != 12 || u.Worst != 14 {
				t.Errorf("upstream: got mean %v, worst %d; want 12 updates, worst 14", u.Mean, u.Worst)
			}
			if lowest, highest := row.Spread(); lowest != 11 || highest != 13 {
				t.Errorf("spread: got %v-%v, want 11-13", lowest, highest)
			}
			if got := row.WithinSpread(); got != tt.within {
				t.Errorf("within spread: got %v, want %v", got, tt.within)
			}
			worse := Worse([]Row{row})
			switch {
			case tt.want == "" && len(worse) > 0:
				t.Errorf("Worse: got %q, want nothing", worse)
			case tt.want != "" && (len(worse) != 1 || !strings.Contains(worse[0], tt.want)):
				t.Errorf("Worse: got %q, want one sentence with %q", worse, tt.want)
			}
		})
	}
}

func TestChurnAwareOverToday(t *testing.T) {
	// Upstream writes more than both, so that only the comparison of ours
	// with today's planner (Blind) can list the row.
	many := []Counts{updates(50)}
	tests := []struct {
		name        string
		ours, blind []int
		want        []string
	}{
		{name: "fewer on every seed", ours: []int{3, 4}, blind: []int{10, 10}},
		{name: "equal", ours: []int{10, 10}, blind: []int{10, 10}},
		{name: "more on one seed, fewer on the mean", ours: []int{11, 2}, blind: []int{10, 10},
			want: []string{"churn-aware placement writes 11, without it 10, on a seed"}},
		{name: "more on the mean", ours: []int{11, 11}, blind: []int{10, 10},
			want: []string{"writes 11, without it 10", "writes 11, without it 10", "ours 11.0 writes, without churn-aware placement 10.0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			row := Row{Sequence: "s"}
			for i := range tt.ours {
				row.Runs = append(row.Runs, Run{Ours: updates(tt.ours[i]), Blind: updates(tt.blind[i]), Upstream: many})
			}
			worse := Worse([]Row{row})
			if len(worse) != len(tt.want) {
				t.Fatalf("Worse: got %q, want %d sentences with %q", worse, len(tt.want), tt.want)
			}
			for i, w := range tt.want {
				if !strings.Contains(worse[i], w) {
					t.Errorf("Worse[%d]: got %q, want it to contain %q", i, worse[i], w)
				}
			}
		})
	}
}

func TestStatsOfEqualRunsHaveTheirCountsAsMean(t *testing.T) {
	// Fifteen runs, as five seeds of three repetitions: added up as
	// fifteenths, the mean of 20 would come out a hair off 20, and a row
	// where both writers write 20 would read as ours writing more.
	runs := make([]Counts, 15)
	for i := range runs {
		runs[i] = Counts{Creates: 9, Updates: 11, Bytes: 333}
	}
	s := stats(runs, func(c Counts) Counts { return c })
	if s.Mean.Writes != 20 || s.Mean.Creates != 9 || s.Mean.Updates != 11 || s.Mean.Bytes != 333 || s.Worst != 20 {
		t.Errorf("got mean %+v, worst %d; want 9 creates, 11 updates, 20 writes, 333 bytes, worst 20", s.Mean, s.Worst)
	}
}
