package v1alpha1

// AWSCacheRole selects nodes of a replication group by the role AWS
// reports for them.
// +kubebuilder:validation:Enum=primary;readers;all
type AWSCacheRole string

// Replication group roles.
const (
	// AWSCacheRolePrimary is the primary node of each shard.
	AWSCacheRolePrimary AWSCacheRole = "primary"
	// AWSCacheRoleReaders are the replicas.
	AWSCacheRoleReaders AWSCacheRole = "readers"
	// AWSCacheRoleAll is every node.
	AWSCacheRoleAll AWSCacheRole = "all"
)

// AWSElastiCacheSource reads one ElastiCache cache: the nodes of a Valkey
// or Redis OSS replication group (every node of every shard in cluster
// mode), the nodes of a cache cluster (Memcached), or the endpoint of a
// serverless cache. Each node is published at its own endpoint, resolved
// to its addresses (or the name itself with FQDN), with its port and
// availability zone.
// +kubebuilder:validation:XValidation:rule="[has(self.replicationGroupID), has(self.cacheClusterID), has(self.serverlessCacheName)].filter(x, x).size() == 1",message="spec.sources[].awsElastiCache: set exactly one of replicationGroupID, cacheClusterID, serverlessCacheName"
// +kubebuilder:validation:XValidation:rule="!has(self.cacheClusterID) || !has(self.role) || self.role == 'all'",message="spec.sources[].awsElastiCache.role: primary and readers select nodes of a replication group or a serverless cache's endpoints; a cache cluster's nodes have no roles, remove role"
type AWSElastiCacheSource struct {
	// region of the cache, for example eu-west-1.
	// +required
	Region AWSRegion `json:"region"`

	// replicationGroupID selects the nodes of a Valkey or Redis OSS
	// replication group.
	// +optional
	// +kubebuilder:validation:MaxLength=40
	// +kubebuilder:validation:XValidation:rule="self.size() > 0",message="spec.sources[].awsElastiCache.replicationGroupID: an empty identifier selects every replication group in the region; name one"
	// +kubebuilder:validation:XValidation:rule="self.size() == 0 || self.size() > 40 || (self.matches('^[a-zA-Z][a-zA-Z0-9-]*$') && !self.endsWith('-') && !self.contains('--'))",message="spec.sources[].awsElastiCache.replicationGroupID: a replication group ID is 1 to 40 letters, digits and '-', starting with a letter, not ending with '-' and without '--'"
	ReplicationGroupID string `json:"replicationGroupID,omitempty"`

	// cacheClusterID selects the nodes of a cache cluster: a Memcached
	// cluster (or one node of a replication group).
	// +optional
	// +kubebuilder:validation:MaxLength=50
	// +kubebuilder:validation:XValidation:rule="self.size() > 0",message="spec.sources[].awsElastiCache.cacheClusterID: an empty identifier selects every cache cluster in the region; name one"
	// +kubebuilder:validation:XValidation:rule="self.size() == 0 || self.size() > 50 || (self.matches('^[a-zA-Z][a-zA-Z0-9-]*$') && !self.endsWith('-') && !self.contains('--'))",message="spec.sources[].awsElastiCache.cacheClusterID: a cache cluster ID is 1 to 50 letters, digits and '-', starting with a letter, not ending with '-' and without '--'"
	CacheClusterID string `json:"cacheClusterID,omitempty"`

	// serverlessCacheName selects a serverless cache: its endpoint (its
	// reader endpoint with role readers).
	// +optional
	// +kubebuilder:validation:MaxLength=40
	// +kubebuilder:validation:XValidation:rule="self.size() > 0",message="spec.sources[].awsElastiCache.serverlessCacheName: an empty name selects every serverless cache in the region; name one"
	// +kubebuilder:validation:XValidation:rule="self.size() == 0 || self.size() > 40 || (self.matches('^[a-zA-Z][a-zA-Z0-9-]*$') && !self.endsWith('-') && !self.contains('--'))",message="spec.sources[].awsElastiCache.serverlessCacheName: a serverless cache name is 1 to 40 letters, digits and '-', starting with a letter, not ending with '-' and without '--'"
	ServerlessCacheName string `json:"serverlessCacheName,omitempty"`

	// role picks the primary, the readers or all nodes of a replication
	// group (in cluster mode, where AWS reports no roles, only all), or
	// a serverless cache's endpoint (primary, all) or reader endpoint
	// (readers).
	// +optional
	// +kubebuilder:default=all
	Role AWSCacheRole `json:"role,omitempty"`

	// assumeRoleARN is assumed to read the cache; it must be in the
	// controller's --aws-allowed-role-arns.
	// +optional
	AssumeRoleARN string `json:"assumeRoleARN,omitempty"`
}

// AWSMemoryDBSource reads the nodes of every shard of a MemoryDB cluster,
// each at its own endpoint, with its port and availability zone. MemoryDB
// does not report which node of a shard is primary: clients find the
// roles with CLUSTER SLOTS, as cluster-mode clients do.
type AWSMemoryDBSource struct {
	// region of the cluster, for example eu-west-1.
	// +required
	Region AWSRegion `json:"region"`

	// clusterName selects the cluster.
	// +required
	// +kubebuilder:validation:MaxLength=40
	// +kubebuilder:validation:XValidation:rule="self.size() > 0",message="spec.sources[].awsMemoryDB.clusterName: an empty name selects no cluster; name one"
	// +kubebuilder:validation:XValidation:rule="self.size() == 0 || self.size() > 40 || (self.matches('^[a-zA-Z][a-zA-Z0-9-]*$') && !self.endsWith('-') && !self.contains('--'))",message="spec.sources[].awsMemoryDB.clusterName: a MemoryDB cluster name is 1 to 40 letters, digits and '-', starting with a letter, not ending with '-' and without '--'"
	ClusterName string `json:"clusterName"`

	// assumeRoleARN is assumed to read the cluster; it must be in the
	// controller's --aws-allowed-role-arns.
	// +optional
	AssumeRoleARN string `json:"assumeRoleARN,omitempty"`
}
