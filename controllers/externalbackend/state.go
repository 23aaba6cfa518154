package externalbackend

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/coalesce"
	"github.com/backendslice/backendslice/internal/sliceplan"
)

// backendState is everything this process remembers of one backend
// between passes. It lives in memory and starts empty after a restart.
// Keeping it in one record lets release drop all of it at once: a part
// kept anywhere else would outlive the backend.
type backendState struct {
	// answers holds each source's last answer, by source name.
	answers map[string]lastAnswer
	// drains holds when each draining endpoint started to drain.
	drains []v1alpha1.DrainingEndpoint
	// burst is the coalescing window's state.
	burst coalesce.State
	// churn holds the recent changes of the backend's endpoints, for
	// churn-aware placement. After a restart it is relearned: the slices
	// keep their volatile marks, and nothing moves until it has.
	churn sliceplan.History
	// status is the backend's status as this process last wrote or read
	// it live, nil before either: a cached copy that shows another status
	// may be older than our own last status patch (see load).
	status *statusSeen
	// ledger holds our slice writes the cache has not shown yet.
	ledger sliceLedger
	// contents holds, by slice name, what the metadata-only cache does not
	// show of the backend's slices (slicecontent.go).
	contents map[string]sliceContent
	// echoes are our last writes of the backend's Service and slices,
	// until their watch events come (see writing).
	echoes map[writtenObject]lastWrite
	// recreateAttempts counts the passes in a row that deleted the Service
	// to recreate it, for their backoff (see recreateAfter).
	recreateAttempts int
	// catchUpAt is the slot of the status catch-up held back (see
	// catchup.go), zero when none is.
	catchUpAt time.Time
}

// backendStates holds a backendState per backend. One mutex guards the map
// and every record: a backend's reconcile and the watch predicates that
// look at its record run on different goroutines, and each holds the
// mutex for a few map operations only, never across an API call. The zero
// value is empty and ready to use.
type backendStates struct {
	mu sync.Mutex
	m  map[types.NamespacedName]*backendState
}

// update runs f on key's record, making one if there is none: for a
// reconcile, which keeps what it learnt.
func (s *backendStates) update(key types.NamespacedName, f func(*backendState)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.m[key]
	if !ok {
		if s.m == nil {
			s.m = map[types.NamespacedName]*backendState{}
		}
		b = &backendState{}
		s.m[key] = b
	}
	f(b)
}

// lookup runs f on key's record if there is one, and tells whether there
// was. The watches use it: the events of a backend this process keeps
// nothing of (one already released) must not make a record again.
func (s *backendStates) lookup(key types.NamespacedName, f func(*backendState)) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.m[key]
	if ok {
		f(b)
	}
	return ok
}

// release drops everything kept for key, a backend that is gone.
func (s *backendStates) release(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, key)
}
