// Package promrules reads PromQL as Prometheus does, for the tests of the
// chart's alerts (the PrometheusRule) and of its Grafana dashboard: which
// series a query selects, with which label matchers, and which labels it
// groups or matches by; and it reads what a running controller exports,
// so that each query can be checked against the series that exist; and it
// runs the alerts with Prometheus's rule manager and PromQL engine over
// scripted series (EvaluateRules), to see when each is pending and fires.
package promrules
