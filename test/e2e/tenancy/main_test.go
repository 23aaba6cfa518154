// Package tenancy_test runs the controller as a multi-tenant install runs
// it: sources must name a BackendProvider (AllowSourcesWithoutProvider is
// off, as in the chart), Secrets are read from the controller's own
// namespace only, and every provider is real: static, dns against
// authoritative servers on 127.0.0.1, consul against two real Consul agents
// with ACLs on (two clusters, two datacenters), aws against the AWS wire
// fake with STS AssumeRole. The tests check what the platform team's rules
// promise a tenant and the platform team: who may publish through which
// provider, that a refused source costs the backend nothing (not one
// query), and that access taken away takes the endpoints with it at once.
//
// The controller's own connections (its flags) point at decoys that count
// what reaches them: in this install no source may use them.
package tenancy_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/controllers/backendprovider"
	"github.com/backendslice/backendslice/providers"
	awsprovider "github.com/backendslice/backendslice/providers/aws"
	"github.com/backendslice/backendslice/providers/consul"
	"github.com/backendslice/backendslice/providers/dns"
	"github.com/backendslice/backendslice/providers/static"
	"github.com/backendslice/backendslice/test/awstest"
	"github.com/backendslice/backendslice/test/consultest"
	"github.com/backendslice/backendslice/test/dnstest"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// controllerNamespace is the namespace the controller runs in: the only one
// whose Secrets it reads.
const controllerNamespace = "backendslice-system"

// zone is the DNS zone of the tests' names, on both DNS servers.
const zone = "tenancy.test"

// region is the AWS region of the AWS BackendProviders.
const region = "eu-west-1"

// managementToken is the management token of both Consul agents.
const managementToken = "4b0c3c8e-6a0e-4c52-9d55-7a1d5e2f9c01"

// testChecks check BackendProviders' connections at a test's pace: every
// 2 seconds while they pass, from a quarter of a second after a failure.
var testChecks = backendprovider.CheckOptions{Interval: 2 * time.Second, Timeout: time.Second, RetryDelay: 250 * time.Millisecond}

// checkBound is how soon after its connection breaks (or comes back) a
// provider's Ready condition must say so: the wait for the next check, and
// the retries that confirm the failures in a row (3: a quarter, a half and
// a whole second after each other) or the passes (2), with a second of
// slack for the reconciles and status writes in between.
const checkBound = 2*time.Second + 250*time.Millisecond + 500*time.Millisecond + time.Second + time.Second

// controllerKey is the access key of the controller's own AWS credentials:
// it signs the AssumeRole calls and the calls of providers without a role.
const controllerKey = "AKIDEXAMPLE"

var (
	// k8s is an administrator's client.
	k8s client.Client
	// east and west are two Consul clusters: agents of datacenters east and
	// west, ACLs on with a default policy of deny.
	east, west *consultest.Agent
	// tenantDNS is the DNS server the dns BackendProviders name.
	tenantDNS *dnstest.Server
	// ownDNS is the controller's own resolver (--dns-resolvers): no source
	// may reach it in this install.
	ownDNS *dnstest.Server
	// ownConsul is the controller's own Consul address (--consul-address):
	// it counts whatever reaches it, which must be nothing.
	ownConsul *counter
	// ownAWS is the controller's own AWS endpoint (--aws-endpoint-url): its
	// calls must stay at zero.
	ownAWS *awstest.Server
	// fakes resolves the RDS endpoint names of every AWS fake the tests start.
	fakes = &fakeResolver{}
)

// ctx is the context of the tests' API calls.
var ctx = context.Background()

func TestMain(m *testing.M) { os.Exit(run(m)) }

// run starts the Consul agents, DNS servers and AWS fakes, runs the tests
// against a controller wired to them and stops everything.
func run(m *testing.M) int {
	agents, err := consultest.StartClusters(managementToken, "east", "west")
	defer func() {
		for _, a := range agents {
			if a != nil {
				_ = a.Close()
			}
		}
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	east, west = agents[0], agents[1]
	if tenantDNS, err = dnstest.New(zone); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = tenantDNS.Stop() }()
	if ownDNS, err = dnstest.New(zone); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = ownDNS.Stop() }()
	ownConsul = newCounter()
	defer ownConsul.Close()
	ownAWS = awstest.New()
	defer ownAWS.Close()
	fakes.add(ownAWS)

	code := framework.Run(m, framework.Options{
		Providers:      newProviders,
		ProviderChecks: testChecks,
		// As the chart installs it: sources must name a provider.
		ControllerNamespace: controllerNamespace,
		Started: func(e *framework.Env) error {
			k8s = e.Client
			return nil
		},
	})
	// Whatever the tests did, the controller's own connections were never
	// used: every source of this install names a BackendProvider.
	if n := ownConsul.count(); n > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: the controller's own Consul address received %d request(s) (%v)\n", n, ownConsul.paths())
		code = max(code, 1)
	}
	if n := ownAWS.TotalCalls(); n > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: the controller's own AWS endpoint received %d call(s)\n", n)
		code = max(code, 1)
	}
	return code
}

// newProviders builds the controller's providers, each wired to the
// controller's own decoy connection: static, dns, consul, aws (RDS, EC2,
// ElastiCache, MemoryDB).
// It runs again at every controller restart.
func newProviders(w providers.Waker) ([]providers.Provider, error) {
	d, err := dns.New(dns.Options{
		Resolvers:    []string{ownDNS.Addr},
		QueryTimeout: 500 * time.Millisecond,
		MinRefresh:   time.Second,
		MaxRefresh:   time.Minute,
	})
	if err != nil {
		return nil, err
	}
	c, err := consul.New(consul.Options{
		Address: ownConsul.addr,
		// Short retries: a rotated token is tried again within a second.
		RetryDelay: 100 * time.Millisecond, MaxRetryDelay: time.Second,
	}, w)
	if err != nil {
		return nil, err
	}
	s, err := awsprovider.New(context.Background(), awsprovider.Options{
		EndpointURL:     ownAWS.URL,
		Credentials:     credentials.NewStaticCredentialsProvider(controllerKey, "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", ""),
		Resolver:        fakes,
		RefreshInterval: time.Second,
		ErrorHold:       500 * time.Millisecond,
		MaxAttempts:     2,
		MaxBackoff:      10 * time.Millisecond,
	})
	if err != nil {
		c.Close()
		return nil, err
	}
	return []providers.Provider{static.New(), d, c, s.RDS(), s.EC2(), s.ElastiCache(), s.MemoryDB()}, nil
}

// counter is an HTTP server that answers 503 to everything and counts it:
// the controller's own Consul, which nothing may ask.
type counter struct {
	addr string
	srv  *httptest.Server
	n    atomic.Int64
	mu   sync.Mutex
	seen []string
}

func newCounter() *counter {
	c := &counter{}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.n.Add(1)
		c.mu.Lock()
		c.seen = append(c.seen, r.URL.Path)
		c.mu.Unlock()
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	c.addr = c.srv.Listener.Addr().String()
	return c
}

func (c *counter) count() int64 { return c.n.Load() }

func (c *counter) paths() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.seen...)
}

// Close stops the server, ending the requests in flight.
func (c *counter) Close() {
	c.srv.CloseClientConnections()
	c.srv.Close()
}
