package aws

import (
	"context"
	"strings"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/memorydb"
	memorydbtypes "github.com/aws/aws-sdk-go-v2/service/memorydb/types"

	"github.com/backendslice/backendslice/providers"
)

// MemoryDBProvider resolves awsMemoryDB sources: every node of every shard
// of a MemoryDB cluster, each at its own endpoint with its port and
// availability zone, its hostname the node's name (orders-0001-001, which
// names the shard). MemoryDB does not report which node of a shard is
// primary (clients ask the cluster with CLUSTER SLOTS), so a source
// publishes them all. States are published as the table cacheStates
// says, from the statuses of the cluster, the shard and the node.
//
// Every backend reads one listing of the region (DescribeClusters with the
// shards' details); through a BackendProvider with a consent tag, the tags
// of each cluster a source names too, one ListTags call per cluster and
// refresh interval, shared.
type MemoryDBProvider struct{ member }

// memoryDBCluster is what the provider keeps of a MemoryDB cluster.
type memoryDBCluster struct {
	name, status, arn string
	shards            []memoryDBShard
}

// memoryDBShard is one shard of a cluster.
type memoryDBShard struct {
	name, status string
	nodes        []cacheClusterNode
}

// Resolve returns the endpoints of the cluster the source names.
func (p *MemoryDBProvider) Resolve(ctx context.Context, req providers.Request) (providers.Result, error) {
	src := req.Source.AWSMemoryDB
	field, t, err := p.open(req, src != nil, func() (string, string) { return string(src.Region), src.AssumeRoleARN })
	if err != nil {
		return providers.Result{}, err
	}
	name := strings.ToLower(src.ClusterName)
	tags := tagsKey(t, "MemoryDB cluster", name)
	p.s.use(p.kind, req, append([]listingKey{{t.id, describeMemoryDBClusters}}, tags...)...)
	c, err := find(ctx, p.s, t, lookup[memoryDBCluster]{
		field: field + ".clusterName", what: "MemoryDB cluster", name: name,
		list:   listedAt(t.id, p.clusters),
		action: "memorydb:DescribeClusters",
		tags:   tagReader(p.s, t, tags, field, "memorydb:ListTags", func(c memoryDBCluster) string { return c.arn }, memoryDBTags),
	})
	if err != nil {
		return providers.Result{}, err
	}
	var nodes []cacheNode
	for _, sh := range c.shards {
		for _, n := range sh.nodes {
			nodes = append(nodes, cacheNode{
				hostname: hostname(n.id), address: n.address, port: n.port, zone: n.zone,
				statuses: []string{c.status, sh.status, n.status},
			})
		}
	}
	eps, err := p.s.publishNodes(ctx, field, "MemoryDB cluster "+name, nodes, req.AddressTypes)
	if err != nil {
		return providers.Result{}, err
	}
	return providers.Result{Endpoints: eps, RefreshAfter: p.s.refresh}, nil
}

// clusters is the listing of every MemoryDB cluster of id's region with
// its shards, by name, listed from since on when since is not zero.
func (p *MemoryDBProvider) clusters(ctx context.Context, id identity, since time.Time) (map[string]memoryDBCluster, error) {
	return listingOf(p.s, listingKey{id, describeMemoryDBClusters}, (*shared).memoryDBClustersSlot, func(ctx context.Context, c *clients) (map[string]memoryDBCluster, error) {
		pages := memorydb.NewDescribeClustersPaginator(c.memoryDB,
			&memorydb.DescribeClustersInput{MaxResults: awssdk.Int32(100), ShowShardDetails: awssdk.Bool(true)},
			func(o *memorydb.DescribeClustersPaginatorOptions) { o.StopOnDuplicateToken = true })
		return collect(ctx, pages.HasMorePages, pages.NextPage, func(p *memorydb.DescribeClustersOutput) *string { return p.NextToken },
			func(out map[string]memoryDBCluster, page *memorydb.DescribeClustersOutput) {
				for _, mc := range page.Clusters {
					c := memoryDBCluster{name: strings.ToLower(awssdk.ToString(mc.Name)), status: awssdk.ToString(mc.Status), arn: awssdk.ToString(mc.ARN)}
					for _, s := range mc.Shards {
						sh := memoryDBShard{name: awssdk.ToString(s.Name), status: awssdk.ToString(s.Status)}
						for _, n := range s.Nodes {
							node := cacheClusterNode{id: strings.ToLower(awssdk.ToString(n.Name)), status: awssdk.ToString(n.Status), zone: awssdk.ToString(n.AvailabilityZone)}
							if n.Endpoint != nil {
								node.address, node.port = awssdk.ToString(n.Endpoint.Address), n.Endpoint.Port
							}
							sh.nodes = append(sh.nodes, node)
						}
						c.shards = append(c.shards, sh)
					}
					out[c.name] = c
				}
			})
	}).get(ctx, since)
}

// memoryDBTags reads the tags of a MemoryDB resource.
func memoryDBTags(ctx context.Context, c *clients, arn string) (map[string]string, error) {
	res, err := c.memoryDB.ListTags(ctx, &memorydb.ListTagsInput{ResourceArn: awssdk.String(arn)})
	if err != nil {
		return nil, err
	}
	return tagMap(res.TagList, func(t memorydbtypes.Tag) (*string, *string) { return t.Key, t.Value }), nil
}

var _ providers.Provider = (*MemoryDBProvider)(nil)
