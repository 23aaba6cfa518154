package controllers

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/backendslice/backendslice/providers"
)

// lastKnown remembers each source's last successful answer, per backend, so
// that a source failing for a while keeps publishing exactly what it said,
// with the health it gave, next to sources that still answer.
type lastKnown struct {
	mu        sync.Mutex
	byBackend map[types.NamespacedName]map[string][]providers.Endpoint
}

func newLastKnown() *lastKnown {
	return &lastKnown{byBackend: map[types.NamespacedName]map[string][]providers.Endpoint{}}
}

// get returns the answers last stored for a backend, by source name.
func (k *lastKnown) get(backend types.NamespacedName) map[string][]providers.Endpoint {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.byBackend[backend]
}

// set replaces a backend's answers; sources no longer in the spec go with it.
func (k *lastKnown) set(backend types.NamespacedName, answers map[string][]providers.Endpoint) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.byBackend[backend] = answers
}

// forget drops a deleted backend.
func (k *lastKnown) forget(backend types.NamespacedName) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.byBackend, backend)
}
