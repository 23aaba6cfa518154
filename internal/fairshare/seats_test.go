package fairshare

import "testing"

func TestSeatsAsk(t *testing.T) {
	for _, c := range []struct {
		name         string
		limit, floor int
		held         map[string]int
		ask          string
		want         Answer
	}{
		{name: "alone, the whole budget", limit: 150, floor: 10, held: map[string]int{"a": 149}, ask: "a",
			want: Answer{Verdict: Granted, Share: 150, Held: 149, Holders: 1}},
		{name: "alone at the limit", limit: 150, floor: 10, held: map[string]int{"a": 150}, ask: "a",
			want: Answer{Verdict: OverShare, Share: 150, Held: 150, Holders: 1}},
		{name: "a newcomer takes a seat back from the namespace that filled the budget", limit: 150, floor: 10,
			held: map[string]int{"a": 150}, ask: "b",
			want: Answer{Verdict: Reclaim, From: "a", Share: 75, Holders: 2}},
		{name: "a newcomer with seats free", limit: 150, floor: 10, held: map[string]int{"a": 100}, ask: "b",
			want: Answer{Verdict: Granted, Share: 75, Holders: 2}},
		{name: "over its share while another holds seats", limit: 150, floor: 10,
			held: map[string]int{"a": 100, "b": 1}, ask: "a",
			want: Answer{Verdict: OverShare, Share: 75, Held: 100, Holders: 2}},
		{name: "at its share, seats free", limit: 150, floor: 10,
			held: map[string]int{"a": 75, "b": 1}, ask: "a",
			want: Answer{Verdict: OverShare, Share: 75, Held: 75, Holders: 2}},
		{name: "the most over its share gives a seat back", limit: 30, floor: 1,
			held: map[string]int{"a": 12, "b": 14, "c": 4}, ask: "c",
			want: Answer{Verdict: Reclaim, From: "b", Share: 10, Held: 4, Holders: 3}},
		{name: "equals: the first by name gives", limit: 30, floor: 1,
			held: map[string]int{"b": 13, "a": 13, "c": 4}, ask: "c",
			want: Answer{Verdict: Reclaim, From: "a", Share: 10, Held: 4, Holders: 3}},
		{name: "full, nobody over its share", limit: 30, floor: 10,
			held: map[string]int{"a": 10, "b": 10, "c": 10}, ask: "d",
			want: Answer{Verdict: Full, Share: 10, Holders: 4}},
		{name: "the floor holds shares up", limit: 30, floor: 10,
			held: map[string]int{"a": 9, "b": 5, "c": 5}, ask: "a",
			want: Answer{Verdict: Granted, Share: 10, Held: 9, Holders: 3}},
		{name: "no share above the limit", limit: 5, floor: 10,
			held: map[string]int{"a": 4, "b": 1}, ask: "a",
			want: Answer{Verdict: Full, Share: 5, Held: 4, Holders: 2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := NewSeats(c.limit, c.floor)
			for ns, n := range c.held {
				for range n {
					s.Take(ns)
				}
			}
			if got := s.Ask(c.ask); got != c.want {
				t.Errorf("Ask(%q) = %+v, want %+v", c.ask, got, c.want)
			}
		})
	}
}

func TestSeatsTakeAndRelease(t *testing.T) {
	s := NewSeats(3, 1)
	s.Take("a")
	s.Take("a")
	s.Take("b")
	s.Release("a")
	s.Release("c")
	if s.Total() != 2 || s.Held("a") != 1 || s.Held("b") != 1 || s.Held("c") != 0 {
		t.Fatalf("after taking 3 and releasing 1: total %d, a %d, b %d, c %d", s.Total(), s.Held("a"), s.Held("b"), s.Held("c"))
	}
	s.Release("a")
	s.Release("b")
	if s.Total() != 0 || len(s.held) != 0 {
		t.Errorf("all released: total %d, %d namespaces kept", s.Total(), len(s.held))
	}
	if got := s.Ask("a"); got.Verdict != Granted || got.Share != 3 {
		t.Errorf("an empty budget: Ask = %+v, want the whole budget granted", got)
	}
}
