package aws_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/backendslice/backendslice/providers"
	awsprovider "github.com/backendslice/backendslice/providers/aws"
	"github.com/backendslice/backendslice/test/awstest"
)

// roleDenied is a role the fake does not let the controller assume.
const roleDenied = "arn:aws:iam::333333333333:role/nobody-trusts-me"

// TestCheckConnection checks AWS BackendProviders against the wire fake
// with the real SDK: without a role, STS GetCallerIdentity signed with the
// controller's key; with one, AssumeRole as the controller and then
// GetCallerIdentity signed with the role's key, at the provider's
// endpoint. A role the controller may not assume fails naming the role,
// the provider, the endpoint and AWS's answer, and calls nothing else; the
// role trusted afterwards, the check passes. A throttled STS fails at
// once: the check tries each call once. Nothing calls RDS or EC2.
func TestCheckConnection(t *testing.T) {
	e := newEnv(t, nil)
	e.fake.AddRole(roleA, keyA)
	check := func(p providers.Checker, c *providers.Connection) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return p.CheckConnection(ctx, c)
	}
	if err := check(e.s.RDS(), awsConnection("own", "", e.fake.URL)); err != nil {
		t.Errorf("the controller's identity: %v", err)
	}
	if n := e.fake.CallsBy(awstest.GetCallerIdentity, controllerKey); n != 1 {
		t.Errorf("GetCallerIdentity signed with the controller's key: %d call(s), want 1", n)
	}
	if err := check(e.s.EC2(), awsConnection("account-a", roleA, e.fake.URL)); err != nil {
		t.Errorf("role A: %v", err)
	}
	if a, w := e.fake.CallsBy(awstest.AssumeRole, controllerKey), e.fake.CallsBy(awstest.GetCallerIdentity, keyA); a != 1 || w != 1 {
		t.Errorf("role A: %d AssumeRole as the controller and %d GetCallerIdentity as the role, want 1 and 1", a, w)
	}

	err := check(e.s.RDS(), awsConnection("untrusted", roleDenied, e.fake.URL))
	for _, part := range []string{"AWS STS at " + e.fake.URL + ", as role " + roleDenied + " of BackendProvider untrusted: ",
		"AssumeRole: AccessDenied: User: arn:aws:sts::123456789012:assumed-role/backendslice/test is not authorized to perform: sts:AssumeRole on resource: " + roleDenied,
		"the role's trust policy must let the controller assume it"} {
		if err == nil || !strings.Contains(err.Error(), part) {
			t.Errorf("denied role: %v, want it to name %q", err, part)
		}
	}
	t.Logf("denied role: %v", err)
	e.fake.AddRole(roleDenied, "ASIATRUSTEDNOW")
	if err := check(e.s.RDS(), awsConnection("untrusted", roleDenied, e.fake.URL)); err != nil {
		t.Errorf("the role trusted now: %v", err)
	}

	e.fake.Fail(awstest.GetCallerIdentity, "Throttling", 1)
	before := e.fake.Calls(awstest.GetCallerIdentity)
	if err := check(e.s.RDS(), awsConnection("own", "", e.fake.URL)); err == nil || !strings.Contains(err.Error(), "as the controller's role, as BackendProvider own names none: GetCallerIdentity: Throttling: Rate exceeded") {
		t.Errorf("throttled: %v, want the throttling named", err)
	}
	if n := e.fake.Calls(awstest.GetCallerIdentity) - before; n != 1 {
		t.Errorf("throttled: %d GetCallerIdentity call(s), want 1 (the schedule of checks retries, not the check)", n)
	}
	for _, action := range []string{awstest.DescribeDBInstances, awstest.DescribeDBClusters, awstest.DescribeInstances} {
		if n := e.fake.Calls(action); n != 0 {
			t.Errorf("a check called %s %d time(s)", action, n)
		}
	}
	if err := check(e.s.RDS(), nil); err == nil || !strings.Contains(err.Error(), "no AWS connection") {
		t.Errorf("no connection: %v", err)
	}
}

var _ providers.Checker = (*awsprovider.Session)(nil)
