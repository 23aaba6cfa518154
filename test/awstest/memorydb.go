package awstest

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
)

// MemoryDBCluster is a MemoryDB cluster as DescribeClusters reports it
// with ShowShardDetails.
type MemoryDBCluster struct {
	// Name is the cluster's Name.
	Name string
	// Status is available, creating, updating, deleting, snapshotting, ...
	Status string
	// Shards are the cluster's shards.
	Shards []MemoryDBShard
	// Tags are read with ListTags.
	Tags map[string]string
}

// MemoryDBShard is one shard of a MemoryDB cluster.
type MemoryDBShard struct {
	// Name is the shard's Name (0001, 0002, ...).
	Name string
	// Status is the shard's Status; empty is available.
	Status string
	// Nodes are the shard's nodes. MemoryDB does not say which is primary.
	Nodes []MemoryDBNode
}

// MemoryDBNode is one node of a shard.
type MemoryDBNode struct {
	// Name is the node's Name (<cluster>-0001-001).
	Name string
	// Status is available, creating, updating, deleting, ...
	Status string
	// Address and Port are the node's Endpoint; an empty Address leaves
	// it out.
	Address string
	Port    int32
	// IPs are what Address resolves to (LookupNetIP).
	IPs []string
	// Zone is the node's AvailabilityZone.
	Zone string
}

// memoryDBARN is the ARN of a MemoryDB cluster, as AWS makes it.
func memoryDBARN(name string) string {
	return "arn:aws:memorydb:eu-west-1:" + account + ":cluster/" + name
}

// PutMemoryDBCluster adds or replaces a MemoryDB cluster.
func (s *Server) PutMemoryDBCluster(c MemoryDBCluster) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.memoryDB[c.Name] = cloneMemoryDB(c)
}

// UpdateMemoryDBCluster changes the cluster name in place; it panics when
// there is none.
func (s *Server) UpdateMemoryDBCluster(name string, change func(*MemoryDBCluster)) {
	update(s, s.memoryDB, "MemoryDB cluster", name, cloneMemoryDB, change)
}

// DeleteMemoryDBCluster removes a MemoryDB cluster.
func (s *Server) DeleteMemoryDBCluster(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.memoryDB, name)
}

func cloneMemoryDB(c MemoryDBCluster) MemoryDBCluster {
	c.Tags = maps.Clone(c.Tags)
	c.Shards = slices.Clone(c.Shards)
	for i := range c.Shards {
		c.Shards[i].Nodes = slices.Clone(c.Shards[i].Nodes)
		for j := range c.Shards[i].Nodes {
			c.Shards[i].Nodes[j].IPs = slices.Clone(c.Shards[i].Nodes[j].IPs)
		}
	}
	return c
}

// --- The JSON 1.1 protocol of MemoryDB.

type memoryDBEndpointJSON struct {
	Address string `json:"Address"`
	Port    int32  `json:"Port"`
}

type memoryDBNodeJSON struct {
	Name             string                `json:"Name"`
	Status           string                `json:"Status"`
	AvailabilityZone string                `json:"AvailabilityZone,omitempty"`
	Endpoint         *memoryDBEndpointJSON `json:"Endpoint,omitempty"`
}

type memoryDBShardJSON struct {
	Name          string             `json:"Name"`
	Status        string             `json:"Status"`
	Slots         string             `json:"Slots"`
	NumberOfNodes int                `json:"NumberOfNodes"`
	Nodes         []memoryDBNodeJSON `json:"Nodes"`
}

type memoryDBClusterJSON struct {
	Name            string                `json:"Name"`
	Status          string                `json:"Status"`
	ARN             string                `json:"ARN"`
	NumberOfShards  int                   `json:"NumberOfShards"`
	ClusterEndpoint *memoryDBEndpointJSON `json:"ClusterEndpoint,omitempty"`
	Shards          []memoryDBShardJSON   `json:"Shards,omitempty"`
}

type describeClustersJSON struct {
	Clusters  []memoryDBClusterJSON `json:"Clusters"`
	NextToken string                `json:"NextToken,omitempty"`
}

type tagJSON struct {
	Key   string `json:"Key"`
	Value string `json:"Value"`
}

type listTagsJSON struct {
	TagList []tagJSON `json:"TagList"`
}

// jsonInt reads an integer member of a JSON call's body, bounded as the
// API bounds it.
func jsonInt(req request, name string, lo, hi, def int) (int, *apiError) {
	v, ok := req.json[name]
	if !ok {
		return def, nil
	}
	f, isNum := v.(float64)
	if !isNum || f != float64(int(f)) || int(f) < lo || int(f) > hi {
		return 0, &apiError{"InvalidParameterValueException", fmt.Sprintf("%s must be an integer between %d and %d", name, lo, hi)}
	}
	return int(f), nil
}

func (s *Server) describeMemoryDBClusters(req request, sees func(string) bool) (any, *apiError) {
	size, aerr := jsonInt(req, "MaxResults", 1, 100, 100)
	if aerr != nil {
		return nil, aerr
	}
	names, next, aerr := s.onePage(DescribeClusters, visible(s.memoryDB, sees), req.str("ClusterName"),
		req.str("NextToken"), size, apiError{"ClusterNotFoundFault", "Cluster %s not found"})
	if aerr != nil {
		return nil, aerr
	}
	shards, _ := req.json["ShowShardDetails"].(bool)
	resp := describeClustersJSON{Clusters: []memoryDBClusterJSON{}, NextToken: next}
	for _, name := range names {
		c := s.memoryDB[name]
		x := memoryDBClusterJSON{
			Name: c.Name, Status: c.Status, ARN: memoryDBARN(c.Name), NumberOfShards: len(c.Shards),
			ClusterEndpoint: &memoryDBEndpointJSON{Address: "clustercfg." + c.Name + ".abc123.memorydb.eu-west-1.amazonaws.com", Port: 6379},
		}
		// Without ShowShardDetails AWS leaves the shards out.
		for _, sh := range c.Shards {
			if !shards {
				break
			}
			sx := memoryDBShardJSON{Name: sh.Name, Status: cmp.Or(sh.Status, "available"), Slots: "0-16383", NumberOfNodes: len(sh.Nodes), Nodes: []memoryDBNodeJSON{}}
			for _, n := range sh.Nodes {
				nx := memoryDBNodeJSON{Name: n.Name, Status: n.Status, AvailabilityZone: n.Zone}
				if n.Address != "" {
					nx.Endpoint = &memoryDBEndpointJSON{Address: n.Address, Port: n.Port}
				}
				sx.Nodes = append(sx.Nodes, nx)
			}
			x.Shards = append(x.Shards, sx)
		}
		resp.Clusters = append(resp.Clusters, x)
	}
	return resp, nil
}

// listMemoryDBTags answers the tags of the cluster an ARN names.
func (s *Server) listMemoryDBTags(req request, sees func(string) bool) (any, *apiError) {
	arn := req.str("ResourceArn")
	for name, c := range s.memoryDB {
		if memoryDBARN(name) == arn && sees(name) {
			resp := listTagsJSON{TagList: []tagJSON{}}
			for _, k := range slices.Sorted(maps.Keys(c.Tags)) {
				resp.TagList = append(resp.TagList, tagJSON{Key: k, Value: c.Tags[k]})
			}
			return resp, nil
		}
	}
	return nil, &apiError{"InvalidARNFault", "The ARN " + arn + " is not valid or names no resource."}
}
