package aws_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/test/awstest"
)

// TestCacheListingsPageAndRetryThrottling reads caches from listings of
// several pages while AWS throttles the first calls of two of them (the
// Query protocol's Throttling, the JSON protocol's ThrottlingException):
// the SDK retries within the call, and each listing reads all its pages.
func TestCacheListingsPageAndRetryThrottling(t *testing.T) {
	e := newEnv(t, nil)
	for n := range 5 {
		putGroup(e, fmt.Sprintf("group-%d", n), false, []string{fmt.Sprintf("192.0.2.%d", n+1)})
		e.fake.PutServerlessCache(serverless(fmt.Sprintf("lru-%d", n), fmt.Sprintf("192.0.2.%d", n+11)))
		memoryDB(e, fmt.Sprintf("mdb-%d", n), "198.51.100.1", "198.51.100.2", "198.51.100.3", "198.51.100.4")
	}
	e.fake.SetPageLimit(2)
	e.fake.Fail(awstest.DescribeReplicationGroups, "Throttling", 2)
	e.fake.Fail(awstest.DescribeClusters, "ThrottlingException", 2)
	// The last of each listing's five caches is on its third page.
	wantAddresses(t, "group", resolve(t, e.s.ElastiCache(), cacheSource(v1alpha1.AWSElastiCacheSource{ReplicationGroupID: "group-4"})), "192.0.2.5")
	wantAddresses(t, "serverless", resolve(t, e.s.ElastiCache(), cacheSource(v1alpha1.AWSElastiCacheSource{ServerlessCacheName: "lru-4"})), "192.0.2.15")
	if eps := resolve(t, e.s.MemoryDB(), memoryDBSource("mdb-4")); len(eps) != 4 {
		t.Errorf("MemoryDB: %d endpoints, want 4", len(eps))
	}
	for action, want := range map[string]int{
		awstest.DescribeReplicationGroups: 3 + 2, awstest.DescribeCacheClusters: 3,
		awstest.DescribeServerlessCaches: 3, awstest.DescribeClusters: 3 + 2,
	} {
		if got := e.fake.Calls(action); got != want {
			t.Errorf("%s: %d calls, want %d (three pages, and the throttled ones)", action, got, want)
		}
	}
}

// TestCacheConsentTag reads caches through a BackendProvider with a
// consent tag: a cache is published only in the namespaces its tag lists,
// a missing one is refused alike, and its tags are read once a refresh
// whatever the number of sources; without a consent tag no tag is read.
func TestCacheConsentTag(t *testing.T) {
	e := newEnv(t, nil)
	putGroup(e, "orders", false, []string{"192.0.2.61", "192.0.2.62"})
	e.fake.UpdateReplicationGroup("orders", func(g *awstest.ReplicationGroup) { g.Tags = map[string]string{consentTag: "payments"} })
	memoryDB(e, "ledger", "198.51.100.1", "198.51.100.2", "198.51.100.3", "198.51.100.4")
	e.fake.UpdateMemoryDBCluster("ledger", func(c *awstest.MemoryDBCluster) { c.Tags = map[string]string{consentTag: "billing, payments"} })
	plain := awsConnection("plain", "", e.fake.URL)
	c := awsConnection("consenting", "", e.fake.URL)
	settingsOf(c).ConsentTag = consentTag
	ec, mdb := e.s.ElastiCache(), e.s.MemoryDB()
	group := cacheSource(v1alpha1.AWSElastiCacheSource{ReplicationGroupID: "orders", Role: v1alpha1.AWSCacheRolePrimary})
	ipv4 := v1alpha1.AddressTypeIPv4

	wantAddresses(t, "without a consent tag", resolveReq(t, ec, asked(group, "web", plain, ipv4)), "192.0.2.61")
	if n := e.fake.Calls(awstest.ListTagsForResource) + e.fake.Calls(awstest.ListTags); n != 0 {
		t.Errorf("%d tag calls without a consent tag, want 0", n)
	}

	for range 3 {
		wantAddresses(t, "group in payments", resolveReq(t, ec, asked(group, "payments", c, ipv4)), "192.0.2.61")
		if eps := resolveReq(t, mdb, asked(memoryDBSource("ledger"), "billing", c, ipv4)); len(eps) != 4 {
			t.Errorf("MemoryDB in billing: %d endpoints, want 4", len(eps))
		}
	}
	if n := e.fake.Calls(awstest.ListTagsForResource); n != 1 {
		t.Errorf("ListTagsForResource: %d calls for three resolves of one group in one refresh, want 1", n)
	}
	if n := e.fake.Calls(awstest.ListTags); n != 1 {
		t.Errorf("ListTags: %d calls for three resolves of one cluster in one refresh, want 1", n)
	}
	wantErr(t, resolveReqErr(t, ec, asked(group, "web", c)), true, true, v1alpha1.ReasonAccessDenied,
		"spec.sources[cache].awsElastiCache.replicationGroupID: replication group orders is not found in "+region+
			" or has no tag backendslice.io/namespaces naming namespace web")
	wantErr(t, resolveReqErr(t, ec, asked(cacheSource(v1alpha1.AWSElastiCacheSource{ReplicationGroupID: "absent"}), "payments", c)),
		true, true, v1alpha1.ReasonAccessDenied, "replication group absent is not found in "+region+" or has no tag")
	wantErr(t, resolveReqErr(t, mdb, asked(memoryDBSource("ledger"), "web", c)), true, true, v1alpha1.ReasonAccessDenied,
		"spec.sources[mdb].awsMemoryDB.clusterName: MemoryDB cluster ledger is not found in "+region+" or has no tag")

	// The owner takes payments out of the tag: seen at the next refresh.
	e.fake.UpdateReplicationGroup("orders", func(g *awstest.ReplicationGroup) { g.Tags = map[string]string{consentTag: "billing"} })
	e.expire()
	wantErr(t, resolveReqErr(t, ec, asked(group, "payments", c)), true, true, v1alpha1.ReasonAccessDenied, "has no tag")
	if n := e.fake.Calls(awstest.ListTagsForResource); n != 2 {
		t.Errorf("ListTagsForResource: %d calls over two refreshes, want 2", n)
	}

	// Tags that cannot be read again: the ones last read stand.
	e.fake.Fail(awstest.ListTagsForResource, "AccessDenied", -1)
	e.expire()
	wantAddresses(t, "group in billing, its tags unreadable", resolveReq(t, ec, asked(group, "billing", c, ipv4)), "192.0.2.61")
	wantErr(t, resolveReqErr(t, ec, asked(group, "payments", c)), true, true, v1alpha1.ReasonAccessDenied, "has no tag")
}

// TestUnreadableTagsTellNothing: with a consent tag, a cache whose tags
// cannot be read (AccessDenied, throttling past the SDK's retries) fails
// word for word as a cache that does not exist, in the namespace its tag
// lists as in another, for ElastiCache (ListTagsForResource) and MemoryDB
// (ListTags), so that a failing tag call tells a tenant nothing about
// which caches exist. Once the tags are read they stand through later
// failures (the last known answer), and refusals stay word for word alike.
func TestUnreadableTagsTellNothing(t *testing.T) {
	for _, c := range []struct {
		name, cache, absent, action string
		codes                       []string
		src                         func(name string) v1alpha1.Source
		provider                    func(*env) providers.Provider
		put                         func(e *env, name string, tags map[string]string)
	}{
		{name: "ElastiCache", cache: "orders", absent: "absent", action: awstest.ListTagsForResource, codes: []string{"AccessDenied", "Throttling"},
			src: func(name string) v1alpha1.Source {
				return cacheSource(v1alpha1.AWSElastiCacheSource{ReplicationGroupID: name})
			},
			provider: func(e *env) providers.Provider { return e.s.ElastiCache() },
			put: func(e *env, name string, tags map[string]string) {
				putGroup(e, name, false, []string{"192.0.2.61"})
				e.fake.UpdateReplicationGroup(name, func(g *awstest.ReplicationGroup) { g.Tags = tags })
			}},
		{name: "MemoryDB", cache: "ledger", absent: "absent", action: awstest.ListTags, codes: []string{"AccessDeniedException", "ThrottlingException"},
			src:      memoryDBSource,
			provider: func(e *env) providers.Provider { return e.s.MemoryDB() },
			put: func(e *env, name string, tags map[string]string) {
				memoryDB(e, name, "198.51.100.1", "198.51.100.2", "198.51.100.3", "198.51.100.4")
				e.fake.UpdateMemoryDBCluster(name, func(c *awstest.MemoryDBCluster) { c.Tags = tags })
			}},
	} {
		for _, code := range c.codes {
			t.Run(c.name+" "+code, func(t *testing.T) {
				e := newEnv(t, nil)
				c.put(e, c.cache, map[string]string{consentTag: "payments"})
				conn := awsConnection("consenting", "", e.fake.URL)
				settingsOf(conn).ConsentTag = consentTag
				p := c.provider(e)
				// sameAsAbsent checks that the cache fails in namespace
				// as a cache that does not exist does.
				sameAsAbsent := func(when, namespace string) {
					t.Helper()
					got := resolveReqErr(t, p, asked(c.src(c.cache), namespace, conn))
					want := resolveReqErr(t, p, asked(c.src(c.absent), namespace, conn))
					told := strings.ReplaceAll(want.Error(), c.absent, c.cache)
					if got.Terminal != want.Terminal || got.Gone != want.Gone || got.Reason != want.Reason || got.Error() != told {
						t.Errorf("%s, in %s: (terminal=%v, gone=%v, %s) %q\nwant what a missing cache says: (terminal=%v, gone=%v, %s) %q",
							when, namespace, got.Terminal, got.Gone, got.Reason, got, want.Terminal, want.Gone, want.Reason, told)
					}
				}

				e.fake.Fail(c.action, code, -1)
				sameAsAbsent("tags never read", "payments")
				sameAsAbsent("tags never read", "web")
				if n := e.fake.Calls(c.action); n == 0 {
					t.Fatalf("no %s call: the failure was not AWS's", c.action)
				}

				e.fake.ClearFaults()
				e.clock.Step(hold)
				if eps := resolveReq(t, p, asked(c.src(c.cache), "payments", conn)); len(eps) == 0 {
					t.Errorf("tags read: no endpoint in payments")
				}
				e.fake.Fail(c.action, code, -1)
				e.expire()
				before := e.fake.Calls(c.action)
				if eps := resolveReq(t, p, asked(c.src(c.cache), "payments", conn)); len(eps) == 0 {
					t.Errorf("tags read before, unreadable now: no endpoint in payments, want the last tags read to stand")
				}
				if e.fake.Calls(c.action) == before {
					t.Errorf("tags unreadable now: %s not asked again", c.action)
				}
				sameAsAbsent("tags read before, unreadable now", "web")
			})
		}
	}
}

// TestCost500CacheBackends counts the AWS calls 500 cache backends make
// over ten simulated minutes, resolved again when their Result says, as
// TestCost500Backends does for RDS and EC2: the primary and the readers of
// 100 replication groups, 100 Memcached clusters, 100 serverless caches and
// 100 MemoryDB clusters, in one region. The listings: 100 groups (1 page),
// 300 cache clusters (3 pages of 100), 100 serverless caches (1 page) and
// 100 MemoryDB clusters (1 page). Without a consent tag no tag is read; with
// one, each of the 400 caches' tags are read once a refresh: that part
// grows with the caches named, never with the backends naming them.
func TestCost500CacheBackends(t *testing.T) {
	for _, consent := range []bool{false, true} {
		t.Run(fmt.Sprintf("consent=%v", consent), func(t *testing.T) {
			e := newEnv(t, nil)
			tags := map[string]string{}
			conn := awsConnection("caches", "", e.fake.URL)
			if consent {
				settingsOf(conn).ConsentTag = consentTag
				tags[consentTag] = "team"
			}
			var sources []v1alpha1.Source
			for n := range 100 {
				id := fmt.Sprintf("group-%03d", n)
				putGroup(e, id, false, []string{fmt.Sprintf("192.0.2.%d", n+1), fmt.Sprintf("198.51.100.%d", n+1)})
				e.fake.UpdateReplicationGroup(id, func(g *awstest.ReplicationGroup) { g.Tags = tags })
				memo := fmt.Sprintf("memo-%03d", n)
				e.fake.PutCacheCluster(awstest.CacheCluster{ID: memo, Status: "available", Engine: "memcached", Tags: tags,
					Nodes: []awstest.CacheNode{cacheNode(memo, "0001", fmt.Sprintf("203.0.113.%d", n+1), "eu-west-1a")}})
				lru := serverless(fmt.Sprintf("lru-%03d", n), fmt.Sprintf("203.0.113.%d", n+101))
				lru.Tags = tags
				e.fake.PutServerlessCache(lru)
				mdb := fmt.Sprintf("mdb-%03d", n)
				memoryDB(e, mdb, "192.0.2.201", "192.0.2.202", "192.0.2.203", "192.0.2.204")
				e.fake.UpdateMemoryDBCluster(mdb, func(c *awstest.MemoryDBCluster) { c.Tags = tags })
				sources = append(sources,
					cacheSource(v1alpha1.AWSElastiCacheSource{ReplicationGroupID: id, Role: v1alpha1.AWSCacheRolePrimary}),
					cacheSource(v1alpha1.AWSElastiCacheSource{ReplicationGroupID: id, Role: v1alpha1.AWSCacheRoleReaders}),
					cacheSource(v1alpha1.AWSElastiCacheSource{CacheClusterID: memo}),
					cacheSource(v1alpha1.AWSElastiCacheSource{ServerlessCacheName: lru.Name}),
					memoryDBSource(mdb))
			}

			resolves := simulate(t, e, sources, func(k int, src v1alpha1.Source) providers.Request {
				req := asked(src, "team", conn)
				req.Backend = fmt.Sprintf("backend-%03d", k)
				return req
			})
			calls := map[string]int{}
			for _, a := range []string{awstest.DescribeReplicationGroups, awstest.DescribeCacheClusters, awstest.DescribeServerlessCaches,
				awstest.DescribeClusters, awstest.ListTagsForResource, awstest.ListTags} {
				calls[a] = e.fake.Calls(a)
			}
			tagCalls := calls[awstest.ListTagsForResource] + calls[awstest.ListTags]
			total := e.fake.TotalCalls()
			t.Logf("500 cache backends, %v simulated, refresh interval %v, consent tag %v: %d resolves, %d AWS calls, %d of them for tags (%v)",
				period, interval, consent, resolves, total, tagCalls, calls)

			listings := int(math.Ceil(float64(period)/(0.9*float64(interval)))) + 1
			const pages = 1 + 3 + 1 + 1
			if describes := total - tagCalls; describes > listings*pages {
				t.Errorf("%d Describe calls, more than %d listings × %d pages", describes, listings, pages)
			}
			const caches = 400
			switch {
			case !consent && tagCalls != 0:
				t.Errorf("%d tag calls without a consent tag, want 0", tagCalls)
			case consent && tagCalls > listings*caches:
				t.Errorf("%d tag calls, more than %d refreshes × %d caches", tagCalls, listings, caches)
			case consent && tagCalls < caches:
				t.Errorf("%d tag calls, fewer than the %d caches: some consent was not checked", tagCalls, caches)
			}
		})
	}
}

// TestRelistWaitsForALateEnoughListing: a source whose cache is missing
// from the listing asks for a listing that starts after it asked. A
// listing already in flight that started before (it may lack a cache made
// meanwhile) is waited for and then listed again, never taken as the
// later answer: taking it declared new caches gone, for good.
func TestRelistWaitsForALateEnoughListing(t *testing.T) {
	e := newEnv(t, nil)
	putGroup(e, "old", false, []string{"192.0.2.71"})
	p := e.s.ElastiCache()
	old := cacheSource(v1alpha1.AWSElastiCacheSource{ReplicationGroupID: "old"})
	wantAddresses(t, "old", resolve(t, p, old), "192.0.2.71")

	// A refresh starts and is held in flight.
	e.expire()
	release := e.fake.Stall(awstest.DescribeReplicationGroups)
	t.Cleanup(release)
	e.fake.ResetCalls()
	done := make(chan error, 1)
	go func() {
		_, err := p.Resolve(context.Background(), asked(old, "a", awsConnection("a", "", e.fake.URL)))
		done <- err
	}()
	waited := time.Now()
	for e.fake.Calls(awstest.DescribeReplicationGroups) == 0 && time.Since(waited) < 10*time.Second {
		time.Sleep(time.Millisecond)
	}

	// Later, a new group's source asks.
	e.clock.Step(time.Millisecond)
	putGroup(e, "new", false, []string{"192.0.2.72"})
	fresh := make(chan []string, 1)
	go func() {
		res, err := p.Resolve(context.Background(), asked(cacheSource(v1alpha1.AWSElastiCacheSource{ReplicationGroupID: "new"}), "b", awsConnection("b", "", e.fake.URL)))
		if err != nil {
			t.Errorf("the new group: %v", err)
		}
		var addrs []string
		for _, ep := range res.Endpoints {
			addrs = append(addrs, ep.Address)
		}
		fresh <- addrs
	}()
	release()
	if err := <-done; err != nil {
		t.Fatalf("the old group: %v", err)
	}
	if got := <-fresh; len(got) != 1 || got[0] != "192.0.2.72" {
		t.Errorf("the new group published %v, want 192.0.2.72", got)
	}
	if n := e.fake.Calls(awstest.DescribeReplicationGroups); n != 2 {
		t.Errorf("DescribeReplicationGroups: %d calls, want 2: the one in flight, and one started after the new group's source asked", n)
	}
}
