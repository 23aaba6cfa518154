package slicestore

import (
	"context"
	"sync"
	"sync/atomic"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/backendslice/backendslice/api/v1alpha1"
)

// Our slices are watched as metadata only (PartialObjectMetadata): the API
// server then sends this process a few hundred bytes per slice write instead
// of the whole slice, every endpoint of it, for each write we make. What the
// metadata does not show (address type, endpoints, ports) is what we wrote:
// the store keeps it per slice, for the generation the write gave the
// slice, and reads a slice past the cache only when it does not know the
// content of the generation the cache shows (after a restart, or when
// someone else changed the slice). The API server bumps a slice's generation
// on every change but one to its metadata other than labels, so a slice
// whose cached generation is the one we keep the content of holds what we
// keep; its labels, annotations and owners come from the cache.

// SliceGVK is the kind the metadata-only cache is asked for.
var SliceGVK = discoveryv1.SchemeGroupVersion.WithKind("EndpointSlice")

// SliceMeta is an empty metadata-only EndpointSlice, of the kind the cache
// and the watch take.
func SliceMeta() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(SliceGVK)
	return m
}

// SliceMetaList is an empty list of metadata-only EndpointSlices.
func SliceMetaList() *metav1.PartialObjectMetadataList {
	l := &metav1.PartialObjectMetadataList{}
	l.SetGroupVersionKind(discoveryv1.SchemeGroupVersion.WithKind("EndpointSliceList"))
	return l
}

// content is what the metadata of one of our slices does not show, as the
// slice held it at one generation.
type content struct {
	uid         types.UID
	generation  int64
	addressType discoveryv1.AddressType
	endpoints   []discoveryv1.Endpoint
	ports       []discoveryv1.EndpointPort
}

// contentOf copies what s's metadata does not show.
func contentOf(s *discoveryv1.EndpointSlice) content {
	endpoints, ports := copyContent(s.Endpoints, s.Ports)
	return content{uid: s.UID, generation: s.Generation, addressType: s.AddressType, endpoints: endpoints, ports: ports}
}

// of tells whether the content is that of the slice m is the metadata of.
func (c content) of(m *metav1.PartialObjectMetadata) bool {
	return c.uid == m.UID && c.generation == m.Generation
}

// slice is the whole slice: m's metadata with a copy of the content, which
// the planner may change.
func (c content) slice(m *metav1.PartialObjectMetadata) discoveryv1.EndpointSlice {
	s := discoveryv1.EndpointSlice{ObjectMeta: *m.ObjectMeta.DeepCopy(), AddressType: c.addressType}
	s.Endpoints, s.Ports = copyContent(c.endpoints, c.ports)
	return s
}

// copyContent deep-copies a slice's endpoints and ports.
func copyContent(endpoints []discoveryv1.Endpoint, ports []discoveryv1.EndpointPort) ([]discoveryv1.Endpoint, []discoveryv1.EndpointPort) {
	held := (&discoveryv1.EndpointSlice{Endpoints: endpoints, Ports: ports}).DeepCopy()
	return held.Endpoints, held.Ports
}

// keepContent records the content of slices as they are now (read past
// the cache), in the record of the backend their label names.
func (s *Store) keepContent(slices ...*discoveryv1.EndpointSlice) {
	for _, sl := range slices {
		if key, ok := BackendKey(sl); ok {
			c := contentOf(sl)
			s.update(key, func(b *record) { b.keepContent(sl.Name, c) })
		}
	}
}

// keepContent records c as the content of the backend's slice name.
func (b *record) keepContent(name string, c content) {
	if b.contents == nil {
		b.contents = map[string]content{}
	}
	b.contents[name] = c
}

// forgetContent drops what is kept of a slice that is gone: o is the slice
// as deleted (by us or by anyone).
func (s *Store) forgetContent(o client.Object) {
	if key, ok := BackendKey(o); ok {
		s.lookup(key, func(b *record) { b.forgetContent(o) })
	}
}

// forgetContent drops what the backend's record keeps of the slice o, as
// deleted, unless a slice of its name made since is kept.
func (b *record) forgetContent(o client.Object) {
	if c, ok := b.contents[o.GetName()]; ok && c.uid == o.GetUID() {
		delete(b.contents, o.GetName())
	}
}

// Slices gives the whole slices of backend key whose metadata the cache
// shows (metas), taking their content from what the store keeps, and
// reading past the cache (one list of the backend's slices) those whose
// content at the cached generation it does not know. A slice the live list
// shows newer than the cache is taken as listed; one the live list no
// longer has is left out (it is gone). The error is that of the list.
func (s *Store) Slices(ctx context.Context, key types.NamespacedName, metas []metav1.PartialObjectMetadata) ([]discoveryv1.EndpointSlice, error) {
	// Asked before the content is looked at: priming may end in between.
	primed := s.primed.tried()
	out := make([]discoveryv1.EndpointSlice, 0, len(metas))
	var missing []int
	// A backend the store keeps no record of (none yet) misses them all.
	s.update(key, func(b *record) {
		for i := range metas {
			if c, ok := b.contents[metas[i].Name]; ok && c.of(&metas[i]) {
				out = append(out, c.slice(&metas[i]))
			} else {
				missing = append(missing, i)
			}
		}
	})
	if len(missing) == 0 {
		return out, nil
	}
	if !primed {
		// The first looks after a start: the content of every slice of
		// ours is read at once (or was, while this one waited) rather
		// than in a list per backend.
		s.primed.try(ctx, s.primeContents)
		return s.Slices(ctx, key, metas)
	}
	var live discoveryv1.EndpointSliceList
	if err := s.live.List(ctx, &live, client.InNamespace(key.Namespace), client.MatchingLabels{v1alpha1.BackendLabel: key.Name}); err != nil {
		return nil, err
	}
	byUID := make(map[types.UID]*discoveryv1.EndpointSlice, len(live.Items))
	for i := range live.Items {
		byUID[live.Items[i].UID] = &live.Items[i]
	}
	for _, i := range missing {
		if l, ok := byUID[metas[i].UID]; ok {
			s.keepContent(l)
			out = append(out, *l)
		}
	}
	return out, nil
}

// primer runs a function once, for the callers that come first, which
// wait for it; later callers know it was tried. Once: should it fail (the
// API server out of reach as the process starts), the backends' own lists
// read what it would have, rather than every miss trying again a list of
// every slice.
type primer struct {
	once sync.Once
	done atomic.Bool
}

// tried tells whether the function has run.
func (p *primer) tried() bool { return p.done.Load() }

// try runs prime unless it ran before, or waits for the run under way.
func (p *primer) try(ctx context.Context, prime func(context.Context) error) {
	p.once.Do(func() {
		defer p.done.Store(true)
		if err := prime(ctx); err != nil {
			log.FromContext(ctx).Info("reading our EndpointSlices past the cache failed; each backend lists its own", "error", err.Error())
		}
	})
}

// primeListPage is how many slices one page of primeContents lists.
const primeListPage = 500

// primeContents reads every slice of ours past the cache, a page at a time,
// and keeps the content of each: after a start, what the metadata-only cache
// does not show is read in one paginated list, as a full cache would have,
// rather than in one list per backend.
//
// Only the slices of backends the cache shows are kept: a record made for
// a backend already gone would never be forgotten.
func (s *Store) primeContents(ctx context.Context) error {
	var backends v1alpha1.ExternalBackendList
	if err := s.cache.List(ctx, &backends, client.UnsafeDisableDeepCopy); err != nil {
		return err
	}
	exists := make(map[types.NamespacedName]bool, len(backends.Items))
	for i := range backends.Items {
		exists[client.ObjectKeyFromObject(&backends.Items[i])] = true
	}
	opts := []client.ListOption{client.HasLabels{v1alpha1.BackendLabel}, client.Limit(primeListPage)}
	for cont := ""; ; {
		var page discoveryv1.EndpointSliceList
		if err := s.live.List(ctx, &page, append(opts, client.Continue(cont))...); err != nil {
			return err
		}
		for i := range page.Items {
			if key, ok := BackendKey(&page.Items[i]); ok && exists[key] {
				s.keepContent(&page.Items[i])
			}
		}
		if cont = page.Continue; cont == "" {
			return nil
		}
	}
}
