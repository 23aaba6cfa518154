package publish

import (
	"reflect"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/backendslice/backendslice/api/v1alpha1"
)

var drainNow = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func v4(addr string, serving, terminating bool) Endpoint {
	return Endpoint{AddressType: discoveryv1.AddressTypeIPv4, Address: addr, Serving: serving, Terminating: terminating}
}

func record(addr string, ago time.Duration) v1alpha1.DrainingEndpoint {
	return v1alpha1.DrainingEndpoint{Address: addr, Since: metav1.NewTime(drainNow.Add(-ago))}
}

func TestDrain(t *testing.T) {
	const period = 30 * time.Second
	cases := []struct {
		name         string
		current      []Endpoint
		published    []Endpoint
		draining     []v1alpha1.DrainingEndpoint
		period       time.Duration
		hold         func(Endpoint) bool
		want         []Endpoint
		wantDraining []v1alpha1.DrainingEndpoint
		wantExpiry   time.Duration
	}{
		{
			name:      "nothing vanished",
			current:   []Endpoint{v4("192.0.2.1", true, false)},
			published: []Endpoint{v4("192.0.2.1", true, false)},
			period:    period,
			want:      []Endpoint{v4("192.0.2.1", true, false)},
		},
		{
			name:         "vanished serving endpoint drains, serving kept",
			current:      []Endpoint{v4("192.0.2.1", true, false)},
			published:    []Endpoint{v4("192.0.2.1", true, false), v4("192.0.2.2", true, false)},
			period:       period,
			want:         []Endpoint{v4("192.0.2.1", true, false), v4("192.0.2.2", true, true)},
			wantDraining: []v1alpha1.DrainingEndpoint{record("192.0.2.2", 0)},
			wantExpiry:   period,
		},
		{
			name:         "vanished unhealthy endpoint drains as not serving",
			published:    []Endpoint{v4("192.0.2.2", false, false)},
			period:       period,
			want:         []Endpoint{v4("192.0.2.2", false, true)},
			wantDraining: []v1alpha1.DrainingEndpoint{record("192.0.2.2", 0)},
			wantExpiry:   period,
		},
		{
			name:         "existing record keeps its since",
			published:    []Endpoint{v4("192.0.2.2", true, true)},
			draining:     []v1alpha1.DrainingEndpoint{record("192.0.2.2", 10*time.Second)},
			period:       period,
			want:         []Endpoint{v4("192.0.2.2", true, true)},
			wantDraining: []v1alpha1.DrainingEndpoint{record("192.0.2.2", 10*time.Second)},
			wantExpiry:   20 * time.Second,
		},
		{
			name:         "a start in the future is clamped to now",
			published:    []Endpoint{v4("192.0.2.2", true, false)},
			draining:     []v1alpha1.DrainingEndpoint{record("192.0.2.2", -1000*time.Hour)},
			period:       period,
			want:         []Endpoint{v4("192.0.2.2", true, true)},
			wantDraining: []v1alpha1.DrainingEndpoint{record("192.0.2.2", 0)},
			wantExpiry:   period,
		},
		{
			name:      "expired drain removed",
			published: []Endpoint{v4("192.0.2.2", true, true)},
			draining:  []v1alpha1.DrainingEndpoint{record("192.0.2.2", 31*time.Second)},
			period:    period,
		},
		{
			name:      "drain ending exactly now removed",
			published: []Endpoint{v4("192.0.2.2", true, true)},
			draining:  []v1alpha1.DrainingEndpoint{record("192.0.2.2", period)},
			period:    period,
		},
		{
			name:      "period 0 removes at once",
			current:   []Endpoint{v4("192.0.2.1", true, false)},
			published: []Endpoint{v4("192.0.2.1", true, false), v4("192.0.2.2", true, false)},
			period:    0,
			want:      []Endpoint{v4("192.0.2.1", true, false)},
		},
		{
			name:      "period 0 removes an endpoint with a record",
			published: []Endpoint{v4("192.0.2.2", true, true)},
			draining:  []v1alpha1.DrainingEndpoint{record("192.0.2.2", time.Second)},
			period:    0,
		},
		{
			name:      "HoldVanished keeps vanished endpoints unchanged and their records",
			current:   []Endpoint{v4("192.0.2.1", true, false)},
			published: []Endpoint{v4("192.0.2.1", true, false), v4("192.0.2.2", true, false), v4("192.0.2.3", true, true)},
			// The record of .3 has expired: held all the same.
			draining:     []v1alpha1.DrainingEndpoint{record("192.0.2.3", time.Hour)},
			period:       period,
			hold:         func(Endpoint) bool { return true },
			want:         []Endpoint{v4("192.0.2.1", true, false), v4("192.0.2.2", true, false), v4("192.0.2.3", true, true)},
			wantDraining: []v1alpha1.DrainingEndpoint{record("192.0.2.3", time.Hour)},
		},
		{
			name:         "HoldVanished holds only what it names; the rest drains",
			published:    []Endpoint{v4("192.0.2.2", true, false), v4("192.0.2.3", true, false)},
			period:       period,
			hold:         func(e Endpoint) bool { return e.Address == "192.0.2.3" },
			want:         []Endpoint{v4("192.0.2.2", true, true), v4("192.0.2.3", true, false)},
			wantDraining: []v1alpha1.DrainingEndpoint{record("192.0.2.2", 0)},
			wantExpiry:   period,
		},
		{
			name:      "reappearing endpoint drops its record",
			current:   []Endpoint{v4("192.0.2.2", true, false)},
			published: []Endpoint{v4("192.0.2.2", true, true)},
			draining:  []v1alpha1.DrainingEndpoint{record("192.0.2.2", 10*time.Second)},
			period:    period,
			want:      []Endpoint{v4("192.0.2.2", true, false)},
		},
		{
			name:      "record without a published endpoint dropped",
			draining:  []v1alpha1.DrainingEndpoint{record("192.0.2.9", time.Second)},
			period:    period,
			published: nil,
		},
		{
			name: "NextExpiry is the soonest, records sorted by address",
			published: []Endpoint{
				v4("192.0.2.30", true, false),
				v4("192.0.2.20", true, true),
				v4("192.0.2.10", true, true),
			},
			draining: []v1alpha1.DrainingEndpoint{record("192.0.2.20", 10*time.Second), record("192.0.2.10", 25*time.Second)},
			period:   period,
			want:     []Endpoint{v4("192.0.2.30", true, true), v4("192.0.2.20", true, true), v4("192.0.2.10", true, true)},
			wantDraining: []v1alpha1.DrainingEndpoint{
				record("192.0.2.10", 25*time.Second), record("192.0.2.20", 10*time.Second), record("192.0.2.30", 0),
			},
			wantExpiry: 5 * time.Second,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := Drain(DrainInput{
				Current: c.current, Published: c.published, Draining: c.draining,
				Now: drainNow, Period: c.period, HoldVanished: c.hold,
			})
			if len(res.Endpoints) != len(c.want) || (len(c.want) > 0 && !reflect.DeepEqual(res.Endpoints, c.want)) {
				t.Errorf("endpoints\n got %+v\nwant %+v", res.Endpoints, c.want)
			}
			if len(res.Draining) != len(c.wantDraining) {
				t.Errorf("draining %+v, want %+v", res.Draining, c.wantDraining)
			} else {
				for i := range c.wantDraining {
					g, w := res.Draining[i], c.wantDraining[i]
					if g.Address != w.Address || !g.Since.Equal(&w.Since) {
						t.Errorf("draining[%d] = %s since %v, want %s since %v", i, g.Address, g.Since, w.Address, w.Since)
					}
				}
			}
			if res.NextExpiry != c.wantExpiry {
				t.Errorf("NextExpiry = %v, want %v", res.NextExpiry, c.wantExpiry)
			}
		})
	}
}

func TestDrainDoesNotChangeItsInput(t *testing.T) {
	current := make([]Endpoint, 1, 4)
	current[0] = v4("192.0.2.1", true, false)
	published := []Endpoint{v4("192.0.2.2", true, false)}
	res := Drain(DrainInput{Current: current, Published: published, Now: drainNow, Period: time.Minute})
	if len(res.Endpoints) != 2 {
		t.Fatalf("endpoints %+v", res.Endpoints)
	}
	if published[0].Terminating {
		t.Error("Drain marked the caller's published endpoint terminating")
	}
	if extra := current[:2]; extra[1].Address != "" {
		t.Errorf("Drain appended into the caller's Current slice: %+v", extra)
	}
}

func TestDrainStartsAtTheNextWholeSecond(t *testing.T) {
	// Status keeps whole seconds: a drain that starts at 5.4s is recorded
	// as starting at 6s, so the time read back never shortens it.
	now := drainNow.Add(400 * time.Millisecond)
	res := Drain(DrainInput{Published: []Endpoint{v4("192.0.2.1", true, false)}, Now: now, Period: 10 * time.Second})
	if len(res.Draining) != 1 || !res.Draining[0].Since.Time.Equal(drainNow.Add(time.Second)) {
		t.Fatalf("draining %+v, want since %v", res.Draining, drainNow.Add(time.Second))
	}
	if res.NextExpiry != 10*time.Second+600*time.Millisecond {
		t.Errorf("NextExpiry = %v, want 10.6s", res.NextExpiry)
	}
	// Read back one reconcile later: the record holds.
	again := Drain(DrainInput{Published: res.Endpoints, Draining: res.Draining, Now: now.Add(5 * time.Second), Period: 10 * time.Second})
	if len(again.Endpoints) != 1 || again.NextExpiry != 5*time.Second+600*time.Millisecond || !again.Draining[0].Since.Equal(&res.Draining[0].Since) {
		t.Errorf("second pass: %+v", again)
	}
}

// TestDrainAnnotationRoundTrip: the drain starts a slice records for its
// terminating endpoints read back as they were; endpoints that are not
// terminating, or not draining, record nothing; garbage reads as nothing.
func TestDrainAnnotationRoundTrip(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(7 * time.Second))
	draining := []v1alpha1.DrainingEndpoint{{Address: "192.0.2.1", Since: t0}, {Address: "192.0.2.2", Since: t1}, {Address: "192.0.2.9", Since: t1}}
	eps := []discoveryv1.Endpoint{
		{Addresses: []string{"192.0.2.1"}, Conditions: discoveryv1.EndpointConditions{Terminating: ptr.To(true)}},
		{Addresses: []string{"192.0.2.2"}, Conditions: discoveryv1.EndpointConditions{Terminating: ptr.To(true)}},
		{Addresses: []string{"192.0.2.3"}, Conditions: discoveryv1.EndpointConditions{Terminating: ptr.To(true)}},
		{Addresses: []string{"192.0.2.9"}},
	}
	ann := DrainAnnotator(draining)(eps)
	if got, want := ann[DrainAnnotation], `{"192.0.2.1":"2026-12-02T10:00:00Z","192.0.2.2":"2026-12-02T10:00:07Z"}`; got != want {
		t.Fatalf("annotation %q, want %q", got, want)
	}
	if again := DrainAnnotator(draining)(eps); again[DrainAnnotation] != ann[DrainAnnotation] {
		t.Errorf("not stable: %q then %q", ann[DrainAnnotation], again[DrainAnnotation])
	}
	if a := DrainAnnotator(draining)(eps[2:]); a != nil {
		t.Errorf("no draining endpoint, yet annotations %v", a)
	}
	sl := []discoveryv1.EndpointSlice{
		{ObjectMeta: metav1.ObjectMeta{Annotations: ann}},
		{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{DrainAnnotation: "not json"}}},
		{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{DrainAnnotation: `{"192.0.2.5":"yesterday"}`}}},
	}
	got := DrainsFromSlices(sl)
	if len(got) != 2 || got[0].Address != "192.0.2.1" || !got[0].Since.Equal(&t0) || got[1].Address != "192.0.2.2" || !got[1].Since.Equal(&t1) {
		t.Errorf("read back %+v, want 192.0.2.1 at %v and 192.0.2.2 at %v", got, t0, t1)
	}
}
