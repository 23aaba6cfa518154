package seriesbook_test

import (
	"maps"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backendslice/backendslice/internal/seriesbook"
	"github.com/backendslice/backendslice/test/metricstest"
)

// TestBook: a series an object is no longer kept with leaves every vector
// of the book, the object's others stay, another object's are untouched,
// and Forget removes all of an object's series.
func TestBook(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "t_a"}, []string{"object", "reason"})
	b := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "t_b"}, []string{"object", "reason"})
	reg.MustRegister(a, b)
	book := seriesbook.New(a.MetricVec, b.MetricVec)
	set := func(object string, reasons ...string) {
		var keep [][]string
		for _, r := range reasons {
			l := []string{object, r}
			a.WithLabelValues(l...).Set(1)
			b.WithLabelValues(l...).Set(2)
			keep = append(keep, l)
		}
		book.Keep(object, keep...)
	}
	steps := []struct {
		do   func()
		want []string
	}{
		{func() { set("x", "Ready"); set("y", "Ready") }, []string{`{object="x",reason="Ready"}`, `{object="y",reason="Ready"}`}},
		{func() { set("x", "SourceFailed", "FailOpen") }, []string{`{object="x",reason="FailOpen"}`, `{object="x",reason="SourceFailed"}`, `{object="y",reason="Ready"}`}},
		{func() { set("x", "FailOpen") }, []string{`{object="x",reason="FailOpen"}`, `{object="y",reason="Ready"}`}},
		{func() { book.Forget("x") }, []string{`{object="y",reason="Ready"}`}},
		{func() { book.Forget("never") }, []string{`{object="y",reason="Ready"}`}},
	}
	for i, s := range steps {
		s.do()
		got, err := metricstest.Series(reg, "t_")
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]float64{}
		for _, l := range s.want {
			want["t_a"+l], want["t_b"+l] = 1, 2
		}
		if !maps.Equal(got, want) {
			t.Errorf("step %d: series %v, want %v", i, got, want)
		}
	}
	if !book.Has("y", []string{"y", "Ready"}) || book.Has("x", []string{"x", "FailOpen"}) || book.Has("y", []string{"y", "FailOpen"}) {
		t.Error("Has does not tell what was last kept")
	}
}
