// Package consultest runs a real Consul agent for tests: bin/consul (built
// from Go modules by `make consul`) in dev mode on 127.0.0.1, every port
// moved to a free one, with helpers to register services with TTL checks and
// to flip them, to make and revoke ACL tokens, and a proxy that counts the
// requests reaching the agent.
package consultest

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/backendslice/backendslice/test/controlplane"
)

// startTimeout bounds how long an agent may take to elect itself leader.
// It is a safety bound for a stuck agent, not a measurement.
const startTimeout = time.Minute

// stopTimeout is how long an agent has to exit after SIGINT before it is killed.
const stopTimeout = 10 * time.Second

// Config describes the agent to run.
type Config struct {
	// Node is the agent's node name; "consul-test" when empty.
	Node string
	// Datacenter is the agent's datacenter; "dc1" when empty.
	Datacenter string
	// NodeMeta is the agent node's metadata.
	NodeMeta map[string]string
	// ACLToken, when set, turns ACLs on with a default policy of deny, this
	// token being the management token (and the agent's own). Agent.Client
	// uses it.
	ACLToken string
	// TLS, when true, also serves the HTTP API over TLS on HTTPSAddr, with a
	// certificate for TLSServerName only (no IP address) signed by CAFile.
	TLS bool
	// MaxConnsPerClient, when set, is the agent's
	// limits.http_max_conns_per_client (200 when unset): past it the agent
	// answers 429 to a client address.
	MaxConnsPerClient int
}

// TLSServerName is the only name in the certificate of an agent with TLS.
const TLSServerName = "consul.test"

// Agent is a running Consul agent.
type Agent struct {
	// Addr is the agent's HTTP API, host:port.
	Addr string
	// Node is the agent's node name.
	Node string
	// Client talks to the agent (with Config.ACLToken, if any).
	Client *api.Client
	// HTTPSAddr is the agent's HTTPS API, host:port, and CAFile the PEM
	// file of the CA that signed its certificate, when Config.TLS is set.
	HTTPSAddr, CAFile string

	// aclToken is Config.ACLToken.
	aclToken string
	bin      string
	args     []string
	// dir holds the agent's log.
	dir string
	log string
	cmd *exec.Cmd
	// exited is closed when the agent process ends, exitErr then saying how.
	exited  chan struct{}
	exitErr error
}

// Run starts an agent for t and stops it when t ends.
func Run(t testing.TB, cfg Config) *Agent {
	t.Helper()
	a, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.Close(); err != nil {
			t.Errorf("stopping the Consul agent: %v", err)
		}
	})
	return a
}

// Start starts an agent and waits until it is the leader of its datacenter
// with its own node in the catalog, so that registrations take at once.
func Start(cfg Config) (*Agent, error) {
	bin, err := controlplane.Binary("consul", "consul")
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(5)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "consultest-")
	if err != nil {
		return nil, err
	}
	if cfg.Node == "" {
		cfg.Node = "consul-test"
	}
	https := -1
	if cfg.TLS {
		https = ports[4]
	}
	a := &Agent{
		Addr:     fmt.Sprintf("127.0.0.1:%d", ports[0]),
		Node:     cfg.Node,
		aclToken: cfg.ACLToken,
		bin:      bin,
		dir:      dir,
		log:      filepath.Join(dir, "consul.log"),
		args: []string{"agent", "-dev", "-bind", "127.0.0.1", "-client", "127.0.0.1", "-node", cfg.Node,
			"-hcl", fmt.Sprintf("ports { http = %d, serf_lan = %d, serf_wan = %d, server = %d, https = %d, dns = -1, grpc = -1, grpc_tls = -1 }",
				ports[0], ports[1], ports[2], ports[3], https)},
	}
	if cfg.TLS {
		a.HTTPSAddr = fmt.Sprintf("127.0.0.1:%d", https)
		hcl, err := a.writeCertificates()
		if err != nil {
			return nil, errors.Join(err, os.RemoveAll(dir))
		}
		a.args = append(a.args, "-hcl", hcl)
	}
	if cfg.Datacenter != "" {
		a.args = append(a.args, "-datacenter", cfg.Datacenter)
	}
	if cfg.MaxConnsPerClient > 0 {
		a.args = append(a.args, "-hcl", fmt.Sprintf("limits { http_max_conns_per_client = %d }", cfg.MaxConnsPerClient))
	}
	for _, k := range slices.Sorted(maps.Keys(cfg.NodeMeta)) {
		a.args = append(a.args, "-node-meta", k+":"+cfg.NodeMeta[k])
	}
	if cfg.ACLToken != "" {
		a.args = append(a.args, "-hcl", fmt.Sprintf(
			`acl { enabled = true, default_policy = "deny", tokens { initial_management = %q, agent = %q } }`, cfg.ACLToken, cfg.ACLToken))
	}
	if a.Client, err = api.NewClient(&api.Config{Address: a.Addr, Token: cfg.ACLToken}); err != nil {
		return nil, err
	}
	if err := a.start(); err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	return a, nil
}

// start runs the agent process and waits for it to be ready.
func (a *Agent) start() error {
	logf, err := os.OpenFile(a.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(a.bin, a.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", a.bin, err)
	}
	exited := make(chan struct{})
	a.cmd, a.exited = cmd, exited
	go func() {
		a.exitErr = cmd.Wait()
		close(exited)
	}()
	if err := a.waitReady(); err != nil {
		return errors.Join(err, a.Stop(), fmt.Errorf("agent log:\n%s", a.logTail()))
	}
	return nil
}

// waitReady polls until the agent leads and its node is in the catalog.
func (a *Agent) waitReady() error {
	deadline := time.Now().Add(startTimeout)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-a.exited:
			return fmt.Errorf("consul agent exited while starting: %w", a.exitErr)
		case <-time.After(50 * time.Millisecond):
		}
		leader, err := a.Client.Status().Leader()
		switch {
		case err != nil:
			last = err
			continue
		case leader == "":
			last = errors.New("no leader yet")
			continue
		}
		node, _, err := a.Client.Catalog().Node(a.Node, nil)
		switch {
		case err != nil:
			last = err
		case node == nil:
			last = fmt.Errorf("node %s not in the catalog yet", a.Node)
		default:
			return nil
		}
	}
	return fmt.Errorf("consul agent at %s not ready after %s: %w", a.Addr, startTimeout, last)
}

// logTail is the end of the agent's log, for failure messages.
func (a *Agent) logTail() string {
	b, _ := os.ReadFile(a.log)
	const keep = 4000
	if len(b) > keep {
		b = b[len(b)-keep:]
	}
	return string(b)
}

// Stop stops the agent (SIGINT, then SIGKILL if it lingers), for a test of
// Consul being away; Restart starts it again. Stopping a stopped agent does
// nothing.
func (a *Agent) Stop() error {
	if a.cmd == nil {
		return nil
	}
	defer func() { a.cmd = nil }()
	_ = a.cmd.Process.Signal(os.Interrupt)
	select {
	case <-a.exited:
		return nil
	case <-time.After(stopTimeout):
		_ = a.cmd.Process.Kill()
		<-a.exited
		return fmt.Errorf("consul agent at %s did not stop within %s of SIGINT; killed", a.Addr, stopTimeout)
	}
}

// Close stops the agent for good and removes its log.
func (a *Agent) Close() error {
	return errors.Join(a.Stop(), os.RemoveAll(a.dir))
}

// Restart starts a stopped agent again on the same ports. A dev agent
// keeps nothing: the catalog starts empty, with new indexes.
func (a *Agent) Restart() error {
	if a.cmd != nil {
		return errors.New("consul agent is running; Stop it first")
	}
	return a.start()
}

// Service is a service instance registered on the agent with a TTL check.
type Service struct {
	// ID of the instance; Name when empty.
	ID   string
	Name string
	// Address of the instance; empty means the node's.
	Address string
	Tags    []string
	Meta    map[string]string
	// Status is the check's first status; passing when empty.
	Status string
}

// CheckID is the ID of the TTL check Register gives service instance id.
func CheckID(id string) string { return "ttl:" + id }

// Register registers s with a TTL check (of an hour, so that it only
// changes when a test flips it).
func (a *Agent) Register(s Service) error {
	if s.ID == "" {
		s.ID = s.Name
	}
	if s.Status == "" {
		s.Status = api.HealthPassing
	}
	return a.synced(a.Client.Agent().ServiceRegister(&api.AgentServiceRegistration{
		ID: s.ID, Name: s.Name, Address: s.Address, Tags: s.Tags, Meta: s.Meta,
		Check: &api.AgentServiceCheck{CheckID: CheckID(s.ID), TTL: "1h", Status: s.Status},
	}))
}

// RegisterOn registers s on another node than the agent's, through the
// catalog, as Consul ESM or a sync tool registers external services: node
// is created with address and meta, and s's check takes s.Status. Calling
// it again with another status flips the check.
func (a *Agent) RegisterOn(node, address string, meta map[string]string, s Service) error {
	if s.ID == "" {
		s.ID = s.Name
	}
	if s.Status == "" {
		s.Status = api.HealthPassing
	}
	_, err := a.Client.Catalog().Register(&api.CatalogRegistration{
		Node: node, Address: address, NodeMeta: meta,
		Service: &api.AgentService{ID: s.ID, Service: s.Name, Address: s.Address, Tags: s.Tags, Meta: s.Meta},
		Check:   &api.AgentCheck{Node: node, CheckID: CheckID(s.ID), Name: "external", Status: s.Status, ServiceID: s.ID},
	}, nil)
	return err
}

// SetCheck sets the TTL check of service instance id to status (passing,
// warning or critical).
func (a *Agent) SetCheck(id, status string) error {
	return a.synced(a.Client.Agent().UpdateTTL(CheckID(id), "set by the test", status))
}

// Maintenance puts service instance id in maintenance mode, or takes it out.
func (a *Agent) Maintenance(id string, on bool) error {
	if on {
		return a.synced(a.Client.Agent().EnableServiceMaintenance(id, "set by the test"))
	}
	return a.synced(a.Client.Agent().DisableServiceMaintenance(id))
}

// NodeMaintenance puts the agent's node, and so every instance on it, in
// maintenance mode, or takes it out.
func (a *Agent) NodeMaintenance(on bool) error {
	if on {
		return a.synced(a.Client.Agent().EnableNodeMaintenance("set by the test"))
	}
	return a.synced(a.Client.Agent().DisableNodeMaintenance())
}

// Deregister removes service instance id.
func (a *Agent) Deregister(id string) error {
	return a.synced(a.Client.Agent().ServiceDeregister(id))
}

// synced waits, after an agent write that returned err, until the catalog
// shows the agent's services and checks as the agent has them: the agent
// API changes the agent's own state, which it copies to the catalog (what
// health queries read) moments later.
func (a *Agent) synced(err error) error {
	if err != nil {
		return err
	}
	deadline := time.Now().Add(startTimeout)
	for {
		err := a.catalogDiff()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the catalog did not catch up with agent %s within %s: %w", a.Node, startTimeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// catalogDiff says how the catalog differs from the agent's own services
// and check statuses, leaving out what only servers register (the consul
// service and the serfHealth check); nil when it does not.
func (a *Agent) catalogDiff() error {
	local, err := a.Client.Agent().Checks()
	if err != nil {
		return err
	}
	remote, _, err := a.Client.Health().Node(a.Node, nil)
	if err != nil {
		return err
	}
	checks := map[string]string{}
	for _, c := range remote {
		if c.CheckID != "serfHealth" {
			checks[c.CheckID] = c.Status
		}
	}
	for id, c := range local {
		if checks[id] != c.Status {
			return fmt.Errorf("check %s is %q in the catalog, %q on the agent", id, checks[id], c.Status)
		}
		delete(checks, id)
	}
	for id := range checks {
		return errors.New("check " + id + " is still in the catalog")
	}
	svcs, err := a.Client.Agent().Services()
	if err != nil {
		return err
	}
	list, _, err := a.Client.Catalog().NodeServiceList(a.Node, nil)
	switch {
	case err != nil:
		return err
	case list == nil:
		return errors.New("node " + a.Node + " not in the catalog")
	}
	n := 0
	for _, s := range list.Services {
		if s.ID == "consul" {
			continue
		}
		if _, ok := svcs[s.ID]; !ok {
			return errors.New("service " + s.ID + " is still in the catalog")
		}
		n++
	}
	if n != len(svcs) {
		return fmt.Errorf("%d service(s) in the catalog, %d on the agent", n, len(svcs))
	}
	return nil
}

// freePorts returns n distinct ports free on 127.0.0.1 for both TCP and
// UDP (Serf listens on both).
func freePorts(n int) ([]int, error) {
	var ports []int
	var hold []func() error
	defer func() {
		for _, c := range hold {
			_ = c()
		}
	}()
	for attempts := 0; len(ports) < n; attempts++ {
		if attempts > 100 {
			return nil, errors.New("no free ports on 127.0.0.1")
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		hold = append(hold, l.Close)
		port := int(netip.MustParseAddrPort(l.Addr().String()).Port())
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		hold = append(hold, u.Close)
		ports = append(ports, port)
	}
	return ports, nil
}
