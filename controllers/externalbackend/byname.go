package externalbackend

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// byName is what the controller remembers of each object between
// reconciles, by namespace and name: per backend, the sources' last answers
// and the coalescing window's state; per Service or slice, our last write to
// it. It lives in memory and starts empty after a restart.
type byName[T any] struct {
	mu sync.Mutex
	m  map[types.NamespacedName]T
}

func newByName[T any]() *byName[T] {
	return &byName[T]{m: map[types.NamespacedName]T{}}
}

// get returns what is stored for key, and whether anything is.
func (b *byName[T]) get(key types.NamespacedName) (T, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok := b.m[key]
	return v, ok
}

// set replaces what is stored for key.
func (b *byName[T]) set(key types.NamespacedName, v T) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.m[key] = v
}

// take returns what is stored for key, and whether anything was, and
// forgets it.
func (b *byName[T]) take(key types.NamespacedName) (T, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok := b.m[key]
	delete(b.m, key)
	return v, ok
}

// forget drops key, for an object that is gone.
func (b *byName[T]) forget(key types.NamespacedName) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.m, key)
}
