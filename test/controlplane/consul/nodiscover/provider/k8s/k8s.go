// Package k8s stands in for go-discover's Kubernetes provider, which
// Consul's agent registers by name: this one refuses every lookup.
package k8s

import (
	"errors"
	"log"
)

// Provider refuses every lookup.
type Provider struct{}

// Addrs refuses: Pod discovery is not built into this test agent.
func (*Provider) Addrs(map[string]string, *log.Logger) ([]string, error) {
	return nil, errors.New("discover: provider \"k8s\" is not built into this test agent")
}

// Help says the provider is left out.
func (*Provider) Help() string { return "k8s: not built into this test agent" }
