package publish

import (
	"encoding/json"
	"slices"
	"strings"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/backendslice/backendslice/api/v1alpha1"
)

// DrainInput is what Drain needs to know.
type DrainInput struct {
	// Current endpoints, from the sources that answered.
	Current []Endpoint
	// Published endpoints, read back from our slices.
	Published []Endpoint
	// Draining are the drain records from status: when each vanished endpoint
	// was first seen missing.
	Draining []v1alpha1.DrainingEndpoint
	// Now is the time of this reconcile.
	Now time.Time
	// Period is how long a vanished endpoint stays as terminating.
	Period time.Duration
	// HoldVanished, when it returns true for a vanished endpoint, keeps it
	// exactly as published, without starting its drain: a source failed
	// with no answer known, so the endpoint may only be missing from the
	// answer we did not get.
	HoldVanished func(Endpoint) bool
	// Withdrawn, when it returns true for a vanished endpoint, removes it
	// at once: neither held nor drained. It is for endpoints that must not
	// be published any longer (a revoked provider, a denied address), which
	// a tenant's drain period must not keep.
	Withdrawn func(Endpoint) bool
}

// DrainResult is what to publish.
type DrainResult struct {
	// Endpoints are the current endpoints plus the ones still draining.
	Endpoints []Endpoint
	// Draining are the drain records to keep on status.
	Draining []v1alpha1.DrainingEndpoint
	// NextExpiry is how long until the first drain ends; zero when none runs.
	NextExpiry time.Duration
}

// Drain keeps endpoints that vanished from their source published as
// terminating (ready=false, serving as last published) until the drain period
// since they vanished has passed, then lets them go. An endpoint that comes
// back is published as its source says, and its drain record is dropped.
func Drain(in DrainInput) DrainResult {
	since := map[string]metav1.Time{}
	for _, d := range in.Draining {
		since[d.Address] = d.Since
	}
	current := map[string]bool{}
	for _, e := range in.Current {
		current[e.key()] = true
	}
	res := DrainResult{Endpoints: slices.Clone(in.Current)}
	for _, e := range in.Published {
		if current[e.key()] || (in.Withdrawn != nil && in.Withdrawn(e)) {
			continue
		}
		if in.HoldVanished != nil && in.HoldVanished(e) {
			res.Endpoints = append(res.Endpoints, e)
			if s, ok := since[e.Address]; ok {
				res.Draining = append(res.Draining, v1alpha1.DrainingEndpoint{Address: e.Address, Since: s})
			}
			continue
		}
		if in.Period <= 0 {
			continue
		}
		// Status keeps whole seconds: a new drain starts at the next one, so
		// that the time read back never cuts it short. A recorded start
		// later than that (a slice annotation or status edited by hand, or
		// a clock that went back) is clamped to it: no record can hold an
		// endpoint for longer than one drain period from now.
		first := metav1.NewTime(ceilSecond(in.Now))
		start, ok := since[e.Address]
		if !ok || start.After(first.Time) {
			start = first
		}
		left := start.Add(in.Period).Sub(in.Now)
		if left <= 0 {
			continue
		}
		e.Terminating = true
		res.Endpoints = append(res.Endpoints, e)
		res.Draining = append(res.Draining, v1alpha1.DrainingEndpoint{Address: e.Address, Since: start})
		if res.NextExpiry == 0 || left < res.NextExpiry {
			res.NextExpiry = left
		}
	}
	slices.SortFunc(res.Draining, func(a, b v1alpha1.DrainingEndpoint) int { return strings.Compare(a.Address, b.Address) })
	return res
}

// ceilSecond rounds t up to a whole second.
func ceilSecond(t time.Time) time.Time {
	if r := t.Truncate(time.Second); !r.Equal(t) {
		return r.Add(time.Second)
	}
	return t
}

// DrainAnnotation is the slice annotation that records when each of the
// slice's terminating endpoints started to drain: written with the slice
// that marks them terminating, it survives a failed status patch and a
// restart, and status lists only the first drains.
const DrainAnnotation = "backendslice.io/draining-since"

// DrainAnnotator returns the annotations a slice holding eps carries: the
// drain start of each of its terminating endpoints found in draining.
func DrainAnnotator(draining []v1alpha1.DrainingEndpoint) func([]discoveryv1.Endpoint) map[string]string {
	since := make(map[string]metav1.Time, len(draining))
	for _, d := range draining {
		since[d.Address] = d.Since
	}
	return func(eps []discoveryv1.Endpoint) map[string]string {
		starts := map[string]string{}
		for _, ep := range eps {
			if len(ep.Addresses) == 0 || !ptr.Deref(ep.Conditions.Terminating, false) {
				continue
			}
			if s, ok := since[ep.Addresses[0]]; ok {
				starts[ep.Addresses[0]] = s.UTC().Format(time.RFC3339)
			}
		}
		if len(starts) == 0 {
			return nil
		}
		// Maps marshal with sorted keys: the same drains, the same text.
		b, _ := json.Marshal(starts)
		return map[string]string{DrainAnnotation: string(b)}
	}
}

// DrainsFromSlices reads the drain starts our slices record. A mangled
// annotation records nothing: those drains start again.
func DrainsFromSlices(sl []discoveryv1.EndpointSlice) []v1alpha1.DrainingEndpoint {
	var out []v1alpha1.DrainingEndpoint
	for _, s := range sl {
		v, ok := s.Annotations[DrainAnnotation]
		if !ok {
			continue
		}
		var starts map[string]string
		if json.Unmarshal([]byte(v), &starts) != nil {
			continue
		}
		for addr, v := range starts {
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				continue
			}
			out = append(out, v1alpha1.DrainingEndpoint{Address: addr, Since: metav1.NewTime(t)})
		}
	}
	slices.SortFunc(out, func(a, b v1alpha1.DrainingEndpoint) int { return strings.Compare(a.Address, b.Address) })
	return out
}
