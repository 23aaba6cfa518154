package publish

import (
	"encoding/json"
	"maps"
	"slices"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/sets"
)

// SourcesAnnotation is the slice annotation that records which sources
// published each of the slice's endpoints, as a map from source name to
// the indexes of its endpoints in the slice. A controller that restarts
// while a source fails knows that source's last answer only from it: an
// endpoint that only other, answering sources published and no longer
// do drains, instead of being held for the failing one. A backend with
// one source needs no record (every endpoint is that source's), so its
// slices carry none.
const SourcesAnnotation = "backendslice.io/sources"

// Attribution maps an endpoint's address to the names of the sources that
// publish it, sorted.
type Attribution map[string][]string

// SourceAnnotator returns the annotations a slice holding eps carries: the
// sources of each endpoint, by index. No attribution, no annotation.
func SourceAnnotator(by Attribution) func([]discoveryv1.Endpoint) map[string]string {
	return func(eps []discoveryv1.Endpoint) map[string]string {
		if len(by) == 0 {
			return nil
		}
		index := map[string][]int{}
		for i, ep := range eps {
			if len(ep.Addresses) == 0 {
				continue
			}
			for _, src := range by[ep.Addresses[0]] {
				index[src] = append(index[src], i)
			}
		}
		if len(index) == 0 {
			return nil
		}
		// Maps marshal with sorted keys: the same sources, the same text.
		b, _ := json.Marshal(index)
		return map[string]string{SourcesAnnotation: string(b)}
	}
}

// SourcesFromSlices reads the attribution our slices record. A slice
// without the record, or with a mangled one, attributes nothing: its
// endpoints count as anyone's.
func SourcesFromSlices(sl []discoveryv1.EndpointSlice) Attribution {
	out := Attribution{}
	for _, s := range sl {
		var index map[string][]int
		if json.Unmarshal([]byte(s.Annotations[SourcesAnnotation]), &index) != nil {
			continue
		}
		for src, idx := range index {
			for _, i := range idx {
				if i < 0 || i >= len(s.Endpoints) || len(s.Endpoints[i].Addresses) == 0 {
					continue
				}
				addr := s.Endpoints[i].Addresses[0]
				if !slices.Contains(out[addr], src) {
					out[addr] = append(out[addr], src)
				}
			}
		}
	}
	for addr := range out {
		slices.Sort(out[addr])
	}
	return out
}

// Attribute is the attribution of this pass: each address to the sources
// whose answer (or held answer) holds it, and, for addresses held because
// a source has failed since the controller started (unknown), the unknown
// sources the slices recorded for them, so that the record survives
// another restart. Addresses are canonical. Fewer than two sources need
// no attribution: nil.
func Attribute(results []SourceResult, unknown sets.Set[string], recorded Attribution) Attribution {
	if len(results) < 2 {
		return nil
	}
	by := map[string]sets.Set[string]{}
	add := func(addr, src string) {
		if by[addr] == nil {
			by[addr] = sets.New[string]()
		}
		by[addr].Insert(src)
	}
	for _, r := range results {
		if r.Err != nil && !r.Held {
			continue
		}
		for _, e := range r.Endpoints {
			add(CanonicalAddress(e.Address), r.Name)
		}
	}
	for addr, srcs := range recorded {
		for _, src := range srcs {
			if unknown.Has(src) {
				add(addr, src)
			}
		}
	}
	out := make(Attribution, len(by))
	for addr, srcs := range by {
		out[addr] = sets.List(srcs)
	}
	return out
}

// HeldForUnknown tells, of a published endpoint no answer holds, whether
// a source that has failed since the controller started (unknown) may
// have published it: the slices record it as one of theirs, or record
// nothing of it (slices written before the record, or by a backend of one
// source).
func HeldForUnknown(unknown sets.Set[string], recorded Attribution) func(Endpoint) bool {
	return func(e Endpoint) bool {
		if unknown.Len() == 0 {
			return false
		}
		srcs, ok := recorded[e.Address]
		return !ok || slices.ContainsFunc(srcs, unknown.Has)
	}
}

// Annotators joins annotation functions; a later one's keys win.
func Annotators(fns ...func([]discoveryv1.Endpoint) map[string]string) func([]discoveryv1.Endpoint) map[string]string {
	return func(eps []discoveryv1.Endpoint) map[string]string {
		var out map[string]string
		for _, fn := range fns {
			extra := fn(eps)
			if len(extra) == 0 {
				continue
			}
			if out == nil {
				out = make(map[string]string, len(extra))
			}
			maps.Copy(out, extra)
		}
		return out
	}
}
