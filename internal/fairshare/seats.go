package fairshare

import "cmp"

// DefaultSeatFloor is the share of a seat budget below which no namespace
// is held: with many namespaces holding seats, the fair share of each
// (the budget divided between them) may fall below what one backend with
// a handful of sources needs.
const DefaultSeatFloor = 10

// Seats divides a budget of seats held for long (watches: each an open
// long-poll to a Consul agent or a plugin) between the namespaces that
// hold them, as the API server's Priority and Fairness lends seats: a
// namespace alone may hold every seat; once others hold seats too, each
// may hold at most its share, the budget divided by the namespaces
// holding seats, and never less than the floor. A namespace under its
// share that finds the budget full takes a seat back from the namespace
// most over its share (the caller gives up one of that namespace's
// watches); a namespace at its share is refused, and never takes a seat
// another namespace holds.
//
// Seats is not safe for concurrent use: its owner's lock guards it.
type Seats struct {
	// limit is the budget's size, floor the least share.
	limit, floor int
	held         map[string]int
	total        int
}

// NewSeats returns a budget of limit seats whose shares do not fall
// below floor (0 for none).
func NewSeats(limit, floor int) *Seats {
	return &Seats{limit: max(limit, 1), floor: max(floor, 1), held: map[string]int{}}
}

// Verdict is what Ask says of a namespace's request for one more seat.
type Verdict int

// Verdicts of Ask.
const (
	// Granted: a seat is free within the namespace's share; Take it.
	Granted Verdict = iota + 1
	// Reclaim: the budget is full and the namespace is under its share;
	// free one seat of the namespace Ask names (which is over its share),
	// then Take.
	Reclaim
	// OverShare: the namespace holds its share already while other
	// namespaces hold seats.
	OverShare
	// Full: every seat is held and no namespace holds more than its share.
	Full
)

// Answer is Ask's answer.
type Answer struct {
	Verdict Verdict
	// From is the namespace to take a seat back from (Reclaim).
	From string
	// Share is the requesting namespace's share, Held what it holds, and
	// Holders how many namespaces the share divides the budget between
	// (the requester counted).
	Share, Held, Holders int
}

// Ask says whether namespace ns may take one more seat.
func (s *Seats) Ask(ns string) Answer {
	holders := len(s.held)
	if s.held[ns] == 0 {
		holders++
	}
	share := s.shareAmong(holders)
	a := Answer{Share: share, Held: s.held[ns], Holders: holders}
	switch {
	case s.held[ns] >= share:
		a.Verdict = OverShare
	case s.total < s.limit:
		a.Verdict = Granted
	default:
		a.Verdict = Full
		if from, ok := s.mostOver(share); ok {
			a.Verdict, a.From = Reclaim, from
		}
	}
	return a
}

// shareAmong is each namespace's share when holders namespaces hold seats:
// the whole budget for one, else an equal part of it, never less than the
// floor.
func (s *Seats) shareAmong(holders int) int {
	if holders <= 1 {
		return s.limit
	}
	return min(max(s.limit/holders, s.floor), s.limit)
}

// mostOver is the namespace holding the most seats past share (the first
// by name among equals), if any holds more than share.
func (s *Seats) mostOver(share int) (string, bool) {
	var from string
	most := share
	for ns, n := range s.held {
		if n > most || (n == most && n > share && cmp.Less(ns, from)) {
			from, most = ns, n
		}
	}
	return from, most > share
}

// Take gives ns one seat, whatever Ask said: a watch changing hands
// between namespaces is taken by its new holder before its old one
// releases it, and is never refused.
func (s *Seats) Take(ns string) {
	s.held[ns]++
	s.total++
}

// Release gives back one seat of ns.
func (s *Seats) Release(ns string) {
	if s.held[ns] == 0 {
		return
	}
	s.total--
	if s.held[ns]--; s.held[ns] == 0 {
		delete(s.held, ns)
	}
}

// Held is how many seats ns holds.
func (s *Seats) Held(ns string) int { return s.held[ns] }

// Total is how many seats are held.
func (s *Seats) Total() int { return s.total }

// Limit is the budget's size.
func (s *Seats) Limit() int { return s.limit }
