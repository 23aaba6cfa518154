package publish

import (
	"cmp"
	"slices"

	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/backendslice/backendslice/internal/sliceplan"
)

// Limit keeps at most most endpoints of each address family (0: every
// one): ready ones first, then serving ones, then the rest, each in
// address order. What is kept depends on the endpoints alone, so that
// endpoints coming and going among those left out change nothing that is
// published, and draining endpoints are the first to go. The bound is per
// family because each family is published, and read by clients, on its
// own: a bound on the total would let one family's endpoints crowd out
// another's, or move where another family is cut. It returns the kept
// endpoints in their order, and how many of each family were left out.
func Limit(eps []Endpoint, most int) ([]Endpoint, LeftOut) {
	left := LeftOut{}
	if most < 1 {
		return eps, left
	}
	byFamily := map[discoveryv1.AddressType][]int{}
	for i, e := range eps {
		byFamily[e.AddressType] = append(byFamily[e.AddressType], i)
	}
	cut := make([]bool, len(eps))
	for family, idx := range byFamily {
		if len(idx) <= most {
			continue
		}
		slices.SortFunc(idx, func(a, b int) int {
			return cmp.Or(cmp.Compare(rank(eps[a]), rank(eps[b])), sliceplan.CompareAddresses(eps[a].Address, eps[b].Address))
		})
		for _, i := range idx[most:] {
			cut[i] = true
		}
		left[family] = len(idx) - most
	}
	if len(left) == 0 {
		return eps, left
	}
	out := make([]Endpoint, 0, len(eps)-left.Total())
	for i, e := range eps {
		if !cut[i] {
			out = append(out, e)
		}
	}
	return out, left
}

// rank orders endpoints for a bound: ready first, then serving (draining
// ones that still serve), then the rest.
func rank(e Endpoint) int {
	switch {
	case e.Ready():
		return 0
	case e.Serving:
		return 1
	}
	return 2
}
