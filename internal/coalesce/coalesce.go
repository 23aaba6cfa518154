// Package coalesce folds bursts of endpoint changes into one write. A
// backend whose providers keep changing their answer (a Consul check that
// flaps, a rolling restart seen through DNS) is published once its answer
// has been quiet for a while, or at the latest a fixed time after the first
// change of the burst, instead of at every change. A change that is undone
// within the window is never written at all.
//
// The window only holds changes that come from providers. A spec change, a
// backend seen for the first time (after a restart too) and a retry after a
// failed write are published at once.
package coalesce

import (
	"fmt"
	"time"
)

// Window is how long changes are held.
type Window struct {
	// Quiet is how long the answer must stay the same before it is
	// published; zero turns coalescing off.
	Quiet time.Duration
	// Max is the longest a change is held, however often the answer keeps
	// changing.
	Max time.Duration
}

// Enabled tells whether the window holds anything.
func (w Window) Enabled() bool { return w.Quiet > 0 }

// Validate checks the window as the controller's flags set it.
func (w Window) Validate() error {
	switch {
	case w.Quiet < 0:
		return fmt.Errorf("--coalesce-quiet=%s: must not be negative (0 turns coalescing off)", w.Quiet)
	case w.Enabled() && w.Max < w.Quiet:
		return fmt.Errorf("--coalesce-max=%s: must be at least --coalesce-quiet=%s", w.Max, w.Quiet)
	}
	return nil
}

// State is what the window remembers of one backend between reconciles.
type State struct {
	// published is the fingerprint of the answer last let through.
	published uint64
	// known is false until an answer was let through.
	known bool
	// pending is the fingerprint of the answer being held, if holding.
	pending uint64
	holding bool
	// first and last are when the burst's first and latest change were seen.
	first, last time.Time
}

// Decision is what to do with the answer of one reconcile.
type Decision struct {
	// Publish is true when the answer is to be written now.
	Publish bool
	// Wait is how long until a held answer is due, when Publish is false.
	Wait time.Duration
}

// Decide looks at the answer a reconcile found, by its fingerprint, at time
// now; force says the answer must go out at once (the spec changed). It
// updates s for the next reconcile.
func (w Window) Decide(s *State, fingerprint uint64, now time.Time, force bool) Decision {
	if !w.Enabled() || force || !s.known || fingerprint == s.published {
		// Nothing new from the providers (or nothing to wait for): let the
		// reconcile run, so that drift and failed writes are repaired now.
		s.publish(fingerprint)
		return Decision{Publish: true}
	}
	switch {
	case !s.holding:
		s.holding, s.pending, s.first, s.last = true, fingerprint, now, now
	case fingerprint != s.pending:
		s.pending, s.last = fingerprint, now
	}
	due := s.last.Add(w.Quiet)
	if latest := s.first.Add(w.Max); latest.Before(due) {
		due = latest
	}
	if !now.Before(due) {
		s.publish(fingerprint)
		return Decision{Publish: true}
	}
	return Decision{Wait: due.Sub(now)}
}

// publish records that the answer went out and ends any burst.
func (s *State) publish(fingerprint uint64) {
	*s = State{published: fingerprint, known: true}
}
