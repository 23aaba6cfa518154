// Package shares_test checks, end to end on the real API server, that the
// watch budgets are divided between namespaces: a real Consul agent (its
// connections per client address set just above the controller's budget
// for it) and the hostsfile plugin as a process of its own. One namespace
// fills a budget; another namespace's new backend becomes Ready all the
// same, and nothing loops: a source the plugin refuses holds no watch and
// is not asked again for minutes.
//
// The tests run one after the other (none is parallel), so that the
// controller's counters over a quiet window are one test's.
package shares_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/backendslice/backendslice/controllers/backendprovider"
	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/providers/consul"
	"github.com/backendslice/backendslice/providers/plugin"
	"github.com/backendslice/backendslice/providers/static"
	"github.com/backendslice/backendslice/test/consultest"
	"github.com/backendslice/backendslice/test/e2e/framework"
	"github.com/backendslice/backendslice/test/plugintest"
)

// controllerNamespace holds the Secrets BackendProviders name.
const controllerNamespace = "backendslice-system"

// The budgets of this install, small enough to fill in a test. The agent
// takes agentConns connections from one client address: as many as one
// connection's budget twice, so that a namespace admitted to two
// BackendProviders on the agent would take them all without the budget
// per agent.
const (
	consulPerConnection = 15
	consulPerAgent      = 20
	agentConns          = 2 * consulPerConnection
	pluginWatches       = 12
)

var (
	ctx = context.Background()
	// agent is the Consul agent every Consul BackendProvider reaches.
	agent *consultest.Agent
	// hostsfile is the built hostsfile plugin.
	hostsfile string
	// consulWatches and plugins are the controller's providers (the
	// current ones).
	consulWatches *consul.Provider
	plugins       *plugin.Provider
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "shares-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if hostsfile, err = plugintest.BuildHostsfile(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if agent, err = consultest.Start(consultest.Config{MaxConnsPerClient: agentConns}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = agent.Close() }()
	return framework.Run(m, framework.Options{
		Providers: func(w providers.Waker) ([]providers.Provider, error) {
			c, err := consul.New(consul.Options{Address: agent.Addr, RetryDelay: 100 * time.Millisecond, MaxRetryDelay: time.Second,
				MaxWatches: consulPerConnection, MaxWatchesPerAgent: consulPerAgent, NamespaceWatchFloor: 1}, w)
			if err != nil {
				return nil, err
			}
			// The refused sources' wait is the default: minutes.
			p, err := plugin.New(plugin.Options{RetryDelay: 100 * time.Millisecond, MaxRetryDelay: time.Second,
				MaxWatches: pluginWatches, NamespaceWatchFloor: 1}, w)
			if err != nil {
				return nil, err
			}
			consulWatches, plugins = c, p
			return []providers.Provider{static.New(), c, p}, nil
		},
		ProviderChecks: backendprovider.CheckOptions{Interval: 2 * time.Second, Timeout: time.Second, RetryDelay: 250 * time.Millisecond},
		// As the chart runs it: every source through a BackendProvider.
		ControllerNamespace: controllerNamespace,
	})
}
