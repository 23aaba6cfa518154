package externalbackend

import (
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/backendslice/backendslice/internal/decide"
	"github.com/backendslice/backendslice/internal/records"
	"github.com/backendslice/backendslice/internal/sliceplan"
)

// backendState is the backend's own memory between passes: what its
// sources said, its drains, its coalescing window, its churn, its Service
// recreations and its held status catch-up. It lives in memory and starts
// empty after a restart. What this process knows of the cache's view of
// the backend is the slice store's (internal/slicestore); release drops
// both. Keeping the memory in one record lets release drop all of it at
// once: a part kept anywhere else would outlive the backend.
type backendState struct {
	// answers holds each source's last answer, by source name.
	answers map[string]lastAnswer
	// memory is what the decision remembers: when each draining endpoint
	// started to drain, and the coalescing window's state. A pass keeps
	// what it decided only once its writes succeeded (see sync).
	memory decide.Memory
	// churn holds the recent changes of the backend's endpoints, for
	// churn-aware placement. After a restart it is relearned: the slices
	// keep their volatile marks, and nothing moves until it has.
	churn sliceplan.History
	// recreateAttempts counts the passes in a row that deleted the Service
	// to recreate it, for their backoff (see recreateAfter).
	recreateAttempts int
	// catchUpAt is the slot of the status catch-up held back (see
	// catchup.go), zero when none is.
	catchUpAt time.Time
}

// backendStates holds a backendState per backend (records.Records): the
// reconciles of different backends run at once.
type backendStates struct{ records.Records[backendState] }

// update runs f on key's record, making one if there is none: for a
// reconcile, which keeps what it learnt.
func (s *backendStates) update(key types.NamespacedName, f func(*backendState)) { s.Update(key, f) }

// lookup runs f on key's record if there is one: for a step that only
// reads what an earlier pass kept.
func (s *backendStates) lookup(key types.NamespacedName, f func(*backendState)) bool {
	return s.Lookup(key, f)
}

// remember keeps mem, the decision's memory of a pass whose writes
// succeeded, for backend key.
func (s *backendStates) remember(key types.NamespacedName, mem decide.Memory) {
	s.update(key, func(b *backendState) { b.memory = mem })
}

// release drops everything kept for key, a backend that is gone.
func (s *backendStates) release(key types.NamespacedName) { s.Release(key) }
