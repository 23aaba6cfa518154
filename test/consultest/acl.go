package consultest

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/consul/api"
)

// ReadAll is a policy that reads every service and node: what a token needs
// to see the instances of any service and their health.
const ReadAll = `service_prefix "" { policy = "read" } node_prefix "" { policy = "read" }`

// Token is an ACL token made by CreateToken.
type Token struct {
	// Secret is what a client sends.
	Secret string
	// Accessor names the token in the ACL API (RevokeToken).
	Accessor string
}

// policies numbers the policies CreateToken makes: names are unique per agent.
var policies atomic.Int64

// CreateToken makes a policy of rules (ReadAll, or a narrower one such as
// `service "web" { policy = "read" }`) and a token holding it, on an agent
// started with Config.ACLToken.
func (a *Agent) CreateToken(rules string) (Token, error) {
	if a.aclToken == "" {
		return Token{}, errors.New("the agent runs without ACLs: set Config.ACLToken")
	}
	policy, _, err := a.Client.ACL().PolicyCreate(&api.ACLPolicy{
		Name: fmt.Sprintf("consultest-%d", policies.Add(1)), Rules: rules,
	}, nil)
	if err != nil {
		return Token{}, fmt.Errorf("creating a policy: %w", err)
	}
	token, _, err := a.Client.ACL().TokenCreate(&api.ACLToken{
		Description: "consultest", Policies: []*api.ACLTokenPolicyLink{{ID: policy.ID}},
	}, nil)
	if err != nil {
		return Token{}, fmt.Errorf("creating a token: %w", err)
	}
	return Token{Secret: token.SecretID, Accessor: token.AccessorID}, nil
}

// RevokeToken deletes a token: Consul refuses it from then on ("ACL not
// found").
func (a *Agent) RevokeToken(t Token) error {
	_, err := a.Client.ACL().TokenDelete(t.Accessor, nil)
	return err
}

// StartClusters starts one agent per datacenter, at once, each with ACLs on
// (default deny, managementToken as its management token) and its node
// named after its datacenter: separate Consul clusters. Agents that started
// are returned even when another failed, for the caller to close.
func StartClusters(managementToken string, datacenters ...string) ([]*Agent, error) {
	agents := make([]*Agent, len(datacenters))
	errs := make([]error, len(datacenters))
	var wg sync.WaitGroup
	for i, dc := range datacenters {
		wg.Go(func() {
			agents[i], errs[i] = Start(Config{Node: dc, Datacenter: dc, ACLToken: managementToken})
		})
	}
	wg.Wait()
	return agents, errors.Join(errs...)
}
