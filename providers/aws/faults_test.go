package aws_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/backendslice/backendslice/api/v1alpha1"
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
		{name: "replication group", action: awstest.DescribeReplicationGroups, endpoints: 1,
			src: cacheSource(v1alpha1.AWSElastiCacheSource{ReplicationGroupID: "group-4"})},
		{name: "the group's cache clusters", action: awstest.DescribeCacheClusters, endpoints: 1,
			src: cacheSource(v1alpha1.AWSElastiCacheSource{ReplicationGroupID: "group-4"})},
		{name: "Memcached cluster", action: awstest.DescribeCacheClusters, endpoints: 1,
			src: cacheSource(v1alpha1.AWSElastiCacheSource{CacheClusterID: "memo-4"})},
		{name: "serverless cache", action: awstest.DescribeServerlessCaches, endpoints: 1,
			src: cacheSource(v1alpha1.AWSElastiCacheSource{ServerlessCacheName: "lru-4"})},
		// Two shards of two nodes.
		{name: "MemoryDB cluster", action: awstest.DescribeClusters, endpoints: 4,
			src: memoryDBSource("mdb-4")},
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
				putGroup(e, fmt.Sprintf("group-%d", n), false, []string{fmt.Sprintf("203.0.113.%d", n+1)})
				e.fake.PutCacheCluster(awstest.CacheCluster{ID: fmt.Sprintf("memo-%d", n), Status: "available", Engine: "memcached",
					Nodes: []awstest.CacheNode{cacheNode(fmt.Sprintf("memo-%d", n), "0001", fmt.Sprintf("203.0.113.%d", n+11), "eu-west-1a")}})
				e.fake.PutServerlessCache(serverless(fmt.Sprintf("lru-%d", n), fmt.Sprintf("203.0.113.%d", n+21)))
				memoryDB(e, fmt.Sprintf("mdb-%d", n), "198.51.100.1", "198.51.100.2", "198.51.100.3", "198.51.100.4")
			}
			e.fake.SetPageLimit(2)
			p := providerOf(e, c.src)
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
