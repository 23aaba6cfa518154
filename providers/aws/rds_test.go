package aws_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
	awsprovider "github.com/backendslice/backendslice/providers/aws"
	"github.com/backendslice/backendslice/test/awstest"
)

func TestRDSSingleInstance(t *testing.T) {
	e := newEnv(t, nil)
	e.fake.PutDBInstance(dbInstance("orders", "192.0.2.10"))
	eps := resolve(t, e.s.RDS(), rdsSource(v1alpha1.AWSRDSSource{DBInstanceIdentifier: "Orders"}))
	want := providers.Endpoint{Address: "192.0.2.10", Zone: "eu-west-1a", Hostname: "orders", Serving: true, Port: 5432}
	if len(eps) != 1 || eps[0] != want {
		t.Fatalf("endpoints %+v, want [%+v]", eps, want)
	}
	if got := e.fake.Scopes()[region+"/rds"]; got != 1 {
		t.Errorf("requests signed for %s/rds: %d, want 1 (scopes %v)", region, got, e.fake.Scopes())
	}
}

func TestRDSStatusTable(t *testing.T) {
	e := newEnv(t, nil)
	e.fake.PutDBInstance(dbInstance("orders", "192.0.2.10"))
	src := rdsSource(v1alpha1.AWSRDSSource{DBInstanceIdentifier: "orders"})
	for _, c := range []struct {
		status               string
		serving, terminating bool
	}{
		{"available", true, false},
		{"backing-up", true, false},
		{"modifying", true, false},
		{"configuring-enhanced-monitoring", true, false},
		{"creating", false, false},
		{"rebooting", false, false},
		{"starting", false, false},
		{"stopping", false, false},
		{"stopped", false, false},
		{"failed", false, false},
		{"storage-full", false, false},
		{"incompatible-parameters", false, false},
		{"some-future-status", false, false},
		{"deleting", true, true},
	} {
		e.fake.UpdateDBInstance("orders", func(i *awstest.DBInstance) { i.Status = c.status })
		e.expire()
		eps := resolve(t, e.s.RDS(), src)
		if len(eps) != 1 || eps[0].Serving != c.serving || eps[0].Terminating != c.terminating {
			t.Errorf("status %s: endpoints %+v, want serving=%v terminating=%v", c.status, eps, c.serving, c.terminating)
		}
	}
}

func TestRDSInstanceWithoutEndpointIsLeftOut(t *testing.T) {
	e := newEnv(t, nil)
	i := dbInstance("orders", "192.0.2.10")
	i.Status, i.Address = "creating", ""
	e.fake.PutDBInstance(i)
	if eps := resolve(t, e.s.RDS(), rdsSource(v1alpha1.AWSRDSSource{DBInstanceIdentifier: "orders"})); len(eps) != 0 {
		t.Fatalf("an instance without an endpoint published %+v", eps)
	}
}

// aurora puts a cluster with a writer and two readers in the fake.
func aurora(e *env) {
	e.fake.PutDBInstance(dbInstance("aurora-1", "192.0.2.21"))
	e.fake.PutDBInstance(dbInstance("aurora-2", "192.0.2.22"))
	e.fake.PutDBInstance(dbInstance("aurora-3", "192.0.2.23"))
	e.fake.PutDBCluster(awstest.DBCluster{Identifier: "aurora", Status: "available", Members: []awstest.ClusterMember{
		{Instance: "aurora-1", Writer: true}, {Instance: "aurora-2"}, {Instance: "aurora-3"},
	}})
}

func TestAuroraFailover(t *testing.T) {
	e := newEnv(t, nil)
	aurora(e)
	writer := rdsSource(v1alpha1.AWSRDSSource{DBClusterIdentifier: "aurora", Role: v1alpha1.AWSRDSRoleWriter})
	readers := rdsSource(v1alpha1.AWSRDSSource{DBClusterIdentifier: "aurora", Role: v1alpha1.AWSRDSRoleReaders})
	anyRole := rdsSource(v1alpha1.AWSRDSSource{DBClusterIdentifier: "aurora", Role: v1alpha1.AWSRDSRoleAny})
	p := e.s.RDS()
	wantAddresses(t, "writer", resolve(t, p, writer), "192.0.2.21")
	wantAddresses(t, "readers", resolve(t, p, readers), "192.0.2.22", "192.0.2.23")
	wantAddresses(t, "any", resolve(t, p, anyRole), "192.0.2.21", "192.0.2.22", "192.0.2.23")

	e.fake.Failover("aurora", "aurora-2")
	// Until the listing expires every backend reads the same answer.
	wantAddresses(t, "writer before the refresh", resolve(t, p, writer), "192.0.2.21")
	e.expire()
	wantAddresses(t, "writer after the refresh", resolve(t, p, writer), "192.0.2.22")
	wantAddresses(t, "readers after the refresh", resolve(t, p, readers), "192.0.2.21", "192.0.2.23")
	if got := e.fake.Calls(awstest.DescribeDBClusters); got != 2 {
		t.Errorf("DescribeDBClusters calls = %d, want 2 (one a refresh)", got)
	}
}

func TestRDSDualStackAndFQDN(t *testing.T) {
	e := newEnv(t, nil)
	i := dbInstance("dual", "192.0.2.30")
	i.NetworkType, i.IPs = "DUAL", []string{"192.0.2.30", "2001:db8::30"}
	e.fake.PutDBInstance(i)
	src := rdsSource(v1alpha1.AWSRDSSource{DBInstanceIdentifier: "dual"})
	p := e.s.RDS()
	wantAddresses(t, "IPv4+IPv6", resolve(t, p, src), "192.0.2.30", "2001:db8::30")
	wantAddresses(t, "IPv6", resolve(t, p, src, v1alpha1.AddressTypeIPv6), "2001:db8::30")
	wantAddresses(t, "FQDN", resolve(t, p, src, v1alpha1.AddressTypeFQDN), i.Address)
	wantAddresses(t, "FQDN+IPv4", resolve(t, p, src, v1alpha1.AddressTypeFQDN, v1alpha1.AddressTypeIPv4), i.Address, "192.0.2.30")
}

func TestRDSTags(t *testing.T) {
	e := newEnv(t, nil)
	a, b := dbInstance("a", "192.0.2.41"), dbInstance("b", "192.0.2.42")
	a.Tags = map[string]string{"app": "orders", "env": "prod"}
	b.Tags = map[string]string{"app": "orders", "env": "dev"}
	e.fake.PutDBInstance(a)
	e.fake.PutDBInstance(b)
	p := e.s.RDS()
	wantAddresses(t, "app=orders", resolve(t, p, rdsSource(v1alpha1.AWSRDSSource{Tags: map[string]string{"app": "orders"}})), "192.0.2.41", "192.0.2.42")
	wantAddresses(t, "app=orders,env=prod", resolve(t, p, rdsSource(v1alpha1.AWSRDSSource{Tags: map[string]string{"app": "orders", "env": "prod"}})), "192.0.2.41")
	wantAddresses(t, "no match", resolve(t, p, rdsSource(v1alpha1.AWSRDSSource{Tags: map[string]string{"app": "none"}})))
}

func TestRDSDeletedInstanceIsGone(t *testing.T) {
	e := newEnv(t, nil)
	aurora(e)
	p := e.s.RDS()
	single := rdsSource(v1alpha1.AWSRDSSource{DBInstanceIdentifier: "aurora-3"})
	cluster := rdsSource(v1alpha1.AWSRDSSource{DBClusterIdentifier: "aurora", Role: v1alpha1.AWSRDSRoleReaders})
	wantAddresses(t, "before", resolve(t, p, single), "192.0.2.23")

	e.fake.DeleteDBInstance("aurora-3")
	e.expire()
	wantErr(t, resolveErr(t, p, single), true, true, "BackendNotFound",
		"spec.sources[db].awsRDS.dbInstanceIdentifier", `"aurora-3" not found`)
	wantAddresses(t, "readers without the deleted member", resolve(t, p, cluster), "192.0.2.22")

	e.fake.DeleteDBCluster("aurora")
	e.expire()
	wantErr(t, resolveErr(t, p, cluster), true, true, "BackendNotFound", "spec.sources[db].awsRDS.dbClusterIdentifier")
}

func TestRDSThrottlingStormThenSuccess(t *testing.T) {
	e := newEnv(t, nil)
	e.fake.PutDBInstance(dbInstance("orders", "192.0.2.10"))
	src := rdsSource(v1alpha1.AWSRDSSource{DBInstanceIdentifier: "orders"})
	p := e.s.RDS()

	// Two throttles: the SDK's retryer absorbs them within one call.
	e.fake.Fail(awstest.DescribeDBInstances, "Throttling", 2)
	wantAddresses(t, "after two throttles", resolve(t, p, src), "192.0.2.10")
	if got := e.fake.Calls(awstest.DescribeDBInstances); got != 3 {
		t.Errorf("calls = %d, want 3 (two throttled, one answered)", got)
	}

	// A storm outlasting the retries: transient, and held so that backends
	// retrying meanwhile do not call AWS again.
	e.fake.Fail(awstest.DescribeDBInstances, "Throttling", -1)
	e.expire()
	wantErr(t, resolveErr(t, p, src), false, false, "SourceFailed", "Throttling", "spec.sources[db].awsRDS")
	before := e.fake.Calls(awstest.DescribeDBInstances)
	for range 20 {
		wantErr(t, resolveErr(t, p, src), false, false, "SourceFailed", "Throttling")
	}
	if got := e.fake.Calls(awstest.DescribeDBInstances); got != before {
		t.Errorf("20 resolves during the hold made %d calls, want 0", got-before)
	}
	e.fake.ClearFaults()
	e.clock.Step(hold)
	wantAddresses(t, "after the storm", resolve(t, p, src), "192.0.2.10")
}

func TestRDSPagination(t *testing.T) {
	e := newEnv(t, nil)
	e.fake.SetPageLimit(2)
	for n := range 7 {
		e.fake.PutDBInstance(dbInstance(fmt.Sprintf("db-%d", n), fmt.Sprintf("192.0.2.%d", n+1)))
	}
	eps := resolve(t, e.s.RDS(), rdsSource(v1alpha1.AWSRDSSource{Tags: map[string]string{}}))
	if len(eps) != 7 {
		t.Fatalf("found %d instances over pages of 2, want 7: %+v", len(eps), eps)
	}
	if got := e.fake.Calls(awstest.DescribeDBInstances); got != 4 {
		t.Errorf("DescribeDBInstances calls = %d, want 4 pages", got)
	}
}

func TestRDSAccessDenied(t *testing.T) {
	e := newEnv(t, nil)
	e.fake.Fail(awstest.DescribeDBInstances, "AccessDenied", -1)
	pe := resolveErr(t, e.s.RDS(), rdsSource(v1alpha1.AWSRDSSource{DBInstanceIdentifier: "orders"}))
	wantErr(t, pe, true, false, v1alpha1.ReasonAccessDenied, "spec.sources[db].awsRDS", "AccessDenied", "rds:DescribeDBInstances")
	if got := e.fake.Calls(awstest.DescribeDBInstances); got != 1 {
		t.Errorf("calls = %d, want 1: access denied is not retried", got)
	}
}

func TestRDSNoCredentials(t *testing.T) {
	e := newEnv(t, func(o *awsprovider.Options) {
		o.Credentials = noCredentials{}
	})
	pe := resolveErr(t, e.s.RDS(), rdsSource(v1alpha1.AWSRDSSource{DBInstanceIdentifier: "orders"}))
	wantErr(t, pe, true, false, v1alpha1.ReasonNoCredentials, "no AWS credentials", "IRSA")
	if got := e.fake.TotalCalls(); got != 0 {
		t.Errorf("calls = %d, want 0 without credentials", got)
	}
}

func TestAssumeRoleNotAllowed(t *testing.T) {
	const allowed = "arn:aws:iam::123456789012:role/allowed"
	e := newEnv(t, func(o *awsprovider.Options) { o.AllowedRoleARNs = []string{allowed} })
	src := rdsSource(v1alpha1.AWSRDSSource{DBInstanceIdentifier: "orders", AssumeRoleARN: "arn:aws:iam::999999999999:role/admin"})
	wantErr(t, resolveErr(t, e.s.RDS(), src), true, false, v1alpha1.ReasonAccessDenied,
		"spec.sources[db].awsRDS.assumeRoleARN", "--aws-allowed-role-arns", "role/admin")
	vms := ec2Source(v1alpha1.AWSEC2Source{InstanceIDs: []string{"i-1"}, AssumeRoleARN: allowed + "x"})
	wantErr(t, resolveErr(t, e.s.EC2(), vms), true, false, v1alpha1.ReasonAccessDenied, "spec.sources[vms].awsEC2.assumeRoleARN")
	if got := e.fake.TotalCalls(); got != 0 {
		t.Errorf("calls = %d, want 0 for a refused role", got)
	}
}

func TestSharedListing(t *testing.T) {
	e := newEnv(t, nil)
	aurora(e)
	p := e.s.RDS()
	writer := rdsSource(v1alpha1.AWSRDSSource{DBClusterIdentifier: "aurora", Role: v1alpha1.AWSRDSRoleWriter})
	writer.Name = "writer"
	for range 50 {
		resolve(t, p, rdsSource(v1alpha1.AWSRDSSource{DBInstanceIdentifier: "aurora-1"}))
		resolve(t, p, writer)
	}
	if a, c := e.fake.Calls(awstest.DescribeDBInstances), e.fake.Calls(awstest.DescribeDBClusters); a != 1 || c != 1 {
		t.Errorf("100 resolves made %d DescribeDBInstances and %d DescribeDBClusters calls, want 1 each", a, c)
	}
	// Another region is another listing.
	other := rdsSource(v1alpha1.AWSRDSSource{DBInstanceIdentifier: "aurora-1"})
	other.AWSRDS.Region = "us-east-1"
	resolve(t, p, other)
	if got := e.fake.Scopes()["us-east-1/rds"]; got != 1 {
		t.Errorf("us-east-1 calls = %d, want 1", got)
	}
}

func TestRDSNewInstanceIsListedBeforeGone(t *testing.T) {
	e := newEnv(t, nil)
	e.fake.PutDBInstance(dbInstance("old", "192.0.2.51"))
	p := e.s.RDS()
	resolve(t, p, rdsSource(v1alpha1.AWSRDSSource{DBInstanceIdentifier: "old"}))
	e.fake.PutDBInstance(dbInstance("new", "192.0.2.52"))
	// However recent the listing, one that started before the source asked
	// is taken again before the instance is called gone: the instance may
	// have been made a moment before its backend.
	e.clock.Step(time.Millisecond)
	wantAddresses(t, "new instance", resolve(t, p, rdsSource(v1alpha1.AWSRDSSource{DBInstanceIdentifier: "new"})), "192.0.2.52")
	if got := e.fake.Calls(awstest.DescribeDBInstances); got != 2 {
		t.Errorf("calls = %d, want 2", got)
	}
}
