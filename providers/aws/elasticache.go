package aws

import (
	"context"
	"strings"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/elasticache"
	elasticachetypes "github.com/aws/aws-sdk-go-v2/service/elasticache/types"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
)

// ElastiCacheProvider resolves awsElastiCache sources: the nodes of a
// Valkey or Redis OSS replication group, of a cache cluster (Memcached),
// or the endpoint of a serverless cache.
//
// Each node is published at its own endpoint (never the group's primary
// or reader endpoint, DNS names that lag a failover by their TTL), with
// its port and availability zone, resolved to the IP families the spec
// publishes or as the name itself with FQDN. Its hostname is its cache
// cluster's ID (a group's members are cache clusters of one node:
// orders-002, or orders-0002-001 in cluster mode, which names the shard);
// a Memcached node's is the cluster's ID and the node's (sessions-0001).
// Roles come from each member's CurrentRole: primary, readers (replicas)
// or all. A failover changes the members' roles, so the next refresh
// moves the primary from one Service to the other. In cluster mode AWS
// reports no roles, and a source asking for primary or readers fails
// (InvalidSpec); all publishes every node of every shard.
//
// States are published as the table cacheStates says, from the statuses
// of the group, its shard, the member's cache cluster and its node.
//
// Every backend reads two listings of the region (DescribeReplicationGroups,
// and DescribeCacheClusters with the nodes' endpoints), or one
// (DescribeServerlessCaches). Through a BackendProvider with a consent
// tag, the tags of each cache a source names are read too, one
// ListTagsForResource call per cache and refresh interval, shared.
type ElastiCacheProvider struct{ member }

// replicationGroup is what the provider keeps of a replication group.
type replicationGroup struct {
	id, status, arn string
	clusterMode     bool
	shards          []cacheShard
}

// cacheShard is one node group of a replication group.
type cacheShard struct {
	id, status string
	members    []shardMember
}

// shardMember is one member of a node group: a node of a cache cluster.
type shardMember struct {
	// cluster and node name the member's cache cluster and node; role is
	// its CurrentRole (primary or replica; "" in cluster mode).
	cluster, node, role, zone string
}

// cacheCluster is what the provider keeps of a cache cluster.
type cacheCluster struct {
	id, status, arn string
	nodes           []cacheClusterNode
	// removing are the IDs of the nodes AWS is about to remove.
	removing map[string]bool
}

// cacheClusterNode is one node of a cache cluster.
type cacheClusterNode struct {
	id, status, address, zone string
	port                      int32
}

// serverlessCache is what the provider keeps of a serverless cache.
type serverlessCache struct {
	name, status, arn string
	// endpoint and reader are the cache's two endpoints.
	endpoint, reader endpointAddr
}

// endpointAddr is an endpoint's name and port.
type endpointAddr struct {
	address string
	port    int32
}

// Resolve returns the endpoints of the cache the source names.
func (p *ElastiCacheProvider) Resolve(ctx context.Context, req providers.Request) (providers.Result, error) {
	src := req.Source.AWSElastiCache
	field, t, err := p.open(req, src != nil, func() (string, string) { return string(src.Region), src.AssumeRoleARN })
	if err != nil {
		return providers.Result{}, err
	}
	var nodes []cacheNode
	var what string
	switch {
	case src.ReplicationGroupID != "":
		what = "replication group " + src.ReplicationGroupID
		nodes, err = p.group(ctx, t, field, req, src)
	case src.CacheClusterID != "":
		what = "cache cluster " + src.CacheClusterID
		nodes, err = p.cluster(ctx, t, field, req, src)
	default:
		what = "serverless cache " + src.ServerlessCacheName
		nodes, err = p.serverless(ctx, t, field, req, src)
	}
	if err != nil {
		return providers.Result{}, err
	}
	eps, err := p.s.publishNodes(ctx, field, what, nodes, req.AddressTypes)
	if err != nil {
		return providers.Result{}, err
	}
	return providers.Result{Endpoints: eps, RefreshAfter: p.s.refresh}, nil
}

// group is the nodes of the replication group src names that have src's
// role.
func (p *ElastiCacheProvider) group(ctx context.Context, t target, field string, req providers.Request, src *v1alpha1.AWSElastiCacheSource) ([]cacheNode, error) {
	name := strings.ToLower(src.ReplicationGroupID)
	tags := tagsKey(t, "replication group", name)
	p.s.use(p.kind, req, append([]listingKey{{t.id, describeReplicationGroups}, {t.id, describeCacheClusters}}, tags...)...)
	g, err := find(ctx, p.s, t, lookup[replicationGroup]{
		field: field + ".replicationGroupID", what: "replication group", name: name,
		list: listedAt(t.id, p.replicationGroups), action: "elasticache:DescribeReplicationGroups",
		tags: tagReader(p.s, t, tags, field, "elasticache:ListTagsForResource", func(g replicationGroup) string { return g.arn }, elastiCacheTags),
	})
	if err != nil {
		return nil, err
	}
	role := src.Role
	if g.clusterMode && role != "" && role != v1alpha1.AWSCacheRoleAll {
		return nil, providers.Terminalf(v1alpha1.ReasonInvalidSpec,
			"%s.role: replication group %s runs in cluster mode, where AWS does not report which node of a shard is primary; use role all (every node of every shard) with a cluster-aware client",
			field, name)
	}
	clusters, err := listingOfCacheClusters(ctx, p.s, t.id, time.Time{})
	if err != nil {
		return nil, classify(err, field, "elasticache:DescribeCacheClusters", t)
	}
	var out []cacheNode
	for _, sh := range g.shards {
		for _, m := range sh.members {
			if !cacheRoleMatches(role, m.role) {
				continue
			}
			// A member missing from the cache cluster listing was added or
			// removed between the two listings: the next refresh has it.
			c, ok := clusters[m.cluster]
			if !ok {
				continue
			}
			for _, n := range c.nodes {
				if n.id != m.node {
					continue
				}
				out = append(out, cacheNode{
					hostname: hostname(c.id), address: n.address, port: n.port, zone: n.zone,
					statuses: []string{g.status, sh.status, c.status, n.status}, removing: c.removing[n.id],
				})
			}
		}
	}
	return out, nil
}

// cacheRoleMatches tells whether a member whose CurrentRole is current
// has role.
func cacheRoleMatches(role v1alpha1.AWSCacheRole, current string) bool {
	switch role {
	case v1alpha1.AWSCacheRolePrimary:
		return current == "primary"
	case v1alpha1.AWSCacheRoleReaders:
		return current == "replica"
	}
	return true
}

// cluster is the nodes of the cache cluster src names.
func (p *ElastiCacheProvider) cluster(ctx context.Context, t target, field string, req providers.Request, src *v1alpha1.AWSElastiCacheSource) ([]cacheNode, error) {
	name := strings.ToLower(src.CacheClusterID)
	tags := tagsKey(t, "cache cluster", name)
	p.s.use(p.kind, req, append([]listingKey{{t.id, describeCacheClusters}}, tags...)...)
	c, err := find(ctx, p.s, t, lookup[cacheCluster]{
		field: field + ".cacheClusterID", what: "cache cluster", name: name,
		list: func(ctx context.Context, since time.Time) (map[string]cacheCluster, error) {
			return listingOfCacheClusters(ctx, p.s, t.id, since)
		},
		action: "elasticache:DescribeCacheClusters",
		tags:   tagReader(p.s, t, tags, field, "elasticache:ListTagsForResource", func(c cacheCluster) string { return c.arn }, elastiCacheTags),
	})
	if err != nil {
		return nil, err
	}
	var out []cacheNode
	for _, n := range c.nodes {
		out = append(out, cacheNode{
			hostname: hostname(c.id + "-" + n.id), address: n.address, port: n.port, zone: n.zone,
			statuses: []string{c.status, n.status}, removing: c.removing[n.id],
		})
	}
	return out, nil
}

// serverless is the endpoint of the serverless cache src names: its
// reader endpoint for role readers.
func (p *ElastiCacheProvider) serverless(ctx context.Context, t target, field string, req providers.Request, src *v1alpha1.AWSElastiCacheSource) ([]cacheNode, error) {
	name := strings.ToLower(src.ServerlessCacheName)
	tags := tagsKey(t, "serverless cache", name)
	p.s.use(p.kind, req, append([]listingKey{{t.id, describeServerlessCaches}}, tags...)...)
	c, err := find(ctx, p.s, t, lookup[serverlessCache]{
		field: field + ".serverlessCacheName", what: "serverless cache", name: name,
		list:   listedAt(t.id, p.serverlessCaches),
		action: "elasticache:DescribeServerlessCaches",
		tags:   tagReader(p.s, t, tags, field, "elasticache:ListTagsForResource", func(c serverlessCache) string { return c.arn }, elastiCacheTags),
	})
	if err != nil {
		return nil, err
	}
	e := c.endpoint
	if src.Role == v1alpha1.AWSCacheRoleReaders {
		e = c.reader
	}
	return []cacheNode{{hostname: hostname(c.name), address: e.address, port: e.port, statuses: []string{c.status}}}, nil
}

// replicationGroups is the listing of every replication group of id's
// region, by ID, listed from since on when since is not zero.
func (p *ElastiCacheProvider) replicationGroups(ctx context.Context, id identity, since time.Time) (map[string]replicationGroup, error) {
	return listingOf(p.s, listingKey{id, describeReplicationGroups}, (*shared).replicationGroupsSlot, fetchReplicationGroups).get(ctx, since)
}

// fetchReplicationGroups lists every replication group of a region, by ID.
func fetchReplicationGroups(ctx context.Context, c *clients) (map[string]replicationGroup, error) {
	pages := elasticache.NewDescribeReplicationGroupsPaginator(c.elastiCache, &elasticache.DescribeReplicationGroupsInput{MaxRecords: awssdk.Int32(100)},
		func(o *elasticache.DescribeReplicationGroupsPaginatorOptions) { o.StopOnDuplicateToken = true })
	return collect(ctx, pages.HasMorePages, pages.NextPage, func(p *elasticache.DescribeReplicationGroupsOutput) *string { return p.Marker },
		func(out map[string]replicationGroup, page *elasticache.DescribeReplicationGroupsOutput) {
			for _, rg := range page.ReplicationGroups {
				g := replicationGroup{
					id: strings.ToLower(awssdk.ToString(rg.ReplicationGroupId)), status: awssdk.ToString(rg.Status),
					arn: awssdk.ToString(rg.ARN), clusterMode: awssdk.ToBool(rg.ClusterEnabled),
				}
				for _, ng := range rg.NodeGroups {
					sh := cacheShard{id: awssdk.ToString(ng.NodeGroupId), status: awssdk.ToString(ng.Status)}
					for _, m := range ng.NodeGroupMembers {
						sh.members = append(sh.members, shardMember{
							cluster: strings.ToLower(awssdk.ToString(m.CacheClusterId)), node: awssdk.ToString(m.CacheNodeId),
							role: awssdk.ToString(m.CurrentRole), zone: awssdk.ToString(m.PreferredAvailabilityZone),
						})
					}
					g.shards = append(g.shards, sh)
				}
				out[g.id] = g
			}
		})
}

// listingOfCacheClusters is the listing of every cache cluster of id's
// region with its nodes, by ID, listed from since on when since is not zero.
func listingOfCacheClusters(ctx context.Context, s *Session, id identity, since time.Time) (map[string]cacheCluster, error) {
	return listingOf(s, listingKey{id, describeCacheClusters}, (*shared).cacheClustersSlot, fetchCacheClusters).get(ctx, since)
}

// fetchCacheClusters lists every cache cluster of a region with its
// nodes, by ID.
func fetchCacheClusters(ctx context.Context, c *clients) (map[string]cacheCluster, error) {
	pages := elasticache.NewDescribeCacheClustersPaginator(c.elastiCache,
		&elasticache.DescribeCacheClustersInput{MaxRecords: awssdk.Int32(100), ShowCacheNodeInfo: awssdk.Bool(true)},
		func(o *elasticache.DescribeCacheClustersPaginatorOptions) { o.StopOnDuplicateToken = true })
	return collect(ctx, pages.HasMorePages, pages.NextPage, func(p *elasticache.DescribeCacheClustersOutput) *string { return p.Marker },
		func(out map[string]cacheCluster, page *elasticache.DescribeCacheClustersOutput) {
			for _, cc := range page.CacheClusters {
				c := cacheCluster{
					id: strings.ToLower(awssdk.ToString(cc.CacheClusterId)), status: awssdk.ToString(cc.CacheClusterStatus),
					arn: awssdk.ToString(cc.ARN), removing: map[string]bool{},
				}
				if pm := cc.PendingModifiedValues; pm != nil {
					for _, id := range pm.CacheNodeIdsToRemove {
						c.removing[id] = true
					}
				}
				for _, n := range cc.CacheNodes {
					node := cacheClusterNode{id: awssdk.ToString(n.CacheNodeId), status: awssdk.ToString(n.CacheNodeStatus), zone: awssdk.ToString(n.CustomerAvailabilityZone)}
					if n.Endpoint != nil {
						node.address, node.port = awssdk.ToString(n.Endpoint.Address), awssdk.ToInt32(n.Endpoint.Port)
					}
					c.nodes = append(c.nodes, node)
				}
				out[c.id] = c
			}
		})
}

// serverlessCaches is the listing of every serverless cache of id's
// region, by name, listed from since on when since is not zero.
func (p *ElastiCacheProvider) serverlessCaches(ctx context.Context, id identity, since time.Time) (map[string]serverlessCache, error) {
	return listingOf(p.s, listingKey{id, describeServerlessCaches}, (*shared).serverlessCachesSlot, func(ctx context.Context, c *clients) (map[string]serverlessCache, error) {
		pages := elasticache.NewDescribeServerlessCachesPaginator(c.elastiCache, &elasticache.DescribeServerlessCachesInput{MaxResults: awssdk.Int32(100)},
			func(o *elasticache.DescribeServerlessCachesPaginatorOptions) { o.StopOnDuplicateToken = true })
		return collect(ctx, pages.HasMorePages, pages.NextPage, func(p *elasticache.DescribeServerlessCachesOutput) *string { return p.NextToken },
			func(out map[string]serverlessCache, page *elasticache.DescribeServerlessCachesOutput) {
				for _, sc := range page.ServerlessCaches {
					c := serverlessCache{name: strings.ToLower(awssdk.ToString(sc.ServerlessCacheName)), status: awssdk.ToString(sc.Status), arn: awssdk.ToString(sc.ARN)}
					if e := sc.Endpoint; e != nil {
						c.endpoint = endpointAddr{awssdk.ToString(e.Address), awssdk.ToInt32(e.Port)}
					}
					if e := sc.ReaderEndpoint; e != nil {
						c.reader = endpointAddr{awssdk.ToString(e.Address), awssdk.ToInt32(e.Port)}
					}
					out[c.name] = c
				}
			})
	}).get(ctx, since)
}

// elastiCacheTags reads the tags of an ElastiCache resource.
func elastiCacheTags(ctx context.Context, c *clients, arn string) (map[string]string, error) {
	res, err := c.elastiCache.ListTagsForResource(ctx, &elasticache.ListTagsForResourceInput{ResourceName: awssdk.String(arn)})
	if err != nil {
		return nil, err
	}
	return tagMap(res.TagList, func(t elasticachetypes.Tag) (*string, *string) { return t.Key, t.Value }), nil
}

var _ providers.Provider = (*ElastiCacheProvider)(nil)
