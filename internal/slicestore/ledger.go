package slicestore

import (
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// ledger tells whether the cache shows every slice of a backend that can
// hold one of its endpoints, so that a pass placing endpoints reads the
// slices past the cache only when it may not. It remembers the generation
// of each slice of the backend this process last wrote (or that it deleted
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
type ledger struct {
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

// trust records that live are all of the backend's slices, as read past
// the cache (none for a Service this pass created), and cached what the
// cache shows: the cache is up to date once it shows live and none of the
// rest.
func (l *ledger) trust(live, cached []discoveryv1.EndpointSlice) {
	l.trusted = true
	l.pending = make(map[string]sliceWrite, len(live)+len(cached))
	for _, s := range cached {
		l.pending[s.Name] = sliceWrite{uid: s.UID, deleted: true}
	}
	for _, s := range live {
		l.pending[s.Name] = sliceWrite{uid: s.UID, generation: s.Generation}
	}
}

// wrote records a write of one of the backend's slices that succeeded.
func (l *ledger) wrote(s client.Object, deleted bool) {
	if l.pending == nil {
		l.pending = map[string]sliceWrite{}
	}
	l.pending[s.GetName()] = sliceWrite{uid: s.GetUID(), generation: s.GetGeneration(), deleted: deleted}
}

// seesAll tells whether cached, the backend's slices in the cache, can be
// planned from: the backend is trusted and the cache shows every write
// this process made. Writes the cache shows are forgotten.
func (l *ledger) seesAll(cached []discoveryv1.EndpointSlice) bool {
	if !l.trusted {
		return false
	}
	cachedByName := make(map[string]*discoveryv1.EndpointSlice, len(cached))
	for i := range cached {
		cachedByName[cached[i].Name] = &cached[i]
	}
	for name, w := range l.pending {
		if w.shownBy(cachedByName[name]) {
			delete(l.pending, name)
		}
	}
	return len(l.pending) == 0
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
func (l *ledger) removed(s client.Object) {
	if w, ours := l.pending[s.GetName()]; ours && w.deleted && w.uid == s.GetUID() {
		return
	}
	l.trusted = false
}

// Trust records, for backend key, that live are all its slices, as read
// past the cache (none for a Service this pass created), and cached what
// the cache shows (see ledger.trust); the content of live is kept.
func (s *Store) Trust(key types.NamespacedName, live, cached []discoveryv1.EndpointSlice) {
	for i := range live {
		s.keepContent(&live[i])
	}
	s.update(key, func(b *record) { b.ledger.trust(live, cached) })
}

// ShowsAll tells whether cached are all of backend key's slices (see
// ledger.seesAll); a backend with no record is not trusted.
func (s *Store) ShowsAll(key types.NamespacedName, cached []discoveryv1.EndpointSlice) bool {
	var all bool
	s.lookup(key, func(b *record) { all = b.ledger.seesAll(cached) })
	return all
}

// SliceDeletes is the slice watch's predicate that hands delete events to
// the ledger of the slice's backend, if it has a record, and forgets the
// slice's content; it lets every event through. It must come before
// NotEchoes, so that the ledger sees every delete, ours included.
func (s *Store) SliceDeletes() predicate.Predicate {
	return predicate.Funcs{DeleteFunc: func(e event.DeleteEvent) bool {
		s.sliceRemoved(e.Object)
		return true
	}}
}

// sliceRemoved takes a slice's delete event (see ledger.removed), and
// forgets the slice's content.
func (s *Store) sliceRemoved(o client.Object) {
	if key, ok := BackendKey(o); ok {
		s.lookup(key, func(b *record) { b.ledger.removed(o) })
	}
	s.forgetContent(o)
}
