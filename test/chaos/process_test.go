package chaos_test

import (
	"testing"

	"github.com/backendslice/backendslice/test/replica"
)

// controllerFlags are the flags every child runs with: the test's API
// server, its sources and short refresh intervals, so that changes show
// within seconds.
func controllerFlags() []string {
	return []string{
		"controller",
		"--kubeconfig", env.kubeconfig,
		"--dns-resolvers", env.dns.Addr,
		"--dns-query-timeout", "500ms",
		"--dns-min-refresh", "1s",
		"--dns-max-refresh", dnsMaxRefresh.String(),
		"--consul-address", env.consul.Addr,
		"--consul-wait-time", "30s",
		"--aws-endpoint-url", env.proxy.URL,
		"--aws-refresh-interval", awsRefresh.String(),
		"--aws-max-attempts", "2",
		"--aws-max-backoff", "50ms",
		"--resolve-timeout", "3s",
		"--zap-log-level", "info",
		// The chaos backends name no BackendProvider.
		"--allow-sources-without-provider",
	}
}

// newReplica prepares a controller of this checkout with the chaos
// environment's flags and extra ones; Start runs it.
func newReplica(t *testing.T, name string, extra ...string) *replica.Replica {
	t.Helper()
	requireSetUp(t)
	return replica.New(t, replica.Options{Name: name, Bin: env.bin, Args: append(controllerFlags(), extra...)})
}
