package aws_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
	awsprovider "github.com/backendslice/backendslice/providers/aws"
	"github.com/backendslice/backendslice/providers/providertest"
	"github.com/backendslice/backendslice/test/awstest"
)

// resolveAs resolves src as a source of backend with p and returns the
// endpoints and the failure.
func resolveAs(p providers.Provider, backend types.NamespacedName, src v1alpha1.Source) ([]providers.Endpoint, error) {
	req := providertest.NewRequest(src)
	req.Namespace, req.Backend = backend.Namespace, backend.Name
	res, err := p.Resolve(context.Background(), req)
	return res.Endpoints, err
}

// mustResolveAs is resolveAs failing the test on an error.
func mustResolveAs(t *testing.T, p providers.Provider, backend types.NamespacedName, src v1alpha1.Source) []providers.Endpoint {
	t.Helper()
	eps, err := resolveAs(p, backend, src)
	if err != nil {
		t.Fatalf("%s: resolving %s: %v", backend, src.Name, err)
	}
	return eps
}

// wantKept checks how many listings and clients the session keeps.
func wantKept(t *testing.T, s *awsprovider.Session, what string, listings, clients int) {
	t.Helper()
	if gs, gc := s.Listings(), s.Clients(); gs != listings || gc != clients {
		t.Errorf("%s: %d listings and %d clients kept, want %d and %d", what, gs, gc, listings, clients)
	}
}

// inRegion returns src with its awsRDS or awsEC2 region set to region.
func inRegion(src v1alpha1.Source, region v1alpha1.AWSRegion) v1alpha1.Source {
	if src.AWSRDS != nil {
		rds := *src.AWSRDS
		rds.Region = region
		src.AWSRDS = &rds
	} else {
		ec2 := *src.AWSEC2
		ec2.Region = region
		src.AWSEC2 = &ec2
	}
	return src
}

// TestForgetLetsGoOfStreamsAndClients resolves backends in three regions,
// each with an RDS instance, an Aurora writer and an EC2 source, and
// forgets them step by step as the controller does: a listing stays while
// any backend reads it, each provider forgets only its own sources, and
// once every backend is gone nothing is kept.
func TestForgetLetsGoOfStreamsAndClients(t *testing.T) {
	e := newEnv(t, nil)
	aurora(e)
	e.fake.PutEC2Instance(vm("i-0a", "10"))
	regions := []v1alpha1.AWSRegion{"eu-west-1", "us-east-1", "ap-southeast-2"}
	instance := rdsSource(v1alpha1.AWSRDSSource{DBInstanceIdentifier: "aurora-1"})
	writer := rdsSource(v1alpha1.AWSRDSSource{DBClusterIdentifier: "aurora", Role: v1alpha1.AWSRDSRoleWriter})
	writer.Name = "writer"
	vms := ec2Source(v1alpha1.AWSEC2Source{InstanceIDs: []string{"i-0a"}})
	rdsP, ec2P := e.s.RDS(), e.s.EC2()

	backends := make([]types.NamespacedName, 30)
	for k := range backends {
		b := types.NamespacedName{Namespace: "team", Name: fmt.Sprintf("b-%02d", k)}
		backends[k] = b
		region := regions[k%len(regions)]
		mustResolveAs(t, rdsP, b, inRegion(instance, region))
		mustResolveAs(t, rdsP, b, inRegion(writer, region))
		mustResolveAs(t, ec2P, b, inRegion(vms, region))
	}
	// Three listings a region, one set of clients a region.
	wantKept(t, e.s, "30 backends", 9, 3)
	if got := e.fake.TotalCalls(); got != 9 {
		t.Errorf("30 backends made %d calls, want 9: one a listing", got)
	}

	for _, b := range backends {
		rdsP.Forget(b, instance.Name)
	}
	wantKept(t, e.s, "the writer sources removed", 6, 3)
	for _, b := range backends {
		rdsP.Forget(b)
		ec2P.Forget(b, vms.Name)
	}
	wantKept(t, e.s, "every RDS source removed", 3, 3)

	// Backends 0 to 2 are one a region: they keep every region's listing.
	for _, b := range backends[len(regions):] {
		ec2P.Forget(b)
	}
	wantKept(t, e.s, "all backends but one a region gone", 3, 3)
	for _, b := range backends[:len(regions)] {
		ec2P.Forget(b)
	}
	wantKept(t, e.s, "every backend gone", 0, 0)

	ec2P.Forget(types.NamespacedName{Namespace: "team", Name: "never-seen"})
	wantKept(t, e.s, "an unknown backend forgotten", 0, 0)
}

// TestSourceChangeMovesItsStreams changes sources between resolves: the
// listings a source no longer reads (another region, a cluster it no longer
// names, a role it may not use) are let go of once no other source reads
// them.
func TestSourceChangeMovesItsStreams(t *testing.T) {
	e := newEnv(t, nil)
	aurora(e)
	p := e.s.RDS()
	a := types.NamespacedName{Namespace: "team", Name: "a"}
	b := types.NamespacedName{Namespace: "team", Name: "b"}
	instance := rdsSource(v1alpha1.AWSRDSSource{DBInstanceIdentifier: "aurora-1"})
	moved := inRegion(instance, "us-east-1")

	mustResolveAs(t, p, a, instance)
	mustResolveAs(t, p, b, instance)
	wantKept(t, e.s, "a and b in eu-west-1", 1, 1)

	mustResolveAs(t, p, a, moved)
	wantKept(t, e.s, "a moved to us-east-1", 2, 2)
	mustResolveAs(t, p, b, moved)
	wantKept(t, e.s, "b moved too", 1, 1)
	if got := e.fake.Scopes()["us-east-1/rds"]; got != 1 {
		t.Errorf("us-east-1 calls = %d, want 1: a and b share the listing", got)
	}

	cluster := inRegion(rdsSource(v1alpha1.AWSRDSSource{DBClusterIdentifier: "aurora"}), "us-east-1")
	mustResolveAs(t, p, a, cluster)
	wantKept(t, e.s, "a names a cluster", 2, 1)
	mustResolveAs(t, p, a, moved)
	wantKept(t, e.s, "a names an instance again", 1, 1)
	if got := e.fake.Scopes()["us-east-1/rds"]; got != 2 {
		t.Errorf("us-east-1 calls = %d, want 2: the instances listing was kept throughout", got)
	}

	refused := inRegion(rdsSource(v1alpha1.AWSRDSSource{
		DBInstanceIdentifier: "aurora-1", AssumeRoleARN: "arn:aws:iam::123456789012:role/x"}), "us-east-1")
	for _, backend := range []types.NamespacedName{a, b} {
		if _, err := resolveAs(p, backend, refused); !providers.IsTerminal(err) {
			t.Fatalf("%s with a refused role: %v, want a terminal failure", backend, err)
		}
	}
	wantKept(t, e.s, "both sources name a refused role", 0, 0)
}

// waitForCalls waits until the fake received n requests of action.
func waitForCalls(t *testing.T, fake *awstest.Server, action string, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); fake.Calls(action) < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s calls = %d, still not %d", action, fake.Calls(action), n)
		}
	}
}

// TestForgetDuringListing forgets a backend while its listing is in flight:
// the listing still answers its caller, and does not put the listing or its
// clients back.
func TestForgetDuringListing(t *testing.T) {
	e := newEnv(t, nil)
	e.fake.PutDBInstance(dbInstance("orders", "192.0.2.10"))
	release := e.fake.Stall(awstest.DescribeDBInstances)
	t.Cleanup(release)
	p := e.s.RDS()
	a := types.NamespacedName{Namespace: "team", Name: "a"}
	src := rdsSource(v1alpha1.AWSRDSSource{DBInstanceIdentifier: "orders"})

	type answer struct {
		eps []providers.Endpoint
		err error
	}
	done := make(chan answer)
	go func() {
		eps, err := resolveAs(p, a, src)
		done <- answer{eps, err}
	}()
	waitForCalls(t, e.fake, awstest.DescribeDBInstances, 1)
	p.Forget(a)
	wantKept(t, e.s, "forgotten while listing", 0, 0)

	release()
	got := <-done
	if got.err != nil {
		t.Fatalf("the listing in flight failed: %v", got.err)
	}
	wantAddresses(t, "the caller of the listing in flight", got.eps, "192.0.2.10")
	wantKept(t, e.s, "after the listing ended", 0, 0)

	// The answer went with the listing: resolving again lists again.
	mustResolveAs(t, p, a, src)
	wantKept(t, e.s, "resolved again", 1, 1)
	if got := e.fake.Calls(awstest.DescribeDBInstances); got != 2 {
		t.Errorf("calls = %d, want 2", got)
	}
}

// TestCloseEndsListings closes the session while a listing is in flight:
// Close ends it rather than wait for AWS, its caller gets a transient
// failure, nothing is kept, and Resolve fails without calling AWS after it.
func TestCloseEndsListings(t *testing.T) {
	e := newEnv(t, nil)
	e.fake.PutEC2Instance(vm("i-0a", "10"))
	release := e.fake.Stall(awstest.DescribeInstances)
	t.Cleanup(release)
	p := e.s.EC2()
	a := types.NamespacedName{Namespace: "team", Name: "a"}
	src := ec2Source(v1alpha1.AWSEC2Source{InstanceIDs: []string{"i-0a"}})

	done := make(chan error)
	go func() {
		_, err := resolveAs(p, a, src)
		done <- err
	}()
	waitForCalls(t, e.fake, awstest.DescribeInstances, 1)
	p.Close()
	if err := <-done; err == nil || providers.IsTerminal(err) {
		t.Errorf("the listing ended by Close: %v, want a transient failure", err)
	}
	wantKept(t, e.s, "closed", 0, 0)

	_, err := resolveAs(p, a, src)
	if err == nil || providers.IsTerminal(err) {
		t.Fatalf("Resolve after Close: %v, want a transient failure", err)
	}
	wantErr(t, providers.AsError(err), false, false, v1alpha1.ReasonSourceFailed, "spec.sources[vms].awsEC2", "closed")
	wantKept(t, e.s, "resolved after Close", 0, 0)
	if got := e.fake.Calls(awstest.DescribeInstances); got != 1 {
		t.Errorf("calls = %d, want 1: nothing is listed after Close", got)
	}
}
