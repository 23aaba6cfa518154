package promrules

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
)

// Evaluation is what the alerting rules say at one evaluation: the alerts
// pending (their condition holds, for less than their `for`) and firing,
// by alert name, each with its labels.
type Evaluation struct {
	// At is the evaluation's time since the series' start.
	At      time.Duration
	Pending map[string][]labels.Labels
	Firing  map[string][]labels.Labels
}

// EvaluateRules runs a rule file as a Prometheus server does, with
// Prometheus's own rule manager and PromQL engine (as `promtool test
// rules` does): over series, written as the body of a promqltest `load`
// command whose samples are step apart, it evaluates each group from time
// 0 to until, every group's interval (interval where the group sets
// none), and returns each evaluation in order. A rule that fails to
// evaluate is an error.
func EvaluateRules(ruleFile []byte, series string, step, interval, until time.Duration) ([]Evaluation, error) {
	dir, err := os.MkdirTemp("", "promrules-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(path, ruleFile, 0o600); err != nil {
		return nil, err
	}
	suite, err := promqltest.NewLazyLoader(fmt.Sprintf("load %s\n%s", step, series), promqltest.LazyLoaderOpts{Parser: promQL})
	if err != nil {
		return nil, err
	}
	defer suite.Close()
	m := rules.NewManager(&rules.ManagerOptions{
		QueryFunc:    rules.EngineQueryFunc(suite.QueryEngine(), suite.Storage()),
		AppendableV2: suite.Storage(),
		Context:      context.Background(),
		NotifyFunc:   func(context.Context, string, ...*rules.Alert) {},
		Logger:       slog.New(slog.DiscardHandler),
		Parser:       promQL,
	})
	groups, errs := m.LoadGroups(interval, labels.EmptyLabels(), "", nil, false, path)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(groups) != 1 {
		return nil, fmt.Errorf("%d rule groups, want one", len(groups))
	}
	var g *rules.Group
	for _, only := range groups {
		g = only
	}
	for _, r := range g.Rules() {
		if a, ok := r.(*rules.AlertingRule); ok {
			// As after a restart that restored the alerts' state: the
			// rules write their ALERTS series from the first evaluation.
			a.SetRestored(true)
		}
	}
	start := time.Unix(0, 0).UTC()
	var out []Evaluation
	for at := time.Duration(0); at <= until; at += g.Interval() {
		ts := start.Add(at)
		var evalErr error
		suite.WithSamplesTill(ts, func(err error) {
			if err != nil {
				evalErr = err
				return
			}
			g.Eval(suite.Context(), ts)
		})
		if evalErr != nil {
			return nil, evalErr
		}
		e := Evaluation{At: at, Pending: map[string][]labels.Labels{}, Firing: map[string][]labels.Labels{}}
		for _, r := range g.Rules() {
			if err := r.LastError(); err != nil {
				return nil, fmt.Errorf("rule %s at %s: %w", r.Name(), at, err)
			}
			a, ok := r.(*rules.AlertingRule)
			if !ok {
				continue
			}
			for _, alert := range a.ActiveAlerts() {
				switch alert.State {
				case rules.StateFiring:
					e.Firing[a.Name()] = append(e.Firing[a.Name()], alert.Labels)
				case rules.StatePending:
					e.Pending[a.Name()] = append(e.Pending[a.Name()], alert.Labels)
				}
			}
		}
		out = append(out, e)
	}
	return out, nil
}
