package externalbackend

import (
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/publish"
	"github.com/backendslice/backendslice/test/metricstest"
)

// TestBackendMetrics runs one backend's status through the passes that
// change its alert series, and checks the series after each: the Ready
// and Probed conditions by reason (a reason that changes replaces its
// series, a condition removed removes it), each source's staleness and
// last success (a failure keeps the time of the last answer; after a
// restart a failing source starts from status's lastSuccessTime; a source
// removed from the spec, or every source of a suspended backend, has no
// series), and nothing at all once the backend is forgotten. Another
// backend's series are untouched throughout.
func TestBackendMetrics(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	recorded := metav1.NewTime(t0.Add(-time.Hour))
	cond := func(typ string, ok bool, reason string) metav1.Condition {
		c := metav1.Condition{Type: typ, Status: metav1.ConditionFalse, Reason: reason}
		if ok {
			c.Status = metav1.ConditionTrue
		}
		return c
	}
	fail := errors.New("refused")
	type pass struct {
		conds    []metav1.Condition
		sources  []v1alpha1.SourceStatus
		results  []publish.SourceResult
		resolved bool
		now      time.Time
		want     map[string]float64
	}
	const (
		ready   = `backendslice_externalbackend_condition{name="db",namespace="shop",reason="Ready",type="Ready"}`
		failed  = `backendslice_externalbackend_condition{name="db",namespace="shop",reason="SourceFailed",type="Ready"}`
		open    = `backendslice_externalbackend_condition{name="db",namespace="shop",reason="FailOpen",type="Probed"}`
		susp    = `backendslice_externalbackend_condition{name="db",namespace="shop",reason="Suspended",type="Ready"}`
		aStale  = `backendslice_source_stale{kind="dns",name="db",namespace="shop",source="a"}`
		aLast   = `backendslice_source_last_success_timestamp_seconds{kind="dns",name="db",namespace="shop",source="a"}`
		bStale  = `backendslice_source_stale{kind="consul",name="db",namespace="shop",source="b"}`
		bLast   = `backendslice_source_last_success_timestamp_seconds{kind="consul",name="db",namespace="shop",source="b"}`
		other   = `backendslice_externalbackend_condition{name="other",namespace="shop",reason="Ready",type="Ready"}`
		oStale  = `backendslice_source_stale{kind="static",name="other",namespace="shop",source="s"}`
		oLast   = `backendslice_source_last_success_timestamp_seconds{kind="static",name="other",namespace="shop",source="s"}`
		otherTS = 1_700_000_000
	)
	srcA := v1alpha1.SourceStatus{Name: "a", Kind: "dns"}
	srcB := v1alpha1.SourceStatus{Name: "b", Kind: "consul", LastSuccessTime: &recorded}
	staleB := srcB
	staleB.Stale = true
	staleA := srcA
	staleA.Stale = true
	ok := func(names ...string) []publish.SourceResult {
		var out []publish.SourceResult
		for _, n := range names {
			out = append(out, publish.SourceResult{Name: n})
		}
		return out
	}
	withOther := func(m map[string]float64) map[string]float64 {
		m = maps.Clone(m)
		if m == nil {
			m = map[string]float64{}
		}
		m[other], m[oStale], m[oLast] = 1, 0, otherTS
		return m
	}
	passes := []pass{
		// A restart: a answers, b fails since the start and shows the
		// success status recorded.
		{conds: []metav1.Condition{cond(v1alpha1.ConditionReady, false, v1alpha1.ReasonSourceFailed), cond(v1alpha1.ConditionProbed, false, v1alpha1.ReasonFailOpen)},
			sources: []v1alpha1.SourceStatus{srcA, staleB}, results: []publish.SourceResult{{Name: "a"}, {Name: "b", Err: fail}}, resolved: true, now: t0,
			want: map[string]float64{failed: 0, open: 0, aStale: 0, aLast: 1_700_000_000, bStale: 1, bLast: float64(recorded.Unix())}},
		// Both answer: Ready, no probe; both times move.
		{conds: []metav1.Condition{cond(v1alpha1.ConditionReady, true, v1alpha1.ReasonReady)},
			sources: []v1alpha1.SourceStatus{srcA, srcB}, results: ok("a", "b"), resolved: true, now: t0.Add(1500 * time.Millisecond),
			want: map[string]float64{ready: 1, aStale: 0, aLast: 1_700_000_001.5, bStale: 0, bLast: 1_700_000_001.5}},
		// a fails: its time stands still.
		{conds: []metav1.Condition{cond(v1alpha1.ConditionReady, false, v1alpha1.ReasonSourceFailed)},
			sources: []v1alpha1.SourceStatus{staleA, srcB}, results: []publish.SourceResult{{Name: "a", Err: fail}, {Name: "b"}}, resolved: true, now: t0.Add(time.Minute),
			want: map[string]float64{failed: 0, aStale: 1, aLast: 1_700_000_001.5, bStale: 0, bLast: 1_700_000_060}},
		// b leaves the spec.
		{conds: []metav1.Condition{cond(v1alpha1.ConditionReady, true, v1alpha1.ReasonReady)},
			sources: []v1alpha1.SourceStatus{srcA}, results: ok("a"), resolved: true, now: t0.Add(2 * time.Minute),
			want: map[string]float64{ready: 1, aStale: 0, aLast: 1_700_000_120}},
		// Suspended: nothing is resolved, no source series.
		{conds: []metav1.Condition{cond(v1alpha1.ConditionReady, true, v1alpha1.ReasonSuspended)},
			sources: []v1alpha1.SourceStatus{srcA}, now: t0.Add(3 * time.Minute),
			want: map[string]float64{susp: 1}},
	}
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	// Another backend, exported once before the passes.
	o := &v1alpha1.ExternalBackend{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "other"}}
	o.Status.Conditions = []metav1.Condition{cond(v1alpha1.ConditionReady, true, v1alpha1.ReasonReady)}
	o.Status.Sources = []v1alpha1.SourceStatus{{Name: "s", Kind: "static"}}
	m.backend(o, true, ok("s"), t0)
	for i, p := range passes {
		xb := &v1alpha1.ExternalBackend{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db"}}
		xb.Status.Conditions, xb.Status.Sources = p.conds, p.sources
		m.backend(xb, p.resolved, p.results, p.now)
		checkSeries(t, reg, i, withOther(p.want))
	}
	m.forget("shop", "db")
	checkSeries(t, reg, len(passes), withOther(nil))
}

// checkSeries checks that the alert series reg exports are want, after
// step i.
func checkSeries(t *testing.T, reg prometheus.Gatherer, i int, want map[string]float64) {
	t.Helper()
	got := map[string]float64{}
	for _, prefix := range []string{"backendslice_externalbackend_condition", "backendslice_source_"} {
		s, err := metricstest.Series(reg, prefix)
		if err != nil {
			t.Fatal(err)
		}
		maps.Copy(got, s)
	}
	if !maps.Equal(got, want) {
		t.Errorf("after step %d:\n got %v\nwant %v", i, got, want)
	}
}
