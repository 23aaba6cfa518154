package promrules

import (
	"errors"
	"fmt"
	"regexp"
	"slices"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// Query is what one PromQL expression asks of the metrics.
type Query struct {
	// Where names the query (a panel, a variable, an alert), for messages.
	Where string
	// Selectors are its series selectors, in order.
	Selectors []Selector
	// Grouping are the labels it aggregates or matches by: by, without,
	// on, ignoring, group_left and group_right name them.
	Grouping []string
	// Shown are labels it shows (a legend, an alert's description): they
	// must exist on its metrics like those it groups by.
	Shown []string
}

// Selector is one series selector: a metric name and its other matchers.
type Selector struct {
	Metric   string
	Matchers []*labels.Matcher
}

// promQL is Prometheus's parser with its defaults: the functions and
// syntax a Prometheus of this version accepts without feature flags.
var promQL = parser.NewParser(parser.Options{})

// ParseQuery parses expr as Prometheus does and returns what it selects
// and groups by. A selector without a metric name is refused: every
// series a query reads must be checkable by name.
func ParseQuery(where, expr string) (Query, error) {
	e, err := promQL.ParseExpr(expr)
	if err != nil {
		return Query{}, fmt.Errorf("%s: %w", where, err)
	}
	q := Query{Where: where}
	var errs []error
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.VectorSelector:
			if n.Name == "" {
				errs = append(errs, fmt.Errorf("%s: selector %s names no metric", where, n))
				return nil
			}
			q.Selectors = append(q.Selectors, Selector{Metric: n.Name, Matchers: slices.DeleteFunc(slices.Clone(n.LabelMatchers),
				func(m *labels.Matcher) bool { return m.Name == model.MetricNameLabel })})
		case *parser.AggregateExpr:
			q.Grouping = append(q.Grouping, n.Grouping...)
		case *parser.BinaryExpr:
			if m := n.VectorMatching; m != nil {
				q.Grouping = append(q.Grouping, m.MatchingLabels...)
				q.Grouping = append(q.Grouping, m.Include...)
			}
		}
		return nil
	})
	return q, errors.Join(errs...)
}

// grafanaToken is a quoted string, which may hold variables as they are
// (label values: PromQL takes any text there), or a Grafana variable
// outside one: $name, ${name} or ${name:format}.
var grafanaToken = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`" + `|\$\{(\w+)(?::\w+)?\}|\$(\w+)`)

// Interpolate replaces the Grafana variables of expr that stand outside
// quoted strings, as Grafana does before it sends a query: Grafana's own
// interval variables ($__rate_interval, $__interval, $__range) with 5m,
// and the dashboard's with their values in vars. Variables inside strings
// stay: a matcher's value may hold anything. A variable without a value
// is an error.
func Interpolate(expr string, vars map[string]string) (string, error) {
	var missing []string
	out := grafanaToken.ReplaceAllStringFunc(expr, func(tok string) string {
		m := grafanaToken.FindStringSubmatch(tok)
		name := m[1] + m[2]
		switch name {
		case "":
			return tok // a string
		case "__rate_interval", "__interval", "__range":
			return "5m"
		}
		v, ok := vars[name]
		if !ok {
			missing = append(missing, name)
		}
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("%s: no value for the variables %v", expr, missing)
	}
	return out, nil
}
