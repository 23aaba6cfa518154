package awstest

import (
	"cmp"
	"encoding/xml"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
)

// ReplicationGroup is a Valkey or Redis OSS replication group as
// DescribeReplicationGroups reports it. Each member of a shard is a cache
// cluster of one node (put with PutCacheCluster), as in AWS.
type ReplicationGroup struct {
	// ID is the ReplicationGroupId.
	ID string
	// Status is the group's Status (available, modifying, deleting, ...).
	Status string
	// ClusterMode is ClusterEnabled: AWS then reports neither the members'
	// roles nor their read endpoints, only their cache clusters.
	ClusterMode bool
	// Shards are the NodeGroups.
	Shards []Shard
	// Tags are read with ListTagsForResource.
	Tags map[string]string
}

// Shard is one NodeGroup of a replication group.
type Shard struct {
	// ID is the NodeGroupId (0001, 0002, ...).
	ID string
	// Status is the NodeGroup's Status; empty is available.
	Status string
	// Members are the NodeGroupMembers.
	Members []ShardMember
}

// ShardMember is one NodeGroupMember: a cache cluster of one node.
type ShardMember struct {
	// CacheCluster is the member's CacheClusterId.
	CacheCluster string
	// Primary makes its CurrentRole primary (replica otherwise); AWS
	// reports it only outside cluster mode.
	Primary bool
}

// CacheCluster is a cache cluster as DescribeCacheClusters reports it with
// ShowCacheNodeInfo: a Memcached cluster, or a member of a replication
// group.
type CacheCluster struct {
	// ID is the CacheClusterId.
	ID string
	// Status is the CacheClusterStatus (available, modifying, snapshotting,
	// rebooting cluster nodes, deleting, ...).
	Status string
	// Engine is memcached, redis or valkey.
	Engine string
	// ReplicationGroup is the ReplicationGroupId of a group's member.
	ReplicationGroup string
	// Nodes are the CacheNodes.
	Nodes []CacheNode
	// Removing are the node IDs of PendingModifiedValues'
	// CacheNodeIdsToRemove: nodes AWS is about to take away.
	Removing []string
	// Tags are read with ListTagsForResource.
	Tags map[string]string
}

// CacheNode is one node of a cache cluster.
type CacheNode struct {
	// ID is the CacheNodeId (0001, 0002, ...).
	ID string
	// Status is the CacheNodeStatus (available, creating, rebooting,
	// deleting).
	Status string
	// Address and Port are the node's Endpoint; an empty Address leaves it
	// out, as for a node being created.
	Address string
	Port    int32
	// IPs are what Address resolves to (LookupNetIP).
	IPs []string
	// Zone is the CustomerAvailabilityZone.
	Zone string
}

// ServerlessCache is a serverless cache as DescribeServerlessCaches
// reports it.
type ServerlessCache struct {
	// Name is the ServerlessCacheName.
	Name string
	// Status is available, creating, modifying, deleting or create-failed.
	Status string
	// Address and Port are the Endpoint, ReaderAddress and ReaderPort the
	// ReaderEndpoint; an empty address leaves its endpoint out.
	Address       string
	Port          int32
	ReaderAddress string
	ReaderPort    int32
	// IPs and ReaderIPs are what the addresses resolve to.
	IPs, ReaderIPs []string
	// Tags are read with ListTagsForResource.
	Tags map[string]string
}

// account is the fake's AWS account, in every ARN it makes.
const account = "123456789012"

// ARNs of ElastiCache resources, as AWS makes them (in the fake's region).
func groupARN(id string) string {
	return "arn:aws:elasticache:eu-west-1:" + account + ":replicationgroup:" + id
}
func cacheClusterARN(id string) string {
	return "arn:aws:elasticache:eu-west-1:" + account + ":cluster:" + id
}
func serverlessARN(name string) string {
	return "arn:aws:elasticache:eu-west-1:" + account + ":serverlesscache:" + name
}

// PutReplicationGroup adds or replaces a replication group; its members'
// cache clusters are put with PutCacheCluster.
func (s *Server) PutReplicationGroup(g ReplicationGroup) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.groups[g.ID] = cloneGroup(g)
}

// UpdateReplicationGroup changes the group id in place; it panics when
// there is none, which is a mistake in the test.
func (s *Server) UpdateReplicationGroup(id string, change func(*ReplicationGroup)) {
	update(s, s.groups, "replication group", id, cloneGroup, change)
}

// PutReplicationGroupOf puts replication group id, available, of one
// shard for each list of nodes, with a member for each node: a cache
// cluster of that one node, named as AWS names them (<id>-001, <id>-002,
// ...; <id>-<shard>-<member> in cluster mode, such as <id>-0002-001). The
// first member of each shard is its primary.
func (s *Server) PutReplicationGroupOf(id string, clusterMode bool, shards ...[]CacheNode) {
	g := ReplicationGroup{ID: id, Status: "available", ClusterMode: clusterMode}
	n := 0
	for k, nodes := range shards {
		sh := Shard{ID: fmt.Sprintf("%04d", k+1)}
		for m, node := range nodes {
			n++
			cid := fmt.Sprintf("%s-%03d", id, n)
			if clusterMode {
				cid = fmt.Sprintf("%s-%04d-%03d", id, k+1, m+1)
			}
			s.PutCacheCluster(CacheCluster{ID: cid, Status: "available", Engine: "valkey", ReplicationGroup: id, Nodes: []CacheNode{node}})
			sh.Members = append(sh.Members, ShardMember{CacheCluster: cid, Primary: m == 0})
		}
		g.Shards = append(g.Shards, sh)
	}
	s.PutReplicationGroup(g)
}

// FailoverShard makes cacheCluster the primary of the group's shard and
// every other member of the shard a replica, as TestFailover (or an
// automatic failover) does.
func (s *Server) FailoverShard(group, shard, cacheCluster string) {
	s.UpdateReplicationGroup(group, func(g *ReplicationGroup) {
		for i := range g.Shards {
			if g.Shards[i].ID != shard {
				continue
			}
			for j := range g.Shards[i].Members {
				g.Shards[i].Members[j].Primary = g.Shards[i].Members[j].CacheCluster == cacheCluster
			}
		}
	})
}

// DeleteReplicationGroup removes a group and its members' cache clusters,
// as AWS does once it is deleted.
func (s *Server) DeleteReplicationGroup(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.groups, id)
	maps.DeleteFunc(s.cacheClusters, func(_ string, c CacheCluster) bool { return c.ReplicationGroup == id })
}

// PutCacheCluster adds or replaces a cache cluster.
func (s *Server) PutCacheCluster(c CacheCluster) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cacheClusters[c.ID] = cloneCacheCluster(c)
}

// UpdateCacheCluster changes the cache cluster id in place (its status,
// its nodes' statuses, nodes added or marked for removal); it panics when
// there is none.
func (s *Server) UpdateCacheCluster(id string, change func(*CacheCluster)) {
	update(s, s.cacheClusters, "cache cluster", id, cloneCacheCluster, change)
}

// ReplaceCacheNode starts replacing node old of cache cluster id with
// node: the cluster turns modifying, old is listed for removal
// (CacheNodeIdsToRemove) and node comes up beside it, creating.
// FinishReplacement ends it.
func (s *Server) ReplaceCacheNode(id, old string, node CacheNode) {
	s.UpdateCacheCluster(id, func(c *CacheCluster) {
		c.Status = "modifying"
		c.Removing = append(c.Removing, old)
		node.Status = "creating"
		c.Nodes = append(c.Nodes, node)
	})
}

// FinishReplacement ends the replacements of cache cluster id: the nodes
// listed for removal are gone, the others available, and so is the
// cluster.
func (s *Server) FinishReplacement(id string) {
	s.UpdateCacheCluster(id, func(c *CacheCluster) {
		c.Nodes = slices.DeleteFunc(c.Nodes, func(n CacheNode) bool { return slices.Contains(c.Removing, n.ID) })
		for i := range c.Nodes {
			c.Nodes[i].Status = "available"
		}
		c.Status, c.Removing = "available", nil
	})
}

// DeleteCacheCluster removes a cache cluster.
func (s *Server) DeleteCacheCluster(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.cacheClusters, id)
}

// PutServerlessCache adds or replaces a serverless cache.
func (s *Server) PutServerlessCache(c ServerlessCache) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c.Tags, c.IPs, c.ReaderIPs = maps.Clone(c.Tags), slices.Clone(c.IPs), slices.Clone(c.ReaderIPs)
	s.serverless[c.Name] = c
}

// SetServerlessStatus changes the status of serverless cache name.
func (s *Server) SetServerlessStatus(name, status string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.serverless[name]
	if !ok {
		panic("awstest: no serverless cache " + name)
	}
	c.Status = status
	s.serverless[name] = c
}

// DeleteServerlessCache removes a serverless cache.
func (s *Server) DeleteServerlessCache(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.serverless, name)
}

func cloneGroup(g ReplicationGroup) ReplicationGroup {
	g.Tags = maps.Clone(g.Tags)
	g.Shards = slices.Clone(g.Shards)
	for i := range g.Shards {
		g.Shards[i].Members = slices.Clone(g.Shards[i].Members)
	}
	return g
}

func cloneCacheCluster(c CacheCluster) CacheCluster {
	c.Tags = maps.Clone(c.Tags)
	c.Removing = slices.Clone(c.Removing)
	c.Nodes = slices.Clone(c.Nodes)
	for i := range c.Nodes {
		c.Nodes[i].IPs = slices.Clone(c.Nodes[i].IPs)
	}
	return c
}

// --- The Query protocol of ElastiCache.

const elastiCacheNamespace = "http://elasticache.amazonaws.com/doc/2015-02-02/"

type cacheEndpointXML struct {
	Address string `xml:"Address"`
	Port    int32  `xml:"Port"`
}

type nodeGroupMemberXML struct {
	CacheClusterID            string            `xml:"CacheClusterId"`
	CacheNodeID               string            `xml:"CacheNodeId"`
	CurrentRole               string            `xml:"CurrentRole,omitempty"`
	PreferredAvailabilityZone string            `xml:"PreferredAvailabilityZone,omitempty"`
	ReadEndpoint              *cacheEndpointXML `xml:"ReadEndpoint,omitempty"`
}

type nodeGroupXML struct {
	NodeGroupID     string               `xml:"NodeGroupId"`
	Status          string               `xml:"Status"`
	PrimaryEndpoint *cacheEndpointXML    `xml:"PrimaryEndpoint,omitempty"`
	Members         []nodeGroupMemberXML `xml:"NodeGroupMembers>NodeGroupMember"`
}

type replicationGroupXML struct {
	ReplicationGroupID    string            `xml:"ReplicationGroupId"`
	Status                string            `xml:"Status"`
	ClusterEnabled        bool              `xml:"ClusterEnabled"`
	ARN                   string            `xml:"ARN"`
	ConfigurationEndpoint *cacheEndpointXML `xml:"ConfigurationEndpoint,omitempty"`
	MemberClusters        []string          `xml:"MemberClusters>ClusterId"`
	NodeGroups            []nodeGroupXML    `xml:"NodeGroups>NodeGroup"`
}

type describeReplicationGroupsResponse struct {
	XMLName   xml.Name              `xml:"DescribeReplicationGroupsResponse"`
	Xmlns     string                `xml:"xmlns,attr"`
	Marker    string                `xml:"DescribeReplicationGroupsResult>Marker,omitempty"`
	Groups    []replicationGroupXML `xml:"DescribeReplicationGroupsResult>ReplicationGroups>ReplicationGroup"`
	RequestID string                `xml:"ResponseMetadata>RequestId"`
}

type cacheNodeXML struct {
	CacheNodeID              string            `xml:"CacheNodeId"`
	CacheNodeStatus          string            `xml:"CacheNodeStatus"`
	CustomerAvailabilityZone string            `xml:"CustomerAvailabilityZone,omitempty"`
	Endpoint                 *cacheEndpointXML `xml:"Endpoint,omitempty"`
}

type cacheClusterXML struct {
	CacheClusterID       string         `xml:"CacheClusterId"`
	CacheClusterStatus   string         `xml:"CacheClusterStatus"`
	Engine               string         `xml:"Engine"`
	NumCacheNodes        int            `xml:"NumCacheNodes"`
	ReplicationGroupID   string         `xml:"ReplicationGroupId,omitempty"`
	ARN                  string         `xml:"ARN"`
	CacheNodeIDsToRemove []string       `xml:"PendingModifiedValues>CacheNodeIdsToRemove>CacheNodeId"`
	CacheNodes           []cacheNodeXML `xml:"CacheNodes>CacheNode"`
}

type describeCacheClustersResponse struct {
	XMLName   xml.Name          `xml:"DescribeCacheClustersResponse"`
	Xmlns     string            `xml:"xmlns,attr"`
	Marker    string            `xml:"DescribeCacheClustersResult>Marker,omitempty"`
	Clusters  []cacheClusterXML `xml:"DescribeCacheClustersResult>CacheClusters>CacheCluster"`
	RequestID string            `xml:"ResponseMetadata>RequestId"`
}

type serverlessCacheXML struct {
	ServerlessCacheName string            `xml:"ServerlessCacheName"`
	Status              string            `xml:"Status"`
	Engine              string            `xml:"Engine"`
	ARN                 string            `xml:"ARN"`
	Endpoint            *cacheEndpointXML `xml:"Endpoint,omitempty"`
	ReaderEndpoint      *cacheEndpointXML `xml:"ReaderEndpoint,omitempty"`
}

type describeServerlessCachesResponse struct {
	XMLName   xml.Name             `xml:"DescribeServerlessCachesResponse"`
	Xmlns     string               `xml:"xmlns,attr"`
	NextToken string               `xml:"DescribeServerlessCachesResult>NextToken,omitempty"`
	Caches    []serverlessCacheXML `xml:"DescribeServerlessCachesResult>ServerlessCaches>member"`
	RequestID string               `xml:"ResponseMetadata>RequestId"`
}

type listTagsForResourceResponse struct {
	XMLName   xml.Name `xml:"ListTagsForResourceResponse"`
	Xmlns     string   `xml:"xmlns,attr"`
	TagList   []rdsTag `xml:"ListTagsForResourceResult>TagList>Tag"`
	RequestID string   `xml:"ResponseMetadata>RequestId"`
}

// onePage selects the IDs a Describe call asks for: the one it names (or
// notFound when there is none such), else one page of size after token.
func (s *Server) onePage(action string, all []string, one, token string, size int, notFound apiError) ([]string, string, *apiError) {
	if one != "" {
		if !slices.Contains(all, one) {
			notFound.msg = strings.ReplaceAll(notFound.msg, "%s", one)
			return nil, "", &notFound
		}
		return []string{one}, "", nil
	}
	return page(all, token, size, s.pageLimit, s.repeat[action])
}

// endpointXML is an endpoint, nil without an address.
func endpointXML(address string, port int32) *cacheEndpointXML {
	if address == "" {
		return nil
	}
	return &cacheEndpointXML{Address: address, Port: port}
}

func (s *Server) describeReplicationGroups(form url.Values, sees func(string) bool) (any, *apiError) {
	size, aerr := maxItems(form, "MaxRecords", 20, 100, 100)
	if aerr != nil {
		return nil, aerr
	}
	ids, next, aerr := s.onePage(DescribeReplicationGroups, visible(s.groups, sees), form.Get("ReplicationGroupId"),
		form.Get("Marker"), size, apiError{"ReplicationGroupNotFoundFault", "ReplicationGroup %s not found."})
	if aerr != nil {
		return nil, aerr
	}
	resp := describeReplicationGroupsResponse{Xmlns: elastiCacheNamespace, Marker: next, RequestID: requestID}
	for _, id := range ids {
		g := s.groups[id]
		x := replicationGroupXML{ReplicationGroupID: g.ID, Status: g.Status, ClusterEnabled: g.ClusterMode, ARN: groupARN(g.ID)}
		if g.ClusterMode {
			x.ConfigurationEndpoint = &cacheEndpointXML{Address: "clustercfg." + g.ID + ".abc123.euw1.cache.amazonaws.com", Port: 6379}
		}
		for _, sh := range g.Shards {
			ng := nodeGroupXML{NodeGroupID: sh.ID, Status: cmp.Or(sh.Status, "available")}
			for _, m := range sh.Members {
				x.MemberClusters = append(x.MemberClusters, m.CacheCluster)
				c := s.cacheClusters[m.CacheCluster]
				var node CacheNode
				if len(c.Nodes) > 0 {
					node = c.Nodes[0]
				}
				mx := nodeGroupMemberXML{CacheClusterID: m.CacheCluster, CacheNodeID: cmp.Or(node.ID, "0001"), PreferredAvailabilityZone: node.Zone}
				// Outside cluster mode only, as AWS reports them.
				if !g.ClusterMode {
					mx.CurrentRole = "replica"
					if m.Primary {
						mx.CurrentRole = "primary"
						ng.PrimaryEndpoint = &cacheEndpointXML{Address: "master." + g.ID + ".abc123.euw1.cache.amazonaws.com", Port: node.Port}
					}
					mx.ReadEndpoint = endpointXML(node.Address, node.Port)
				}
				ng.Members = append(ng.Members, mx)
			}
			x.NodeGroups = append(x.NodeGroups, ng)
		}
		resp.Groups = append(resp.Groups, x)
	}
	return resp, nil
}

func (s *Server) describeCacheClusters(form url.Values, sees func(string) bool) (any, *apiError) {
	size, aerr := maxItems(form, "MaxRecords", 20, 100, 100)
	if aerr != nil {
		return nil, aerr
	}
	ids, next, aerr := s.onePage(DescribeCacheClusters, visible(s.cacheClusters, sees), form.Get("CacheClusterId"),
		form.Get("Marker"), size, apiError{"CacheClusterNotFound", "CacheCluster %s not found."})
	if aerr != nil {
		return nil, aerr
	}
	nodes := form.Get("ShowCacheNodeInfo") == "true"
	resp := describeCacheClustersResponse{Xmlns: elastiCacheNamespace, Marker: next, RequestID: requestID}
	for _, id := range ids {
		c := s.cacheClusters[id]
		x := cacheClusterXML{
			CacheClusterID: c.ID, CacheClusterStatus: c.Status, Engine: c.Engine, NumCacheNodes: len(c.Nodes),
			ReplicationGroupID: c.ReplicationGroup, ARN: cacheClusterARN(c.ID), CacheNodeIDsToRemove: c.Removing,
		}
		// Without ShowCacheNodeInfo AWS leaves the nodes out.
		for _, n := range c.Nodes {
			if nodes {
				x.CacheNodes = append(x.CacheNodes, cacheNodeXML{
					CacheNodeID: n.ID, CacheNodeStatus: n.Status, CustomerAvailabilityZone: n.Zone, Endpoint: endpointXML(n.Address, n.Port),
				})
			}
		}
		resp.Clusters = append(resp.Clusters, x)
	}
	return resp, nil
}

func (s *Server) describeServerlessCaches(form url.Values, sees func(string) bool) (any, *apiError) {
	size, aerr := maxItems(form, "MaxResults", 1, 100, 50)
	if aerr != nil {
		return nil, aerr
	}
	names, next, aerr := s.onePage(DescribeServerlessCaches, visible(s.serverless, sees), form.Get("ServerlessCacheName"),
		form.Get("NextToken"), size, apiError{"ServerlessCacheNotFoundFault", "Serverless cache %s not found."})
	if aerr != nil {
		return nil, aerr
	}
	resp := describeServerlessCachesResponse{Xmlns: elastiCacheNamespace, NextToken: next, RequestID: requestID}
	for _, name := range names {
		c := s.serverless[name]
		resp.Caches = append(resp.Caches, serverlessCacheXML{
			ServerlessCacheName: c.Name, Status: c.Status, Engine: "valkey", ARN: serverlessARN(c.Name),
			Endpoint: endpointXML(c.Address, c.Port), ReaderEndpoint: endpointXML(c.ReaderAddress, c.ReaderPort),
		})
	}
	return resp, nil
}

// listTagsForResource answers the tags of the group, cache cluster or
// serverless cache an ARN names.
func (s *Server) listTagsForResource(form url.Values, sees func(string) bool) (any, *apiError) {
	arn := form.Get("ResourceName")
	var tags map[string]string
	found := false
	for id, g := range s.groups {
		if groupARN(id) == arn && sees(id) {
			tags, found = g.Tags, true
		}
	}
	for id, c := range s.cacheClusters {
		if cacheClusterARN(id) == arn && sees(id) {
			tags, found = c.Tags, true
		}
	}
	for name, c := range s.serverless {
		if serverlessARN(name) == arn && sees(name) {
			tags, found = c.Tags, true
		}
	}
	if !found {
		return nil, &apiError{"InvalidARN", "The ARN " + arn + " is not valid or names no resource."}
	}
	return listTagsForResourceResponse{Xmlns: elastiCacheNamespace, TagList: rdsTags(tags), RequestID: requestID}, nil
}
