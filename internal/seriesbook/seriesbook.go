// Package seriesbook keeps the series a controller exports about each of
// its objects (a backend, a provider) exact: a series whose labels an
// object no longer has (a condition's reason changed, a source was
// removed) is deleted, and so is every series of an object that is gone,
// so that nothing outlives what it describes.
package seriesbook

import (
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Book remembers, for each object, the label values its series were last
// set with in a few vectors that share their label names.
// DeletePartialMatch would find them without a book, but it reads every
// series of the vector, at each reconcile of each object.
type Book struct {
	vecs []*prometheus.MetricVec
	mu   sync.Mutex
	seen map[string][][]string
}

// New returns an empty book of the series of vecs.
func New(vecs ...*prometheus.MetricVec) *Book {
	return &Book{vecs: vecs, seen: map[string][][]string{}}
}

// Keep records that object's series now have exactly the label values
// of labels, and deletes from every vector the object's series of
// earlier label values that are not among them. The caller sets the
// values of the series it keeps.
func (b *Book) Keep(object string, labels ...[]string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, old := range b.seen[object] {
		if !slices.ContainsFunc(labels, func(l []string) bool { return slices.Equal(l, old) }) {
			b.delete(old)
		}
	}
	if len(labels) == 0 {
		delete(b.seen, object)
		return
	}
	b.seen[object] = slices.Clone(labels)
}

// Forget deletes every series of object.
func (b *Book) Forget(object string) { b.Keep(object) }

// delete deletes the series of label values l from every vector.
func (b *Book) delete(l []string) {
	for _, v := range b.vecs {
		v.DeleteLabelValues(l...)
	}
}

// Has tells whether object's series were last kept with label values l.
func (b *Book) Has(object string, l []string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.ContainsFunc(b.seen[object], func(s []string) bool { return slices.Equal(s, l) })
}
