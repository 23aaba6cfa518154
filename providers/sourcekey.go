package providers

import (
	"iter"
	"slices"

	"k8s.io/apimachinery/pkg/types"
)

// SourceKey names one source of one backend: what the providers that
// keep state per source (watches, refusals) keep it by.
type SourceKey struct {
	Backend types.NamespacedName
	Source  string
}

// SourceKeyOf is the key of req's source.
func SourceKeyOf(req Request) SourceKey {
	return SourceKey{Backend: types.NamespacedName{Namespace: req.Namespace, Name: req.Backend}, Source: req.Source.Name}
}

// Forgotten are the keys of m that Forget(backend, keep...) lets go of:
// backend's sources other than those named in keep. m may lose keys
// while the caller ranges over them.
func Forgotten[V any](m map[SourceKey]V, backend types.NamespacedName, keep []string) iter.Seq[SourceKey] {
	return func(yield func(SourceKey) bool) {
		for k := range m {
			if k.Backend == backend && !slices.Contains(keep, k.Source) && !yield(k) {
				return
			}
		}
	}
}
