package framework

import (
	"fmt"
	"os"
	"testing"

	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/providers/consul"
	"github.com/backendslice/backendslice/providers/static"
	"github.com/backendslice/backendslice/test/consultest"
)

// Consul is a real Consul agent and the controller's consul provider that
// asks it.
type Consul struct {
	Agent    *consultest.Agent
	Provider *consul.Provider
}

// RunWithConsul is a TestMain body for tests against a Consul agent: it
// starts an agent as cfg says, runs the tests with a controller whose
// providers are static and consul (options, with the agent's address), and
// stops the agent. ready gets the agent and the provider before the tests
// run.
func RunWithConsul(m *testing.M, cfg consultest.Config, options consul.Options, opts Options, ready func(Consul)) int {
	a, err := consultest.Start(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	c := Consul{Agent: a}
	options.Address = a.Addr
	opts.Providers = func(w providers.Waker) ([]providers.Provider, error) {
		p, err := consul.New(options, w)
		if err != nil {
			return nil, err
		}
		c.Provider = p
		ready(c)
		return []providers.Provider{static.New(), p}, nil
	}
	code := Run(m, opts)
	if c.Provider != nil {
		c.Provider.Close()
	}
	if err := a.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the Consul agent:", err)
		code = max(code, 1)
	}
	return code
}
