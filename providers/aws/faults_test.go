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

// TestRepeatedTokenFailsTheListing makes AWS hand back the pagination token
// it was asked with, forever. The listing must end at the repeat (two calls,
// not a loop until the fetch timeout) and fail as transient, naming the
// repeat, rather than publish the pages read: the source's instance is on a
// page never read, and a partial listing would call it gone and drain it.
func TestRepeatedTokenFailsTheListing(t *testing.T) {
	for _, c := range []struct {
		name   string
		action string
		src    v1alpha1.Source
		// endpoints is how many the source resolves to without the fault.
		endpoints int
	}{
		{name: "RDS instance", action: awstest.DescribeDBInstances, endpoints: 1,
			src: rdsSource(v1alpha1.AWSRDSSource{DBInstanceIdentifier: "db-4"})},
		{name: "Aurora cluster", action: awstest.DescribeDBClusters, endpoints: 1,
			src: rdsSource(v1alpha1.AWSRDSSource{DBClusterIdentifier: "cluster-4"})},
		// Five instances, their IPv4 and IPv6 addresses each.
		{name: "EC2 tags", action: awstest.DescribeInstances, endpoints: 10,
			src: ec2Source(v1alpha1.AWSEC2Source{Tags: map[string]string{"app": "web"}})},
	} {
		t.Run(c.name, func(t *testing.T) {
			// A listing that loops ends here at the latest, failing the
			// test on the message rather than hanging it.
			e := newEnv(t, func(o *awsprovider.Options) { o.FetchTimeout = 10 * time.Second })
			for n := range 5 {
				id := fmt.Sprintf("db-%d", n)
				e.fake.PutDBInstance(dbInstance(id, fmt.Sprintf("192.0.2.%d", n+1)))
				e.fake.PutDBCluster(awstest.DBCluster{Identifier: fmt.Sprintf("cluster-%d", n), Status: "available",
					Members: []awstest.ClusterMember{{Instance: id, Writer: true}}})
				e.fake.PutEC2Instance(vm(fmt.Sprintf("i-%d", n), fmt.Sprint(n+1)))
			}
			e.fake.SetPageLimit(2)
			var p providers.Provider = e.s.RDS()
			if c.src.AWSEC2 != nil {
				p = e.s.EC2()
			}
			if eps := resolve(t, p, c.src); len(eps) != c.endpoints {
				t.Fatalf("before the fault: %d endpoints, want %d: %+v", len(eps), c.endpoints, eps)
			}

			e.fake.RepeatToken(c.action)
			e.fake.ResetCalls()
			e.expire()
			start := time.Now()
			pe := resolveErr(t, p, c.src)
			t.Logf("the listing failed after %v: %v", time.Since(start), pe)
			wantErr(t, pe, false, false, v1alpha1.ReasonSourceFailed,
				"spec.sources["+c.src.Name+"]", c.action, `pagination token "2" repeated`)
			// The first page, then the page that repeated its token.
			if got := e.fake.Calls(c.action); got != 2 {
				t.Errorf("%s calls = %d, want 2: the listing must stop at the repeated token", c.action, got)
			}

			e.fake.ClearFaults()
			e.clock.Step(hold)
			if eps := resolve(t, p, c.src); len(eps) != c.endpoints {
				t.Errorf("after the fault: %d endpoints, want %d: %+v", len(eps), c.endpoints, eps)
			}
		})
	}
}
