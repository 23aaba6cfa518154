// Package records keeps one record per backend in memory, for the parts
// of the controller that remember something of each backend between
// passes. One mutex guards the map and every record: a backend's reconcile
// and the watch predicates that look at its record run on different
// goroutines, and each holds the mutex for a few map operations only,
// never across an API call.
package records

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// Records holds a T per backend. The zero value is empty and ready to use.
type Records[T any] struct {
	mu sync.Mutex
	m  map[types.NamespacedName]*T
}

// Update runs f on key's record, making an empty one if there is none: for
// a reconcile, which keeps what it learnt.
func (s *Records[T]) Update(key types.NamespacedName, f func(*T)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.m[key]
	if !ok {
		if s.m == nil {
			s.m = map[types.NamespacedName]*T{}
		}
		b = new(T)
		s.m[key] = b
	}
	f(b)
}

// Lookup runs f on key's record if there is one, and tells whether there
// was. The watches use it: the events of a backend nothing is kept of (one
// already released) must not make a record again.
func (s *Records[T]) Lookup(key types.NamespacedName, f func(*T)) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.m[key]
	if ok {
		f(b)
	}
	return ok
}

// Release drops key's record, a backend that is gone.
func (s *Records[T]) Release(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, key)
}

// Len is how many backends have a record.
func (s *Records[T]) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}
