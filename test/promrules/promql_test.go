package promrules_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/backendslice/backendslice/test/promrules"
)

// TestParseQuery checks what ParseQuery finds on the shapes the
// dashboard and the rules use, and that it refuses what Prometheus
// refuses or what it cannot check.
func TestParseQuery(t *testing.T) {
	q, err := promrules.ParseQuery("q", `topk(10, max by (exported_namespace, name) (m_a{namespace="$namespace", condition="ready", x=~"a\"b"}))`+
		` - ignoring(condition) group_left (pod) histogram_quantile(0.99, sum(rate(m_b_bucket[5m] offset 5m)) without (le))`+
		` / on() vector(0) or absent(m_c{name!="l"}) * m_d > bool 1e-3`)
	if err != nil {
		t.Fatal(err)
	}
	matcher := func(typ labels.MatchType, name, value string) *labels.Matcher {
		return labels.MustNewMatcher(typ, name, value)
	}
	want := promrules.Query{
		Where: "q",
		Selectors: []promrules.Selector{
			{Metric: "m_a", Matchers: []*labels.Matcher{matcher(labels.MatchEqual, "namespace", "$namespace"),
				matcher(labels.MatchEqual, "condition", "ready"), matcher(labels.MatchRegexp, "x", `a"b`)}},
			{Metric: "m_b_bucket", Matchers: []*labels.Matcher{}},
			{Metric: "m_c", Matchers: []*labels.Matcher{matcher(labels.MatchNotEqual, "name", "l")}},
			{Metric: "m_d", Matchers: []*labels.Matcher{}},
		},
	}
	got := q
	got.Grouping = nil
	// Matchers compare by what they print: a regexp's compiled form differs.
	if fmt.Sprint(got.Selectors) != fmt.Sprint(want.Selectors) {
		t.Errorf("selectors %v\nwant %v", got.Selectors, want.Selectors)
	}
	for _, l := range []string{"exported_namespace", "name", "condition", "pod", "le"} {
		if !strings.Contains(strings.Join(q.Grouping, ","), l) {
			t.Errorf("grouping %v lacks %s", q.Grouping, l)
		}
	}
	for _, bad := range []string{`{__name__="m"}`, `rat(m[5m])`, `m{a="b"`, `m{a=b}`, `sum by (a m) (x)`, `m{a="b`, `rate(m[$__rate_interval])`} {
		if _, err := promrules.ParseQuery("bad", bad); err == nil {
			t.Errorf("%s: parsed without error", bad)
		}
	}
}

// TestInterpolate: Grafana's variables outside strings get their values,
// those inside strings stay, and one without a value is an error.
func TestInterpolate(t *testing.T) {
	got, err := promrules.Interpolate(`topk($topk, rate(m{ns="$namespace", j='${job}'}[$__rate_interval])) * ${topk:raw}`, map[string]string{"topk": "10"})
	if err != nil {
		t.Fatal(err)
	}
	if want := `topk(10, rate(m{ns="$namespace", j='${job}'}[5m])) * 10`; got != want {
		t.Errorf("got %s\nwant %s", got, want)
	}
	if _, err := promrules.Interpolate(`topk($k, m)`, nil); err == nil || !strings.Contains(err.Error(), "k") {
		t.Errorf("a variable without a value: got %v", err)
	}
}
