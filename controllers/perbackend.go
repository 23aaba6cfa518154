package controllers

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// perBackend is what one reconcile of a backend leaves for the next: the
// sources' last answers, the coalescing window's state. It lives in memory
// and goes when the backend is deleted; after a restart it starts empty.
type perBackend[T any] struct {
	mu        sync.Mutex
	byBackend map[types.NamespacedName]T
}

func newPerBackend[T any]() *perBackend[T] {
	return &perBackend[T]{byBackend: map[types.NamespacedName]T{}}
}

// get returns what was last stored for a backend, or the zero value.
func (p *perBackend[T]) get(backend types.NamespacedName) T {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.byBackend[backend]
}

// set replaces what is stored for a backend.
func (p *perBackend[T]) set(backend types.NamespacedName, v T) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.byBackend[backend] = v
}

// forget drops a deleted backend.
func (p *perBackend[T]) forget(backend types.NamespacedName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.byBackend, backend)
}
