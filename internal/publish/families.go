package publish

import (
	discoveryv1 "k8s.io/api/discovery/v1"
)

// LeftOut counts endpoints not published, by family: because the cluster
// gives Services no cluster IPs of their family (OnlyServed), or past the
// controller's limit (Limit).
type LeftOut map[discoveryv1.AddressType]int

// Total is the number of endpoints left out.
func (l LeftOut) Total() int {
	n := 0
	for _, c := range l {
		n += c
	}
	return n
}

// OnlyServed keeps the endpoints the cluster can route: every FQDN endpoint,
// and IP endpoints of the families in served. An IPv6 endpoint on an
// IPv4-only cluster would have no Service family to belong to, and no
// kube-proxy of that family to route it.
func OnlyServed(eps []Endpoint, served func(discoveryv1.AddressType) bool) ([]Endpoint, LeftOut) {
	out := make([]Endpoint, 0, len(eps))
	left := LeftOut{}
	for _, e := range eps {
		if e.AddressType != discoveryv1.AddressTypeFQDN && !served(e.AddressType) {
			left[e.AddressType]++
			continue
		}
		out = append(out, e)
	}
	return out, left
}
