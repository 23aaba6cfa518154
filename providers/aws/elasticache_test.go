package aws_test

import (
	"fmt"
	"testing"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/test/awstest"
)

// cacheSource is an awsElastiCache source named cache in the test region.
func cacheSource(src v1alpha1.AWSElastiCacheSource) v1alpha1.Source {
	src.Region = region
	return v1alpha1.Source{Name: "cache", AWSElastiCache: &src}
}

// memoryDBSource is an awsMemoryDB source named mdb in the test region.
func memoryDBSource(name string) v1alpha1.Source {
	return v1alpha1.Source{Name: "mdb", AWSMemoryDB: &v1alpha1.AWSMemoryDBSource{Region: region, ClusterName: name}}
}

// cacheNode is an available node of cluster id at ip, in zone.
func cacheNode(cluster, node, ip, zone string) awstest.CacheNode {
	return awstest.CacheNode{ID: node, Status: "available", Address: cluster + ".abc123." + node + ".euw1.cache.amazonaws.com",
		Port: 6379, IPs: []string{ip}, Zone: zone}
}

// putGroup puts a replication group id of shards, each a list of member
// IPs (the first the primary; see awstest.PutReplicationGroupOf), the
// members' zones alternating between eu-west-1a and eu-west-1b.
func putGroup(e *env, id string, clusterMode bool, shards ...[]string) {
	var nodes [][]awstest.CacheNode
	n := 0
	for _, ips := range shards {
		var shard []awstest.CacheNode
		for _, ip := range ips {
			shard = append(shard, cacheNode(fmt.Sprintf("%s-%d", id, n), "0001", ip, []string{"eu-west-1a", "eu-west-1b"}[n%2]))
			n++
		}
		nodes = append(nodes, shard)
	}
	e.fake.PutReplicationGroupOf(id, clusterMode, nodes...)
}

// byAddress is the endpoints by address.
func byAddress(eps []providers.Endpoint) map[string]providers.Endpoint {
	out := map[string]providers.Endpoint{}
	for _, e := range eps {
		out[e.Address] = e
	}
	return out
}

func TestReplicationGroupRoles(t *testing.T) {
	e := newEnv(t, nil)
	putGroup(e, "orders", false, []string{"192.0.2.11", "192.0.2.12", "192.0.2.13"})
	p := e.s.ElastiCache()
	primary := cacheSource(v1alpha1.AWSElastiCacheSource{ReplicationGroupID: "Orders", Role: v1alpha1.AWSCacheRolePrimary})
	readers := cacheSource(v1alpha1.AWSElastiCacheSource{ReplicationGroupID: "orders", Role: v1alpha1.AWSCacheRoleReaders})
	all := cacheSource(v1alpha1.AWSElastiCacheSource{ReplicationGroupID: "orders"})

	eps := resolve(t, p, primary)
	want := providers.Endpoint{Address: "192.0.2.11", Zone: "eu-west-1a", Hostname: "orders-001", Serving: true, Port: 6379}
	if len(eps) != 1 || eps[0] != want {
		t.Fatalf("primary: %+v, want [%+v]", eps, want)
	}
	wantAddresses(t, "readers", resolve(t, p, readers), "192.0.2.12", "192.0.2.13")
	wantAddresses(t, "all", resolve(t, p, all), "192.0.2.11", "192.0.2.12", "192.0.2.13")
	if got := byAddress(resolve(t, p, all))["192.0.2.12"]; got.Zone != "eu-west-1b" || got.Hostname != "orders-002" {
		t.Errorf("reader 192.0.2.12: %+v, want zone eu-west-1b and hostname orders-002", got)
	}
	if got := e.fake.Scopes()[region+"/elasticache"]; got != 2 {
		t.Errorf("requests signed for %s/elasticache: %d, want 2 (the groups and the cache clusters; scopes %v)", region, got, e.fake.Scopes())
	}

	// A failover moves the primary at the next refresh: the old primary
	// leaves the primary source and joins the readers.
	e.fake.FailoverShard("orders", "0001", "orders-002")
	e.expire()
	wantAddresses(t, "primary after the failover", resolve(t, p, primary), "192.0.2.12")
	wantAddresses(t, "readers after the failover", resolve(t, p, readers), "192.0.2.11", "192.0.2.13")
}

func TestReplicationGroupClusterMode(t *testing.T) {
	e := newEnv(t, nil)
	putGroup(e, "sessions", true, []string{"192.0.2.21", "192.0.2.22"}, []string{"192.0.2.23", "192.0.2.24"})
	p := e.s.ElastiCache()
	eps := resolve(t, p, cacheSource(v1alpha1.AWSElastiCacheSource{ReplicationGroupID: "sessions"}))
	want := map[string]providers.Endpoint{
		"192.0.2.21": {Address: "192.0.2.21", Zone: "eu-west-1a", Hostname: "sessions-0001-001", Serving: true, Port: 6379},
		"192.0.2.22": {Address: "192.0.2.22", Zone: "eu-west-1b", Hostname: "sessions-0001-002", Serving: true, Port: 6379},
		"192.0.2.23": {Address: "192.0.2.23", Zone: "eu-west-1a", Hostname: "sessions-0002-001", Serving: true, Port: 6379},
		"192.0.2.24": {Address: "192.0.2.24", Zone: "eu-west-1b", Hostname: "sessions-0002-002", Serving: true, Port: 6379},
	}
	if got := byAddress(eps); len(eps) != 4 || !mapsEqual(got, want) {
		t.Fatalf("cluster mode: %+v, want every node of both shards %+v", eps, want)
	}
	// AWS reports no roles in cluster mode: primary and readers cannot be
	// kept true, and say so.
	pe := resolveErr(t, p, cacheSource(v1alpha1.AWSElastiCacheSource{ReplicationGroupID: "sessions", Role: v1alpha1.AWSCacheRolePrimary}))
	wantErr(t, pe, true, false, v1alpha1.ReasonInvalidSpec,
		"spec.sources[cache].awsElastiCache.role: replication group sessions runs in cluster mode", "use role all")
}

func mapsEqual(a, b map[string]providers.Endpoint) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestCacheStateTable walks the statuses of a Memcached cluster and of its
// node through the table of caches.go.
func TestCacheStateTable(t *testing.T) {
	e := newEnv(t, nil)
	e.fake.PutCacheCluster(awstest.CacheCluster{ID: "memo", Status: "available", Engine: "memcached",
		Nodes: []awstest.CacheNode{cacheNode("memo", "0001", "192.0.2.31", "eu-west-1a")}})
	src := cacheSource(v1alpha1.AWSElastiCacheSource{CacheClusterID: "memo"})
	for _, c := range []struct {
		cluster, node                 string
		published, serving, terminate bool
	}{
		{"available", "available", true, true, false},
		{"modifying", "available", true, true, false},
		{"snapshotting", "available", true, true, false},
		{"deleting", "available", true, true, true},
		{"available", "deleting", true, true, true},
		{"creating", "creating", true, false, false},
		{"rebooting cluster nodes", "rebooting", true, false, false},
		{"available", "rebooting", true, false, false},
		{"incompatible-network", "available", true, false, false},
		{"restore-failed", "available", true, false, false},
		{"some-future-status", "available", true, false, false},
		{"deleting", "rebooting", true, false, true},
		{"deleted", "available", false, false, false},
	} {
		e.fake.UpdateCacheCluster("memo", func(cc *awstest.CacheCluster) { cc.Status, cc.Nodes[0].Status = c.cluster, c.node })
		e.expire()
		eps := resolve(t, e.s.ElastiCache(), src)
		switch {
		case !c.published && len(eps) != 0:
			t.Errorf("cluster %s, node %s: published %+v, want nothing", c.cluster, c.node, eps)
		case c.published && (len(eps) != 1 || eps[0].Serving != c.serving || eps[0].Terminating != c.terminate):
			t.Errorf("cluster %s, node %s: %+v, want serving=%v terminating=%v", c.cluster, c.node, eps, c.serving, c.terminate)
		}
	}
}

// TestMemcachedNodeReplacement replaces a node as AWS does: the new one
// comes up beside the old one, which is listed for removal (it drains
// while still serving), then goes.
func TestMemcachedNodeReplacement(t *testing.T) {
	e := newEnv(t, nil)
	e.fake.PutCacheCluster(awstest.CacheCluster{ID: "memo", Status: "available", Engine: "memcached", Nodes: []awstest.CacheNode{
		cacheNode("memo", "0001", "192.0.2.41", "eu-west-1a"), cacheNode("memo", "0002", "192.0.2.42", "eu-west-1b"),
	}})
	p, src := e.s.ElastiCache(), cacheSource(v1alpha1.AWSElastiCacheSource{CacheClusterID: "memo"})
	eps := byAddress(resolve(t, p, src))
	if eps["192.0.2.41"].Hostname != "memo-0001" || eps["192.0.2.42"].Zone != "eu-west-1b" || len(eps) != 2 {
		t.Fatalf("nodes %+v, want memo-0001 and memo-0002 in their zones", eps)
	}

	e.fake.ReplaceCacheNode("memo", "0002", cacheNode("memo", "0003", "192.0.2.43", "eu-west-1b"))
	e.expire()
	eps = byAddress(resolve(t, p, src))
	for addr, want := range map[string][2]bool{"192.0.2.41": {true, false}, "192.0.2.42": {true, true}, "192.0.2.43": {false, false}} {
		if got, ok := eps[addr]; !ok || got.Serving != want[0] || got.Terminating != want[1] {
			t.Errorf("during the replacement %s: %+v, want serving=%v terminating=%v", addr, got, want[0], want[1])
		}
	}

	e.fake.FinishReplacement("memo")
	e.expire()
	wantAddresses(t, "after the replacement", resolve(t, p, src), "192.0.2.41", "192.0.2.43")
}

// serverless is an available serverless cache name at ips, whose reader
// endpoint is its endpoint's name on port 6380, as AWS makes them.
func serverless(name string, ips ...string) awstest.ServerlessCache {
	address := name + "-abc123.serverless.euw1.cache.amazonaws.com"
	return awstest.ServerlessCache{Name: name, Status: "available", Address: address, Port: 6379, IPs: ips,
		ReaderAddress: address, ReaderPort: 6380}
}

func TestServerlessCache(t *testing.T) {
	e := newEnv(t, nil)
	e.fake.PutServerlessCache(serverless("lru", "192.0.2.51", "2001:db8::51"))
	p := e.s.ElastiCache()
	src := cacheSource(v1alpha1.AWSElastiCacheSource{ServerlessCacheName: "lru"})
	eps := resolve(t, p, src, v1alpha1.AddressTypeIPv4, v1alpha1.AddressTypeIPv6)
	wantAddresses(t, "resolved", eps, "192.0.2.51", "2001:db8::51")
	if eps[0].Port != 6379 || eps[0].Hostname != "lru" || !eps[0].Serving {
		t.Errorf("endpoint %+v, want port 6379, hostname lru, serving", eps[0])
	}
	eps = resolve(t, p, src, v1alpha1.AddressTypeFQDN)
	wantAddresses(t, "FQDN", eps, "lru-abc123.serverless.euw1.cache.amazonaws.com")
	readers := cacheSource(v1alpha1.AWSElastiCacheSource{ServerlessCacheName: "lru", Role: v1alpha1.AWSCacheRoleReaders})
	if eps := resolve(t, p, readers, v1alpha1.AddressTypeIPv4); len(eps) != 1 || eps[0].Port != 6380 {
		t.Errorf("readers: %+v, want the reader endpoint on 6380", eps)
	}

	e.fake.SetServerlessStatus("lru", "deleting")
	e.expire()
	if eps := resolve(t, p, src, v1alpha1.AddressTypeIPv4); len(eps) != 1 || !eps[0].Terminating {
		t.Errorf("deleting: %+v, want draining", eps)
	}
	e.fake.DeleteServerlessCache("lru")
	e.expire()
	wantErr(t, resolveErr(t, p, src), true, true, v1alpha1.ReasonBackendNotFound,
		`spec.sources[cache].awsElastiCache.serverlessCacheName: serverless cache "lru" not found in eu-west-1`)
}

// memoryDB puts a MemoryDB cluster name of two shards of two nodes.
func memoryDB(e *env, name string, ips ...string) {
	c := awstest.MemoryDBCluster{Name: name, Status: "available"}
	for s := range 2 {
		sh := awstest.MemoryDBShard{Name: fmt.Sprintf("%04d", s+1)}
		for n := range 2 {
			node := fmt.Sprintf("%s-%04d-%03d", name, s+1, n+1)
			sh.Nodes = append(sh.Nodes, awstest.MemoryDBNode{Name: node, Status: "available",
				Address: node + "." + name + ".abc123.memorydb.eu-west-1.amazonaws.com", Port: 6379,
				IPs: []string{ips[2*s+n]}, Zone: []string{"eu-west-1a", "eu-west-1b"}[n]})
		}
		c.Shards = append(c.Shards, sh)
	}
	e.fake.PutMemoryDBCluster(c)
}

func TestMemoryDBShards(t *testing.T) {
	e := newEnv(t, nil)
	memoryDB(e, "ledger", "198.51.100.1", "198.51.100.2", "198.51.100.3", "198.51.100.4")
	p, src := e.s.MemoryDB(), memoryDBSource("Ledger")
	eps := byAddress(resolve(t, p, src))
	want := providers.Endpoint{Address: "198.51.100.3", Zone: "eu-west-1a", Hostname: "ledger-0002-001", Serving: true, Port: 6379}
	if len(eps) != 4 || eps["198.51.100.3"] != want {
		t.Fatalf("endpoints %+v, want four with %+v", eps, want)
	}
	if got := e.fake.Scopes()[region+"/memorydb"]; got != 1 {
		t.Errorf("requests signed for %s/memorydb: %d, want 1", region, got)
	}

	// A node replaced: the old one deleting drains, the new one creating
	// is not ready.
	e.fake.UpdateMemoryDBCluster("ledger", func(c *awstest.MemoryDBCluster) {
		c.Shards[1].Nodes[0].Status = "deleting"
		c.Shards[1].Nodes = append(c.Shards[1].Nodes, awstest.MemoryDBNode{Name: "ledger-0002-003", Status: "creating",
			Address: "ledger-0002-003.ledger.abc123.memorydb.eu-west-1.amazonaws.com", Port: 6379, IPs: []string{"198.51.100.5"}, Zone: "eu-west-1a"})
	})
	e.expire()
	eps = byAddress(resolve(t, p, src))
	if old, fresh := eps["198.51.100.3"], eps["198.51.100.5"]; !old.Serving || !old.Terminating || fresh.Serving || fresh.Terminating || len(eps) != 5 {
		t.Errorf("during a replacement: old %+v, new %+v; want the old draining and the new not ready", old, fresh)
	}

	e.fake.DeleteMemoryDBCluster("ledger")
	e.expire()
	wantErr(t, resolveErr(t, p, src), true, true, v1alpha1.ReasonBackendNotFound,
		`spec.sources[mdb].awsMemoryDB.clusterName: MemoryDB cluster "ledger" not found in eu-west-1`)
}
