// Package plugins_test runs provider plugins end to end on the real API
// server: both example plugins (hostsfile in Go on the SDK, inventory in
// Python from the protocol document) as processes of their own over real
// HTTP and HTTPS, and plugins built to misbehave (in this process, over
// real HTTP). A real Consul agent runs beside them, for the benchmark that
// compares a plugin's push with Consul's in the same run.
package plugins_test

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

// testChecks check BackendProviders' connections often, so that Ready
// turns within a test.
var testChecks = backendprovider.CheckOptions{Interval: 2 * time.Second, Timeout: time.Second, RetryDelay: 250 * time.Millisecond}

var (
	ctx = context.Background()
	// hostsfile is the built hostsfile plugin, verbatim the plugin that
	// answers what its file says.
	hostsfile, verbatim string
	// agent is the Consul agent the benchmark compares with.
	agent *consultest.Agent
	// plugins is the controller's plugin provider (the current one: a
	// restart of the controller makes another).
	plugins *plugin.Provider
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "plugins-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if hostsfile, err = plugintest.BuildHostsfile(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if verbatim, err = plugintest.BuildVerbatim(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if agent, err = consultest.Start(consultest.Config{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = agent.Close() }()
	return framework.Run(m, framework.Options{
		Providers: func(w providers.Waker) ([]providers.Provider, error) {
			c, err := consul.New(consul.Options{Address: agent.Addr, RetryDelay: 100 * time.Millisecond, MaxRetryDelay: time.Second}, w)
			if err != nil {
				return nil, err
			}
			p, err := plugin.New(plugin.Options{RetryDelay: 100 * time.Millisecond, MaxRetryDelay: time.Second}, w)
			if err != nil {
				return nil, err
			}
			plugins = p
			return []providers.Provider{static.New(), c, p}, nil
		},
		ProviderChecks: testChecks,
		// As the chart runs it: every source through a BackendProvider.
		ControllerNamespace: controllerNamespace,
	})
}
