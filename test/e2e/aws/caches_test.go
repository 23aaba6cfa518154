package aws_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/awstest"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// cacheBackend is an ExternalBackend named name in ns with one port that
// takes each node's own port, no drain period and the source.
func cacheBackend(ns, name string, src v1alpha1.Source) *v1alpha1.ExternalBackend {
	xb := backend(ns, name, src)
	xb.Spec.Service.Ports = []v1alpha1.ServicePort{{Name: "redis", Port: 6379}}
	return xb
}

// elastiCache is an awsElastiCache source of the test region.
func elastiCache(src v1alpha1.AWSElastiCacheSource) v1alpha1.Source {
	src.Region = region
	return v1alpha1.Source{Name: "cache", AWSElastiCache: &src}
}

// node is an available cache node of cluster at ip in zone, on port 6380
// (not the Service's, so that the slice shows the node's own).
func node(cluster, id, ip, zone string) awstest.CacheNode {
	return awstest.CacheNode{ID: id, Status: "available", Address: cluster + ".e2e123." + id + ".euw1.cache.amazonaws.com",
		Port: 6380, IPs: []string{ip}, Zone: zone}
}

// putGroup puts replication group id with one member per IP of each shard
// (the first of a shard its primary; see awstest.PutReplicationGroupOf),
// zones alternating between a and b.
func putGroup(id string, clusterMode bool, shards ...[]string) {
	var nodes [][]awstest.CacheNode
	n := 0
	for _, ips := range shards {
		var shard []awstest.CacheNode
		for _, ip := range ips {
			shard = append(shard, node(fmt.Sprintf("%s-%d", id, n), "0001", ip, region+[]string{"a", "b"}[n%2]))
			n++
		}
		nodes = append(nodes, shard)
	}
	fake.PutReplicationGroupOf(id, clusterMode, nodes...)
}

// published is what the slices of svc in ns publish, by address.
func published(t *testing.T, ns, svc string) map[string]discoveryv1.Endpoint {
	t.Helper()
	eps, err := framework.Published(framework.Slices(t, ns, svc))
	if err != nil {
		t.Fatal(err)
	}
	return eps
}

// TestReplicationGroupFailover publishes a group's primary and its
// readers as two Services, fails the shard over to a reader, and checks
// that the old primary leaves the writer Service (no drain period: it is
// gone from it, not draining) and joins the readers.
func TestReplicationGroupFailover(t *testing.T) {
	ns := framework.Namespace(t)
	putGroup("orders", false, []string{"192.0.2.111", "192.0.2.112", "192.0.2.113"})
	role := func(r v1alpha1.AWSCacheRole) v1alpha1.Source {
		return elastiCache(v1alpha1.AWSElastiCacheSource{ReplicationGroupID: "orders", Role: r})
	}
	framework.Create(t, cacheBackend(ns, "writer", role(v1alpha1.AWSCacheRolePrimary)))
	framework.Create(t, cacheBackend(ns, "readers", role(v1alpha1.AWSCacheRoleReaders)))
	sl := framework.WaitAddresses(t, ns, "writer", "192.0.2.111")
	if p := sl[0].Ports; len(p) != 1 || ptr.Deref(p[0].Port, 0) != 6380 {
		t.Errorf("writer slice ports %+v, want the node's port 6380", p)
	}
	if e := published(t, ns, "writer")["192.0.2.111"]; ptr.Deref(e.Hostname, "") != "orders-001" || ptr.Deref(e.Zone, "") != region+"a" {
		t.Errorf("primary %+v, want hostname orders-001 in %sa", e, region)
	}
	framework.WaitAddresses(t, ns, "readers", "192.0.2.112", "192.0.2.113")

	fake.FailoverShard("orders", "0001", "orders-002")
	framework.WaitStates(t, ns, "writer", map[string]string{"192.0.2.112": ready})
	framework.WaitStates(t, ns, "readers", map[string]string{"192.0.2.111": ready, "192.0.2.113": ready})

	// A replica rebooting stays published among the readers, not serving.
	fake.UpdateCacheCluster("orders-003", func(c *awstest.CacheCluster) { c.Status, c.Nodes[0].Status = "rebooting cluster nodes", "rebooting" })
	framework.WaitStates(t, ns, "readers", map[string]string{"192.0.2.111": ready, "192.0.2.113": notServing})
}

// TestClusterModeShards publishes every node of every shard of a
// cluster-mode group, each in its zone and named by its shard.
func TestClusterModeShards(t *testing.T) {
	ns := framework.Namespace(t)
	putGroup("carts", true, []string{"192.0.2.121", "192.0.2.122"}, []string{"192.0.2.123", "192.0.2.124"})
	xb := cacheBackend(ns, "carts", elastiCache(v1alpha1.AWSElastiCacheSource{ReplicationGroupID: "carts"}))
	framework.Create(t, xb)
	framework.WaitAddresses(t, ns, "carts", "192.0.2.121", "192.0.2.122", "192.0.2.123", "192.0.2.124")
	framework.WaitReady(t, xb)
	got := published(t, ns, "carts")
	for addr, want := range map[string][2]string{
		"192.0.2.121": {"carts-0001-001", region + "a"}, "192.0.2.122": {"carts-0001-002", region + "b"},
		"192.0.2.123": {"carts-0002-001", region + "a"}, "192.0.2.124": {"carts-0002-002", region + "b"},
	} {
		if e := got[addr]; ptr.Deref(e.Hostname, "") != want[0] || ptr.Deref(e.Zone, "") != want[1] {
			t.Errorf("%s: hostname %q zone %q, want %q in %q", addr, ptr.Deref(e.Hostname, ""), ptr.Deref(e.Zone, ""), want[0], want[1])
		}
	}

	// Primary alone cannot be kept true in cluster mode: said on status,
	// and what was published stays.
	if err := framework.Update(t, xb, func(x *v1alpha1.ExternalBackend) {
		x.Spec.Sources[0].AWSElastiCache.Role = v1alpha1.AWSCacheRolePrimary
	}); err != nil {
		t.Fatal(err)
	}
	framework.WaitCondition(t, xb, v1alpha1.ConditionResolved, metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec)
}

// TestMemcachedNodeReplacement publishes a Memcached cluster's nodes and
// replaces one: the old node drains (for the spec's hour) while the new
// one comes up not ready, then ready.
func TestMemcachedNodeReplacement(t *testing.T) {
	ns := framework.Namespace(t)
	// The third node is in the deny list (standing in for the cluster's
	// Pod range): never published, and named on status.
	fake.PutCacheCluster(awstest.CacheCluster{ID: "sessions", Status: "available", Engine: "memcached", Nodes: []awstest.CacheNode{
		node("sessions", "0001", "198.51.100.131", region+"a"), node("sessions", "0002", "198.51.100.132", region+"b"),
		node("sessions", "0004", "203.0.113.200", region+"a"),
	}})
	xb := cacheBackend(ns, "sessions", elastiCache(v1alpha1.AWSElastiCacheSource{CacheClusterID: "sessions"}))
	xb.Spec.DrainPeriod = &metav1.Duration{Duration: time.Hour}
	framework.Create(t, xb)
	framework.WaitStates(t, ns, "sessions", map[string]string{"198.51.100.131": ready, "198.51.100.132": ready})
	framework.Eventually(t, framework.Timeout, "the denied node named on status", func() error {
		if d := framework.Get(t, xb).Status.Dropped; !slices.ContainsFunc(d, func(d v1alpha1.DroppedAddress) bool { return d.Address == "203.0.113.200" }) {
			return fmt.Errorf("status.dropped %+v", d)
		}
		return nil
	})
	if e := published(t, ns, "sessions")["198.51.100.132"]; ptr.Deref(e.Hostname, "") != "sessions-0002" {
		t.Errorf("node 0002 hostname %q, want sessions-0002", ptr.Deref(e.Hostname, ""))
	}

	fake.ReplaceCacheNode("sessions", "0002", node("sessions", "0003", "198.51.100.133", region+"b"))
	framework.WaitStates(t, ns, "sessions", map[string]string{"198.51.100.131": ready, "198.51.100.132": terminating, "198.51.100.133": notServing})

	fake.FinishReplacement("sessions")
	// The removed node drains for the spec's drain period.
	framework.WaitStates(t, ns, "sessions", map[string]string{"198.51.100.131": ready, "198.51.100.132": terminating, "198.51.100.133": ready})
}

// TestServerlessCache publishes a serverless cache's endpoint resolved
// (both families where the cluster serves them) and, in another backend,
// as its name.
func TestServerlessCache(t *testing.T) {
	ns := framework.Namespace(t)
	address := "lru-e2e.serverless.euw1.cache.amazonaws.com"
	fake.PutServerlessCache(awstest.ServerlessCache{Name: "lru-e2e", Status: "available", Address: address, Port: 6379,
		IPs: []string{"203.0.113.41", "2001:db8::141"}, ReaderAddress: address, ReaderPort: 6380})
	src := elastiCache(v1alpha1.AWSElastiCacheSource{ServerlessCacheName: "lru-e2e"})
	resolved := cacheBackend(ns, "lru", src)
	framework.Create(t, resolved)
	framework.WaitAddresses(t, ns, "lru", framework.Served("203.0.113.41", "2001:db8::141")...)
	framework.WaitReady(t, resolved)

	named := cacheBackend(ns, "lru-name", src)
	named.Spec.AddressTypes = []v1alpha1.AddressType{v1alpha1.AddressTypeFQDN}
	framework.Create(t, named)
	sl := framework.WaitAddresses(t, ns, "lru-name", address)
	if sl[0].AddressType != discoveryv1.AddressTypeFQDN {
		t.Errorf("slice address type %s, want FQDN", sl[0].AddressType)
	}

	fake.SetServerlessStatus("lru-e2e", "deleting")
	framework.WaitStates(t, ns, "lru", framework.ServedOf(map[string]string{"203.0.113.41": terminating, "2001:db8::141": terminating}))
}

// TestMemoryDBCluster publishes every node of a MemoryDB cluster's shards.
func TestMemoryDBCluster(t *testing.T) {
	ns := framework.Namespace(t)
	c := awstest.MemoryDBCluster{Name: "ledger", Status: "available"}
	for s := range 2 {
		sh := awstest.MemoryDBShard{Name: fmt.Sprintf("%04d", s+1)}
		for n := range 2 {
			name := fmt.Sprintf("ledger-%04d-%03d", s+1, n+1)
			sh.Nodes = append(sh.Nodes, awstest.MemoryDBNode{Name: name, Status: "available", Port: 6379,
				Address: name + ".ledger.e2e123.memorydb." + region + ".amazonaws.com", IPs: []string{fmt.Sprintf("192.0.2.%d", 151+2*s+n)}, Zone: region + "c"})
		}
		c.Shards = append(c.Shards, sh)
	}
	fake.PutMemoryDBCluster(c)
	xb := cacheBackend(ns, "ledger", v1alpha1.Source{Name: "mdb", AWSMemoryDB: &v1alpha1.AWSMemoryDBSource{Region: region, ClusterName: "ledger"}})
	framework.Create(t, xb)
	framework.WaitAddresses(t, ns, "ledger", "192.0.2.151", "192.0.2.152", "192.0.2.153", "192.0.2.154")
	framework.WaitReady(t, xb)
	if e := published(t, ns, "ledger")["192.0.2.153"]; ptr.Deref(e.Hostname, "") != "ledger-0002-001" {
		t.Errorf("hostname %q, want ledger-0002-001", ptr.Deref(e.Hostname, ""))
	}

	fake.UpdateMemoryDBCluster("ledger", func(c *awstest.MemoryDBCluster) { c.Shards[0].Nodes[1].Status = "deleting" })
	framework.WaitStates(t, ns, "ledger", map[string]string{"192.0.2.151": ready, "192.0.2.152": terminating, "192.0.2.153": ready, "192.0.2.154": ready})
}

// TestCacheOutageAcrossRestart: ElastiCache and MemoryDB stop answering
// (throttled past every retry) while the controller restarts. The new
// controller has nothing of its own to go by: it keeps every endpoint the
// slices published, says the sources fail, and publishes the changes
// made meanwhile once AWS answers again.
func TestCacheOutageAcrossRestart(t *testing.T) {
	ns := framework.Namespace(t)
	putGroup("outage", false, []string{"203.0.113.61", "203.0.113.62"})
	fake.PutMemoryDBCluster(awstest.MemoryDBCluster{Name: "outage", Status: "available", Shards: []awstest.MemoryDBShard{{Name: "0001",
		Nodes: []awstest.MemoryDBNode{{Name: "outage-0001-001", Status: "available", Port: 6379,
			Address: "outage-0001-001.outage.e2e123.memorydb." + region + ".amazonaws.com", IPs: []string{"203.0.113.63"}, Zone: region + "a"}}}}})
	group := cacheBackend(ns, "group", elastiCache(v1alpha1.AWSElastiCacheSource{ReplicationGroupID: "outage", Role: v1alpha1.AWSCacheRolePrimary}))
	mdb := cacheBackend(ns, "mdb", v1alpha1.Source{Name: "mdb", AWSMemoryDB: &v1alpha1.AWSMemoryDBSource{Region: region, ClusterName: "outage"}})
	framework.Create(t, group)
	framework.Create(t, mdb)
	framework.WaitAddresses(t, ns, "group", "203.0.113.61")
	framework.WaitAddresses(t, ns, "mdb", "203.0.113.63")

	t.Cleanup(fake.ClearFaults)
	framework.RestartControllerAfter(t, func() {
		for _, a := range []string{awstest.DescribeReplicationGroups, awstest.DescribeCacheClusters, awstest.DescribeClusters} {
			fake.Fail(a, map[bool]string{true: "ThrottlingException", false: "Throttling"}[a == awstest.DescribeClusters], -1)
		}
		// Changed while AWS cannot tell: seen only after the outage.
		fake.FailoverShard("outage", "0001", "outage-002")
	})
	for _, xb := range []*v1alpha1.ExternalBackend{group, mdb} {
		cur := framework.WaitCondition(t, xb, v1alpha1.ConditionResolved, metav1.ConditionFalse, v1alpha1.ReasonSourceFailed)
		if len(cur.Status.Sources) != 1 || !cur.Status.Sources[0].Stale {
			t.Errorf("%s: status.sources %+v, want the source stale", xb.Name, cur.Status.Sources)
		}
	}
	// Held, not withdrawn: every endpoint is still there and ready.
	framework.WaitStates(t, ns, "group", map[string]string{"203.0.113.61": ready})
	framework.WaitStates(t, ns, "mdb", map[string]string{"203.0.113.63": ready})

	fake.ClearFaults()
	framework.WaitReady(t, group)
	framework.WaitReady(t, mdb)
	// The failover made during the outage arrives.
	framework.WaitStates(t, ns, "group", map[string]string{"203.0.113.62": ready})
}
