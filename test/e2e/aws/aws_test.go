// Package aws_test runs the controller with the AWS providers against a real
// kube-apiserver and the AWS wire fake (test/awstest), through the real
// aws-sdk-go-v2 clients, and checks that RDS, EC2, ElastiCache and MemoryDB
// changes end in the right EndpointSlices and status. Tests run one after another: they share
// the fake, and some inject failures into it.
package aws_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/providers/static"
	"github.com/backendslice/backendslice/test/awstest"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

const region = "eu-west-1"

// refresh is the providers' refresh interval: short, so that changes show
// within the framework's waits.
const refresh = time.Second

// fake is the AWS the controller talks to.
var fake *awstest.Server

func TestMain(m *testing.M) {
	fake = awstest.New()
	code := framework.Run(m, framework.Options{Providers: func(providers.Waker) ([]providers.Provider, error) {
		s, err := framework.AWS(fake, refresh)
		if err != nil {
			return nil, err
		}
		return []providers.Provider{static.New(), s.RDS(), s.EC2(), s.ElastiCache(), s.MemoryDB()}, nil
	}})
	fake.Close()
	os.Exit(code)
}

// backend is an ExternalBackend named name in ns with one port that takes
// the backend's own port, no drain period and the source.
func backend(ns, name string, src v1alpha1.Source) *v1alpha1.ExternalBackend {
	return &v1alpha1.ExternalBackend{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.ExternalBackendSpec{
			Service:     v1alpha1.ServiceSpec{Ports: []v1alpha1.ServicePort{{Name: "pg", Port: 5432}}},
			Sources:     []v1alpha1.Source{src},
			DrainPeriod: &metav1.Duration{},
		},
	}
}

// instance is an available DB instance of the test region on port 3306.
func instance(id, ip string) awstest.DBInstance {
	return awstest.DBInstance{
		Identifier: id, Status: "available", Address: id + ".abcdefgh.eu-west-1.rds.amazonaws.com",
		Port: 3306, Zone: "eu-west-1a", NetworkType: "IPV4", IPs: []string{ip},
	}
}

// Endpoint states, as framework.States writes them.
const (
	ready       = "true/true/false"
	notServing  = "false/false/false"
	terminating = "false/true/true"
)

func TestAuroraFailover(t *testing.T) {
	ns := framework.Namespace(t)
	fake.PutDBInstance(instance("failover-1", "192.0.2.11"))
	fake.PutDBInstance(instance("failover-2", "192.0.2.12"))
	fake.PutDBInstance(instance("failover-3", "192.0.2.13"))
	fake.PutDBCluster(awstest.DBCluster{Identifier: "failover", Status: "available", Members: []awstest.ClusterMember{
		{Instance: "failover-1", Writer: true}, {Instance: "failover-2"}, {Instance: "failover-3"},
	}})
	member := func(role v1alpha1.AWSRDSRole) v1alpha1.Source {
		return v1alpha1.Source{Name: "aurora", AWSRDS: &v1alpha1.AWSRDSSource{Region: region, DBClusterIdentifier: "failover", Role: role}}
	}
	framework.Create(t, backend(ns, "writer", member(v1alpha1.AWSRDSRoleWriter)))
	framework.Create(t, backend(ns, "readers", member(v1alpha1.AWSRDSRoleReaders)))
	sl := framework.WaitAddresses(t, ns, "writer", "192.0.2.11")
	if p := sl[0].Ports; len(p) != 1 || ptr.Deref(p[0].Port, 0) != 3306 {
		t.Errorf("writer slice ports %+v, want the instance's port 3306", p)
	}
	framework.WaitAddresses(t, ns, "readers", "192.0.2.12", "192.0.2.13")

	fake.Failover("failover", "failover-2")
	framework.WaitAddresses(t, ns, "writer", "192.0.2.12")
	framework.WaitAddresses(t, ns, "readers", "192.0.2.11", "192.0.2.13")

	// A reader rebooting stays published, not serving.
	fake.UpdateDBInstance("failover-3", func(i *awstest.DBInstance) { i.Status = "rebooting" })
	framework.WaitStates(t, ns, "readers", map[string]string{"192.0.2.11": ready, "192.0.2.13": notServing})
}

func TestEC2States(t *testing.T) {
	ns := framework.Namespace(t)
	vm := func(id, ip, state string) awstest.EC2Instance {
		return awstest.EC2Instance{ID: id, State: state, PrivateIP: ip, Zone: "eu-west-1b", Tags: map[string]string{"app": "e2e-web"}}
	}
	fake.PutEC2Instance(vm("i-e2e1", "198.51.100.21", "running"))
	fake.PutEC2Instance(vm("i-e2e2", "198.51.100.22", "pending"))
	xb := backend(ns, "web", v1alpha1.Source{Name: "vms", AWSEC2: &v1alpha1.AWSEC2Source{
		Region: region, Tags: map[string]string{"app": "e2e-web"}}})
	xb.Spec.Service.Ports[0].TargetPort = ptr.To[int32](8080)
	xb.Spec.DrainPeriod = &metav1.Duration{Duration: time.Hour}
	framework.Create(t, xb)
	framework.WaitStates(t, ns, "web", map[string]string{"198.51.100.21": ready, "198.51.100.22": notServing})

	fake.SetEC2State("i-e2e2", "running")
	fake.SetEC2State("i-e2e1", "stopping")
	framework.WaitStates(t, ns, "web", map[string]string{"198.51.100.21": terminating, "198.51.100.22": ready})

	// Stopped leaves the source: it drains for the spec's drain period;
	// shortening the period lets it go.
	fake.SetEC2State("i-e2e1", "stopped")
	if err := framework.Update(t, xb, func(x *v1alpha1.ExternalBackend) { x.Spec.DrainPeriod = &metav1.Duration{} }); err != nil {
		t.Fatal(err)
	}
	framework.WaitStates(t, ns, "web", map[string]string{"198.51.100.22": ready})
}

// TestEC2SameAddressTwice: two instances at one private address (two VPCs
// of one region) publish one endpoint, the same one at every listing,
// whatever order the provider lists them in: the running instance,
// named by its ID. The slice is not written again over eight listings.
func TestEC2SameAddressTwice(t *testing.T) {
	ns := framework.Namespace(t)
	for id, state := range map[string]string{"i-e2e-twin-a": "pending", "i-e2e-twin-b": "running"} {
		fake.PutEC2Instance(awstest.EC2Instance{ID: id, State: state, PrivateIP: "198.51.100.31", Zone: "eu-west-1b",
			Tags: map[string]string{"app": "e2e-twins"}})
	}
	framework.Create(t, backend(ns, "twins", v1alpha1.Source{Name: "vms", AWSEC2: &v1alpha1.AWSEC2Source{
		Region: region, Tags: map[string]string{"app": "e2e-twins"}}}))
	sl := framework.WaitStates(t, ns, "twins", map[string]string{"198.51.100.31": ready})
	if h := ptr.Deref(sl[0].Endpoints[0].Hostname, ""); h != "i-e2e-twin-b" {
		t.Errorf("hostname %q, want the running instance's, i-e2e-twin-b", h)
	}
	version := sl[0].ResourceVersion
	listed := fake.Calls(awstest.DescribeInstances)
	framework.Eventually(t, 30*time.Second, "eight more EC2 listings", func() error {
		if n := fake.Calls(awstest.DescribeInstances) - listed; n < 8 {
			return fmt.Errorf("%d listings", n)
		}
		return nil
	})
	sl = framework.WaitStates(t, ns, "twins", map[string]string{"198.51.100.31": ready})
	if sl[0].ResourceVersion != version {
		t.Errorf("the slice was written again while nothing changed (resourceVersion %s -> %s): now %+v",
			version, sl[0].ResourceVersion, sl[0].Endpoints)
	}
}

func TestAccessDeniedKeepsEndpoints(t *testing.T) {
	ns := framework.Namespace(t)
	fake.PutDBInstance(instance("denied", "192.0.2.31"))
	xb := backend(ns, "db", v1alpha1.Source{Name: "rds", AWSRDS: &v1alpha1.AWSRDSSource{Region: region, DBInstanceIdentifier: "denied"}})
	framework.Create(t, xb)
	framework.WaitReady(t, xb)

	fake.Fail(awstest.DescribeDBInstances, "AccessDenied", -1)
	t.Cleanup(fake.ClearFaults)
	cur := framework.WaitCondition(t, xb, v1alpha1.ConditionResolved, metav1.ConditionFalse, v1alpha1.ReasonAccessDenied)
	framework.WaitAddresses(t, ns, "db", "192.0.2.31")
	for _, s := range cur.Status.Sources {
		if s.Name == "rds" && !s.Stale {
			t.Errorf("status.sources[rds] = %+v, want stale with the endpoints kept", s)
		}
	}
}

func TestDeletedInstanceDrains(t *testing.T) {
	ns := framework.Namespace(t)
	fake.PutDBInstance(instance("deleted", "192.0.2.41"))
	xb := backend(ns, "db", v1alpha1.Source{Name: "rds", AWSRDS: &v1alpha1.AWSRDSSource{Region: region, DBInstanceIdentifier: "deleted"}})
	framework.Create(t, xb)
	framework.WaitAddresses(t, ns, "db", "192.0.2.41")

	fake.DeleteDBInstance("deleted")
	framework.WaitCondition(t, xb, v1alpha1.ConditionResolved, metav1.ConditionFalse, v1alpha1.ReasonBackendNotFound)
	framework.WaitAddresses(t, ns, "db")
}
