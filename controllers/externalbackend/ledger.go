package externalbackend

import (
	"sync"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// sliceLedger tells whether the cache shows every slice of a backend that
// can hold one of its endpoints, so that a pass placing endpoints reads the
// slices past the cache only when it may not. It remembers, per backend,
// the generation of each slice this process last wrote (or that it deleted
// it) until the cache shows that write, as Kubernetes' own EndpointSlice
// controller tracks the generations it wrote.
//
// That is enough only while this process is the one writer of our slices
// (leader election): another instance's writes are in no ledger. A backend
// is trusted only once a list past the cache, or creating its Service,
// showed all of its slices, and trusted no longer when a slice of its leaves
// the cache without our delete (someone stripped our label: the slice
// still publishes its endpoints, but the cache no longer shows it) or the
// process restarts.
type sliceLedger struct {
	mu       sync.Mutex
	backends map[types.NamespacedName]*ledgerEntry
}

// ledgerEntry is what the ledger knows of one backend's slices.
type ledgerEntry struct {
	trusted bool
	// pending holds, by slice name, our writes the cache has not shown yet.
	pending map[string]sliceWrite
}

// sliceWrite is one write of a slice: the slice's UID and the generation
// the write gave it, or that it deleted it.
type sliceWrite struct {
	uid        types.UID
	generation int64
	deleted    bool
}

func newSliceLedger() *sliceLedger {
	return &sliceLedger{backends: map[types.NamespacedName]*ledgerEntry{}}
}

// entry returns key's entry, making an untrusted one if there is none.
// The caller holds mu.
func (l *sliceLedger) entry(key types.NamespacedName) *ledgerEntry {
	e, ok := l.backends[key]
	if !ok {
		e = &ledgerEntry{pending: map[string]sliceWrite{}}
		l.backends[key] = e
	}
	return e
}

// trust records that live are all of key's slices, as read past the cache
// (none for a Service this pass created), and cached what the cache shows:
// the cache is up to date once it shows live and none of the rest.
func (l *sliceLedger) trust(key types.NamespacedName, live, cached []discoveryv1.EndpointSlice) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.entry(key)
	e.trusted = true
	clear(e.pending)
	for _, s := range cached {
		e.pending[s.Name] = sliceWrite{uid: s.UID, deleted: true}
	}
	for _, s := range live {
		e.pending[s.Name] = sliceWrite{uid: s.UID, generation: s.Generation}
	}
}

// wrote records a write of one of our slices that succeeded.
func (l *sliceLedger) wrote(s client.Object, deleted bool) {
	key, ok := backendKey(s)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entry(key).pending[s.GetName()] = sliceWrite{uid: s.GetUID(), generation: s.GetGeneration(), deleted: deleted}
}

// seesAll tells whether cached, the backend's slices in the cache, can be
// planned from: the backend is trusted and the cache shows every write
// this process made. Writes the cache shows are forgotten.
func (l *sliceLedger) seesAll(key types.NamespacedName, cached []discoveryv1.EndpointSlice) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.backends[key]
	if !ok || !e.trusted {
		return false
	}
	byName := make(map[string]*discoveryv1.EndpointSlice, len(cached))
	for i := range cached {
		byName[cached[i].Name] = &cached[i]
	}
	for name, w := range e.pending {
		if w.shownBy(byName[name]) {
			delete(e.pending, name)
		}
	}
	return len(e.pending) == 0
}

// shownBy tells whether the cache's copy of the slice (nil when the cache
// has none) shows the write: a later generation shows it too (someone
// else's write, which the cache has caught up with).
func (w sliceWrite) shownBy(cached *discoveryv1.EndpointSlice) bool {
	if w.deleted {
		return cached == nil || cached.UID != w.uid
	}
	return cached != nil && cached.UID == w.uid && cached.Generation >= w.generation
}

// removed takes a slice's delete event: one that no delete of ours
// explains means a slice left the cache that may still publish endpoints.
func (l *sliceLedger) removed(s client.Object) {
	key, ok := backendKey(s)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.backends[key]
	if !ok {
		return
	}
	if w, ours := e.pending[s.GetName()]; ours && w.deleted && w.uid == s.GetUID() {
		return
	}
	e.trusted = false
}

// forget drops a backend that is gone.
func (l *sliceLedger) forget(key types.NamespacedName) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.backends, key)
}

// watchDeletes is the slice watch's predicate that hands delete events to
// the ledger; it lets every event through.
func (l *sliceLedger) watchDeletes() predicate.Predicate {
	return predicate.Funcs{DeleteFunc: func(e event.DeleteEvent) bool {
		l.removed(e.Object)
		return true
	}}
}
