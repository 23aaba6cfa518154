// Package slicestore remembers, for each backend, what this process wrote
// of its Service and EndpointSlices, and so what the manager's cache can be
// trusted for: whether it shows every slice of the backend, the content of
// slices it caches as metadata only, whether a watch event is the echo of
// our own write, and whether a cached backend shows our last status patch.
//
// It is shaped like the EndpointSliceTracker of Kubernetes' own
// EndpointSlice controller (k8s.io/endpointslice): a record per owner,
// guarded by one mutex, filled by the writes that succeed and emptied by
// the watch events that show them, and dropped when the owner goes. The
// reconcile's decision never reads it: the store is asked what is
// published, and told what was written.
package slicestore

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/records"
)

// Kind is a kind of object we write, as backendslice_writes_total labels it.
type Kind string

// The kinds we write.
const (
	Service       Kind = "Service"
	EndpointSlice Kind = "EndpointSlice"
)

// Store holds what this process knows of the cache's view of each backend,
// a record per backend (records.Records).
type Store struct {
	// cache reads through the manager's cache; live reads past it.
	cache, live client.Reader
	// sameService tells whether a Service a watch shows (seen) is what we
	// wrote (wrote): the reconciler's own comparison of Services.
	sameService func(seen, wrote *corev1.Service) bool
	// primed tells whether the content of every slice of ours was read
	// past the cache since this process started (content.go).
	primed primer

	records records.Records[record]
}

// record is what the store keeps of one backend. It lives in memory and
// starts empty after a restart.
type record struct {
	// status is the backend's status as this process last wrote or read
	// it live, nil before either: a cached copy that shows another status
	// may be older than our own last status patch (see Backend).
	status *statusSeen
	// ledger holds our slice writes the cache has not shown yet.
	ledger ledger
	// contents holds, by slice name, what the metadata-only cache does not
	// show of the backend's slices.
	contents map[string]content
	// echoes are our last writes of the backend's Service and slices,
	// until their watch events come (see Writing).
	echoes map[written]lastWrite
}

// New is a store that reads through cache and, where the cache cannot be
// trusted, past it through live. sameService compares a Service as a watch
// shows it with the one we last wrote.
func New(cache, live client.Reader, sameService func(seen, wrote *corev1.Service) bool) *Store {
	return &Store{cache: cache, live: live, sameService: sameService}
}

// update runs f on key's record, making one if there is none: for a
// reconcile, which keeps what it learnt.
func (s *Store) update(key types.NamespacedName, f func(*record)) { s.records.Update(key, f) }

// lookup runs f on key's record if there is one. The watches use it: the
// events of a backend the store keeps nothing of (one already forgotten)
// must not make a record again.
func (s *Store) lookup(key types.NamespacedName, f func(*record)) { s.records.Lookup(key, f) }

// Forget drops everything kept for key, a backend that is gone.
func (s *Store) Forget(key types.NamespacedName) { s.records.Release(key) }

// BackendKey is the backend a Service or slice of ours belongs to, by its
// v1alpha1.BackendLabel.
func BackendKey(o client.Object) (types.NamespacedName, bool) {
	name, ok := o.GetLabels()[v1alpha1.BackendLabel]
	return types.NamespacedName{Namespace: o.GetNamespace(), Name: name}, ok
}
