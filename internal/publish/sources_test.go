package publish

import (
	"errors"
	"reflect"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/backendslice/backendslice/providers"
)

// endpointsOf are serving provider endpoints at addrs.
func endpointsOf(addrs ...string) []providers.Endpoint {
	var out []providers.Endpoint
	for _, a := range addrs {
		out = append(out, providers.Endpoint{Address: a, Serving: true})
	}
	return out
}

// slice is an IPv4 slice of addrs carrying annotations.
func slice(annotations map[string]string, addrs ...string) discoveryv1.EndpointSlice {
	s := discoveryv1.EndpointSlice{AddressType: discoveryv1.AddressTypeIPv4}
	s.Annotations = annotations
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}})
	}
	return s
}

// TestSourcesRoundTrip: what the annotator writes for a slice is what
// SourcesFromSlices reads back, whatever the order of the slice's
// endpoints; one source (nil attribution) writes nothing.
func TestSourcesRoundTrip(t *testing.T) {
	by := Attribution{"192.0.2.1": {"a"}, "192.0.2.2": {"a", "b"}, "192.0.2.3": {"b"}}
	eps := slice(nil, "192.0.2.3", "192.0.2.1", "192.0.2.2", "192.0.2.9").Endpoints
	ann := SourceAnnotator(by)(eps)
	if got, want := ann[SourcesAnnotation], `{"a":[1,2],"b":[0,2]}`; got != want {
		t.Errorf("annotation = %s, want %s", got, want)
	}
	back := SourcesFromSlices([]discoveryv1.EndpointSlice{{Endpoints: eps, ObjectMeta: slice(ann).ObjectMeta}})
	if !reflect.DeepEqual(back, by) {
		t.Errorf("read back %v, want %v (192.0.2.9 has no source)", back, by)
	}
	if ann := SourceAnnotator(nil)(eps); ann != nil {
		t.Errorf("no attribution annotated %v", ann)
	}
}

// TestSourcesFromMangledSlices: a record edited by hand attributes nothing
// it cannot point at: bad JSON, indexes out of range.
func TestSourcesFromMangledSlices(t *testing.T) {
	got := SourcesFromSlices([]discoveryv1.EndpointSlice{
		slice(map[string]string{SourcesAnnotation: `{"a":[0`}, "192.0.2.1"),
		slice(map[string]string{SourcesAnnotation: `{"a":[-1,5],"b":[0]}`}, "192.0.2.2"),
		slice(nil, "192.0.2.3"),
	})
	if want := (Attribution{"192.0.2.2": {"b"}}); !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// TestAttributeAndHold follows a restart: source a fails with no answer
// known, b answers without 192.0.2.3 (which only b published): .3 must
// drain, a's recorded endpoint and one with no record are held, and the
// new record keeps a's claim for the next restart.
func TestAttributeAndHold(t *testing.T) {
	recorded := Attribution{"192.0.2.1": {"a"}, "192.0.2.2": {"a", "b"}, "192.0.2.3": {"b"}}
	unknown := sets.New("a")
	results := []SourceResult{
		{Name: "a", Err: errors.New("timeout")},
		{Name: "b", Endpoints: endpointsOf("192.0.2.2", "192.0.2.4")},
	}
	hold := HeldForUnknown(unknown, recorded)
	for addr, want := range map[string]bool{"192.0.2.1": true, "192.0.2.3": false, "192.0.2.7": true} {
		if got := hold(Endpoint{Address: addr}); got != want {
			t.Errorf("hold(%s) = %v, want %v", addr, got, want)
		}
	}
	if HeldForUnknown(sets.New[string](), recorded)(Endpoint{Address: "192.0.2.1"}) {
		t.Error("held with every source answering")
	}
	want := Attribution{"192.0.2.1": {"a"}, "192.0.2.2": {"a", "b"}, "192.0.2.4": {"b"}}
	if got := Attribute(results, unknown, recorded); !reflect.DeepEqual(got, want) {
		t.Errorf("Attribute = %v, want %v", got, want)
	}
	if got := Attribute(results[1:], nil, nil); got != nil {
		t.Errorf("one source attributed %v", got)
	}
}
