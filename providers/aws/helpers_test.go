package aws_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
	awsprovider "github.com/backendslice/backendslice/providers/aws"
	"github.com/backendslice/backendslice/providers/providertest"
	"github.com/backendslice/backendslice/test/awstest"
)

const (
	region   = "eu-west-1"
	interval = time.Minute
	hold     = 10 * time.Second
)

// env is a fake AWS, a session of real SDK clients pointed at it and the
// clock that ages the session's listings.
type env struct {
	fake  *awstest.Server
	s     *awsprovider.Session
	clock *clocktesting.FakeClock
}

// newEnv starts a fake and a session with static test keys, fast retries
// and a fake clock; change, when not nil, edits the options first.
func newEnv(t *testing.T, change func(*awsprovider.Options)) *env {
	t.Helper()
	fake := awstest.New()
	t.Cleanup(fake.Close)
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	opts := awsprovider.Options{
		EndpointURL:     fake.URL,
		RefreshInterval: interval,
		ErrorHold:       hold,
		MaxAttempts:     3,
		MaxBackoff:      time.Millisecond,
		Credentials:     credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", ""),
		Resolver:        fake,
		Clock:           clk,
	}
	if change != nil {
		change(&opts)
	}
	s, err := awsprovider.New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	// Cleanups run last first: the session's listings end before the fake.
	t.Cleanup(s.Close)
	return &env{fake: fake, s: s, clock: clk}
}

// expire ages every listing past its lifetime, so the next Resolve lists again.
func (e *env) expire() { e.clock.Step(interval) }

// rdsSource is an awsRDS source named db in the test region.
func rdsSource(src v1alpha1.AWSRDSSource) v1alpha1.Source {
	src.Region = region
	return v1alpha1.Source{Name: "db", AWSRDS: &src}
}

// ec2Source is an awsEC2 source named vms in the test region.
func ec2Source(src v1alpha1.AWSEC2Source) v1alpha1.Source {
	src.Region = region
	return v1alpha1.Source{Name: "vms", AWSEC2: &src}
}

// providerOf is the provider of e's session that resolves src.
func providerOf(e *env, src v1alpha1.Source) providers.Provider {
	switch {
	case src.AWSEC2 != nil:
		return e.s.EC2()
	case src.AWSElastiCache != nil:
		return e.s.ElastiCache()
	case src.AWSMemoryDB != nil:
		return e.s.MemoryDB()
	}
	return e.s.RDS()
}

// resolve resolves src with p, failing the test on an error.
func resolve(t *testing.T, p providers.Provider, src v1alpha1.Source, types ...v1alpha1.AddressType) []providers.Endpoint {
	t.Helper()
	res, err := p.Resolve(context.Background(), providertest.NewRequest(src, types...))
	if err != nil {
		t.Fatalf("Resolve %s: %v", src.Name, err)
	}
	if res.RefreshAfter != interval {
		t.Errorf("RefreshAfter = %v, want the refresh interval %v", res.RefreshAfter, interval)
	}
	return res.Endpoints
}

// resolveErr resolves src with p and returns its failure, failing the test
// when it succeeds or the failure is not a *providers.Error.
func resolveErr(t *testing.T, p providers.Provider, src v1alpha1.Source) *providers.Error {
	t.Helper()
	res, err := p.Resolve(context.Background(), providertest.NewRequest(src))
	if err == nil {
		t.Fatalf("Resolve %s succeeded with %+v; want a failure", src.Name, res.Endpoints)
	}
	var pe *providers.Error
	if !errors.As(err, &pe) {
		t.Fatalf("error %v (%T) is not a *providers.Error", err, err)
	}
	return pe
}

// wantErr checks a failure's kind, reason and message.
func wantErr(t *testing.T, pe *providers.Error, terminal, gone bool, reason string, contains ...string) {
	t.Helper()
	if pe.Terminal != terminal || pe.Gone != gone || pe.Reason != reason {
		t.Errorf("failure (terminal=%v, gone=%v, %s), want (terminal=%v, gone=%v, %s): %v",
			pe.Terminal, pe.Gone, pe.Reason, terminal, gone, reason, pe)
	}
	for _, c := range contains {
		if !strings.Contains(pe.Error(), c) {
			t.Errorf("message %q does not contain %q", pe.Error(), c)
		}
	}
}

// addresses lists the endpoints' addresses as a set.
func addresses(eps []providers.Endpoint) map[string]bool {
	out := map[string]bool{}
	for _, e := range eps {
		out[e.Address] = true
	}
	return out
}

// wantAddresses checks that eps hold exactly addrs.
func wantAddresses(t *testing.T, what string, eps []providers.Endpoint, addrs ...string) {
	t.Helper()
	got := addresses(eps)
	if len(got) != len(addrs) || len(eps) != len(addrs) {
		t.Fatalf("%s: got %v, want %v", what, got, addrs)
	}
	for _, a := range addrs {
		if !got[a] {
			t.Fatalf("%s: got %v, want %v", what, got, addrs)
		}
	}
}

// dbInstance is an available instance with one IPv4 address in 192.0.2.0/24.
func dbInstance(id, ip string) awstest.DBInstance {
	return awstest.DBInstance{
		Identifier: id, Status: "available", Address: id + ".abcdefgh.eu-west-1.rds.amazonaws.com",
		Port: 5432, Zone: "eu-west-1a", NetworkType: "IPV4", IPs: []string{ip},
	}
}

// noCredentials is a credential chain that finds nothing, as the default
// chain does on a machine without any.
type noCredentials struct{}

func (noCredentials) Retrieve(context.Context) (awssdk.Credentials, error) {
	return awssdk.Credentials{}, errors.New("no EC2 IMDS role found")
}

// settingsOf are the AWS settings of c, which the test built as such.
func settingsOf(c *providers.Connection) *awsprovider.Settings {
	s, _ := providers.SettingsOf[*awsprovider.Settings](c)
	return s
}
