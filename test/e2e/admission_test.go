package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
)

// cause is one field error admission must return: the field with its list
// indices, and the whole message of the rule that refused it.
type cause struct{ field, msg string }

// The messages of the admission rules, each naming its field and the fix.
const (
	ec2TagsEmpty     = "spec.sources[].awsEC2.tags: an empty map selects every instance in the region; name at least one tag or use instanceIDs"
	ec2IDsEmpty      = "spec.sources[].awsEC2.instanceIDs: an empty list selects every instance in the region; list at least one instance ID or use tags"
	ec2ID            = "spec.sources[].awsEC2.instanceIDs[]: not an EC2 instance ID (i- and 8 or 17 lower-case hex digits, such as i-0123456789abcdef0)"
	ec2OneOf         = "spec.sources[].awsEC2: set exactly one of instanceIDs, tags"
	ec2Tags          = "spec.sources[].awsEC2.tags: tag keys are 1 to 128 characters and values at most 256 (AWS's limits)"
	cacheOneOf       = "spec.sources[].awsElastiCache: set exactly one of replicationGroupID, cacheClusterID, serverlessCacheName"
	cacheGroupEmpty  = "spec.sources[].awsElastiCache.replicationGroupID: an empty identifier selects every replication group in the region; name one"
	cacheGroup       = "spec.sources[].awsElastiCache.replicationGroupID: a replication group ID is 1 to 40 letters, digits and '-', starting with a letter, not ending with '-' and without '--'"
	cacheCluster     = "spec.sources[].awsElastiCache.cacheClusterID: a cache cluster ID is 1 to 50 letters, digits and '-', starting with a letter, not ending with '-' and without '--'"
	cacheServerless  = "spec.sources[].awsElastiCache.serverlessCacheName: an empty name selects every serverless cache in the region; name one"
	cacheRole        = "spec.sources[].awsElastiCache.role: primary and readers select nodes of a replication group or a serverless cache's endpoints; a cache cluster's nodes have no roles, remove role"
	memoryDBEmpty    = "spec.sources[].awsMemoryDB.clusterName: an empty name selects no cluster; name one"
	memoryDBName     = "spec.sources[].awsMemoryDB.clusterName: a MemoryDB cluster name is 1 to 40 letters, digits and '-', starting with a letter, not ending with '-' and without '--'"
	rdsInstanceEmpty = "spec.sources[].awsRDS.dbInstanceIdentifier: an empty identifier selects every DB instance in the region; name one, or use dbClusterIdentifier or tags"
	rdsClusterEmpty  = "spec.sources[].awsRDS.dbClusterIdentifier: an empty identifier selects every DB cluster in the region; name one, or use dbInstanceIdentifier or tags"
	rdsTagsEmpty     = "spec.sources[].awsRDS.tags: an empty map selects every instance in the region; name at least one tag or use dbInstanceIdentifier or dbClusterIdentifier"
	rdsTags          = "spec.sources[].awsRDS.tags: tag keys are 1 to 128 characters and values at most 256 (AWS's limits)"
	rdsOneOf         = "spec.sources[].awsRDS: set exactly one of dbInstanceIdentifier, dbClusterIdentifier, tags"
	rdsInstance      = "spec.sources[].awsRDS.dbInstanceIdentifier: an RDS identifier is 1 to 63 letters, digits and '-', starting with a letter, not ending with '-' and without '--'"
	rdsCluster       = "spec.sources[].awsRDS.dbClusterIdentifier: an RDS identifier is 1 to 63 letters, digits and '-', starting with a letter, not ending with '-' and without '--'"
	// awsRegion is the one message of every region field (v1alpha1.AWSRegion):
	// the API server puts the field's path before it.
	awsRegion         = "not an AWS region name such as eu-west-1, us-gov-west-1, cn-north-1 or eusc-de-east-1"
	mappedHex         = "spec.sources[].static.endpoints[].address: an IPv4-mapped IPv6 address is not accepted; write the IPv4 address of its last 32 bits (a.b.c.d) instead"
	invalidIPv6       = "is not a valid IPv6 address"
	invalidIPv4       = "is not a valid IPv4 address"
	staticNumeric     = "spec.sources[].static.endpoints[].address: looks like an IP address written as a name; write the address"
	staticNeedsFQDN   = "spec.sources[].static.endpoints[].address: a DNS name is published only when spec.addressTypes includes FQDN; add FQDN or use an IP address"
	staticInCluster   = "spec.sources[].static.endpoints[].address: a name in the cluster's DNS domain (cluster.local, or <service>.<namespace>.svc) points back into the cluster; name the outside backend"
	dnsNumeric        = "spec.sources[].dns.name: looks like an IP address written as a name; write the address in a static source"
	dnsInCluster      = "spec.sources[].dns.name: a name in the cluster's DNS domain (cluster.local, or <service>.<namespace>.svc) points back into the cluster; name the outside backend"
	dnsNotAName       = "spec.sources[].dns.name: not a DNS name (labels of 1 to 63 letters, digits, '-' or '_', separated by dots); an IP address belongs in a static source"
	staticOneLabel    = "spec.sources[].static.endpoints[].address: a name of one label is completed by the resolver's search path, possibly into the cluster (db becomes db.<namespace>.svc.cluster.local); write the whole DNS name, such as db.example.com"
	staticLocalhost   = "spec.sources[].static.endpoints[].address: localhost and names under it resolve to the host's own loopback address (RFC 6761); name the outside backend"
	staticMetadata    = "spec.sources[].static.endpoints[].address: a name of a cloud's instance metadata service (metadata.google.internal, metadata.goog and names under them, instance-data.*) must not be published; name the outside backend"
	staticSearchPath  = "spec.sources[].static.endpoints[].address: Pods' DNS search paths complete this name into the cluster (a Service of default, kube-system, kube-public or kube-node-lease, such as kubernetes.default, or a name ending in .pod); name the outside backend"
	dnsOneLabel       = "spec.sources[].dns.name: a name of one label is completed by the resolver's search path, possibly into the cluster (db becomes db.<namespace>.svc.cluster.local); write the whole DNS name, such as db.example.com"
	dnsLocalhost      = "spec.sources[].dns.name: localhost and names under it resolve to the host's own loopback address (RFC 6761); name the outside backend"
	dnsMetadata       = "spec.sources[].dns.name: a name of a cloud's instance metadata service (metadata.google.internal, metadata.goog and names under them, instance-data.*) must not be published; name the outside backend"
	dnsSearchPath     = "spec.sources[].dns.name: Pods' DNS search paths complete this name into the cluster (a Service of default, kube-system, kube-public or kube-node-lease, such as kubernetes.default, or a name ending in .pod); name the outside backend"
	consulService     = "spec.sources[].consul.service: a Consul service name is 1 to 128 letters, digits, '-', '_' and '.', starting and ending with a letter or digit, without '..'"
	consulTag         = "spec.sources[].consul.tags[]: a tag is 1 to 128 letters, digits, '-', '_', '.', ':' and '='"
	consulNamespace   = "spec.sources[].consul.namespace: a DNS-1123 label (lower-case letters, digits and '-', starting and ending with a letter or digit, at most 63 characters)"
	consulPartition   = "spec.sources[].consul.partition: a DNS-1123 label (lower-case letters, digits and '-', starting and ending with a letter or digit, at most 63 characters)"
	consulDatacenter  = "spec.sources[].consul.datacenter: a Consul datacenter name is letters, digits, '-' and '_', at most 64 characters"
	consulMetaKeys    = "spec.sources[].consul.nodeMeta: keys are letters, digits, '-' and '_'"
	consulMetaBounds  = "spec.sources[].consul.nodeMeta: keys are 1 to 128 characters and values at most 512"
	drainNotADuration = "spec.drainPeriod: not a duration; write a number and a unit (h, m, s, ms), such as 30s, 5m or 1h"
	probePath         = "probe.http.path: write '/' and a path, then a query after '?' if any, of letters, digits, -._~!$&'()*+,;=:@/ and %XX escapes; no spaces, '#' or other characters"
	fixedIPv4         = "spec.sources: more than 10000 IPv4 addresses in static endpoints and awsEC2 instanceIDs together; the controller publishes at most 10000 endpoints of an address family per backend (--max-endpoints-per-backend): split the backend into several ExternalBackends"
	fixedIPv6         = "spec.sources: more than 10000 IPv6 addresses in static endpoints and awsEC2 instanceIDs together; the controller publishes at most 10000 endpoints of an address family per backend (--max-endpoints-per-backend): split the backend into several ExternalBackends"
	fixedNames        = "spec.sources: more than 10000 DNS names in static endpoints; the controller publishes at most 10000 endpoints of an address family per backend (--max-endpoints-per-backend): split the backend into several ExternalBackends"
)

// mapped is the message for an IPv4-mapped IPv6 address in dotted form.
func mapped(v4 string) string {
	return "spec.sources[].static.endpoints[].address: an IPv4-mapped IPv6 address is not accepted; write " + v4 + " instead"
}

// Field paths of the one source "s" the specs below have.
const (
	addr0   = "spec.sources[0].static.endpoints[0].address"
	ec2     = "spec.sources[0].awsEC2"
	rds     = "spec.sources[0].awsRDS"
	cache   = "spec.sources[0].awsElastiCache"
	mdb     = "spec.sources[0].awsMemoryDB"
	consul  = "spec.sources[0].consul"
	dnsName = "spec.sources[0].dns.name"
)

// one is a spec (as JSON) with one source named "s" of kind, whose body is JSON.
func one(kind, body string) string {
	return fmt.Sprintf(`{"sources":[{"name":"s",%q:%s}]}`, kind, body)
}

// addresses is a spec with one static source of addrs, and addressTypes
// when types is not empty.
func addresses(types []string, addrs ...string) string {
	eps := make([]map[string]string, 0, len(addrs))
	for _, a := range addrs {
		eps = append(eps, map[string]string{"address": a})
	}
	spec := map[string]any{"sources": []any{map[string]any{"name": "s", "static": map[string]any{"endpoints": eps}}}}
	if len(types) > 0 {
		spec["addressTypes"] = types
	}
	b, _ := json.Marshal(spec) // maps of strings always marshal
	return string(b)
}

var withFQDN = []string{"IPv4", "IPv6", "FQDN"}

// ec2IDs is an awsEC2 source in eu-west-1 of the given instance IDs (JSON list).
func ec2IDs(ids string) string {
	return one("awsEC2", `{"region":"eu-west-1","instanceIDs":`+ids+`}`)
}

// dnsOf is a dns source of name.
func dnsOf(name string) string { return one("dns", fmt.Sprintf(`{"name":%q}`, name)) }

// consulOf is a consul source whose body adds fields to service "web".
func consulOf(fields string) string {
	return one("consul", `{"service":"web"`+fields+`}`)
}

// drain is a spec with a static source and spec.drainPeriod d.
func drain(d string) string {
	return fmt.Sprintf(`{"drainPeriod":%q,"sources":[{"name":"s","static":{"endpoints":[{"address":"192.0.2.10"}]}}]}`, d)
}

// probed is a spec with a static source and an HTTP probe of path.
func probed(path string) string {
	return fmt.Sprintf(`{"probe":{"http":{"path":%q}},"sources":[{"name":"s","static":{"endpoints":[{"address":"192.0.2.10"}]}}]}`, path)
}

// fixed is a spec listing n4 IPv4 addresses, n6 IPv6 addresses and
// names DNS names in static sources of at most 1000 endpoints (the CRD's
// bound on one), and ids EC2 instance IDs in one more source: the lists
// the CRD bounds at the controller's default --max-endpoints-per-backend
// (v1alpha1.DefaultMaxEndpointsPerBackend) for each family.
func fixed(n4, n6, names, ids int) string {
	var addrs []string
	for i := range n4 {
		addrs = append(addrs, fmt.Sprintf("10.%d.%d.%d", i/65536, i/256%256, i%256))
	}
	for i := range n6 {
		addrs = append(addrs, fmt.Sprintf("2001:db8::%x", i+1))
	}
	for i := range names {
		addrs = append(addrs, fmt.Sprintf("host-%d.example.com", i))
	}
	var sources []any
	for len(addrs) > 0 {
		chunk := addrs[:min(1000, len(addrs))]
		addrs = addrs[len(chunk):]
		eps := make([]map[string]string, len(chunk))
		for i, a := range chunk {
			eps[i] = map[string]string{"address": a}
		}
		sources = append(sources, map[string]any{"name": fmt.Sprintf("s%d", len(sources)), "static": map[string]any{"endpoints": eps}})
	}
	if ids > 0 {
		list := make([]string, ids)
		for i := range list {
			list[i] = fmt.Sprintf("i-%08x", i)
		}
		sources = append(sources, map[string]any{"name": "vms", "awsEC2": map[string]any{"region": "eu-west-1", "instanceIDs": list}})
	}
	b, _ := json.Marshal(map[string]any{"sources": sources, "addressTypes": withFQDN}) // maps of strings always marshal
	return string(b)
}

// most is the controller's default --max-endpoints-per-backend, which the
// CRD's rules on fixed lists repeat.
const most = v1alpha1.DefaultMaxEndpointsPerBackend

// refusedSpecs are specs admission must refuse with exactly the causes given:
// each message whole, and no other.
var refusedSpecs = []struct {
	name string
	spec string
	want []cause
}{
	// Empty selectors would select every instance in the region.
	{"ec2 empty tags", one("awsEC2", `{"region":"eu-west-1","tags":{}}`), []cause{{ec2 + ".tags", ec2TagsEmpty}}},
	{"ec2 empty instanceIDs", ec2IDs(`[]`), []cause{{ec2 + ".instanceIDs", ec2IDsEmpty}}},
	{"ec2 neither", one("awsEC2", `{"region":"eu-west-1"}`), []cause{{ec2, ec2OneOf}}},
	{"ec2 both", one("awsEC2", `{"region":"eu-west-1","instanceIDs":["i-01234567"],"tags":{"app":"web"}}`), []cause{{ec2, ec2OneOf}}},
	{"rds empty instance identifier", one("awsRDS", `{"region":"eu-west-1","dbInstanceIdentifier":""}`), []cause{{rds + ".dbInstanceIdentifier", rdsInstanceEmpty}}},
	{"rds empty cluster identifier", one("awsRDS", `{"region":"eu-west-1","dbClusterIdentifier":""}`), []cause{{rds + ".dbClusterIdentifier", rdsClusterEmpty}}},
	{"rds empty tags", one("awsRDS", `{"region":"eu-west-1","tags":{}}`), []cause{{rds + ".tags", rdsTagsEmpty}}},
	{"rds selects nothing", one("awsRDS", `{"region":"eu-west-1","role":"writer"}`), []cause{{rds, rdsOneOf}}},
	{"rds identifier and tags", one("awsRDS", `{"region":"eu-west-1","dbInstanceIdentifier":"orders","tags":{"app":"orders"}}`), []cause{{rds, rdsOneOf}}},
	{"cache selects nothing", one("awsElastiCache", `{"region":"eu-west-1","role":"primary"}`), []cause{{cache, cacheOneOf}}},
	{"cache group and cluster", one("awsElastiCache", `{"region":"eu-west-1","replicationGroupID":"orders","cacheClusterID":"orders-001"}`), []cause{{cache, cacheOneOf}}},
	{"cache empty group", one("awsElastiCache", `{"region":"eu-west-1","replicationGroupID":""}`), []cause{{cache + ".replicationGroupID", cacheGroupEmpty}}},
	{"cache empty serverless name", one("awsElastiCache", `{"region":"eu-west-1","serverlessCacheName":""}`), []cause{{cache + ".serverlessCacheName", cacheServerless}}},
	{"memorydb empty cluster", one("awsMemoryDB", `{"region":"eu-west-1","clusterName":""}`), []cause{{mdb + ".clusterName", memoryDBEmpty}}},
	{"cache cluster with a role", one("awsElastiCache", `{"region":"eu-west-1","cacheClusterID":"sessions","role":"primary"}`), []cause{{cache, cacheRole}}},

	// AWS names.
	{"ec2 region without number", one("awsEC2", `{"region":"eu-west","tags":{"app":"web"}}`), []cause{{ec2 + ".region", awsRegion}}},
	{"ec2 region in capitals", one("awsEC2", `{"region":"EU-WEST-1","tags":{"app":"web"}}`), []cause{{ec2 + ".region", awsRegion}}},
	{"ec2 empty region", one("awsEC2", `{"region":"","tags":{"app":"web"}}`), []cause{{ec2 + ".region", awsRegion}}},
	{"rds region with a path", one("awsRDS", `{"region":"eu-west-1/x","dbInstanceIdentifier":"orders"}`), []cause{{rds + ".region", awsRegion}}},
	{"rds region of a host", one("awsRDS", `{"region":"169.254.169.254","dbInstanceIdentifier":"orders"}`), []cause{{rds + ".region", awsRegion}}},
	{"short instance ID", ec2IDs(`["i-0a"]`), []cause{{ec2 + ".instanceIDs[0]", ec2ID}}},
	{"instance ID in capitals", ec2IDs(`["i-01234567","i-0123456789ABCDEF0"]`), []cause{{ec2 + ".instanceIDs[1]", ec2ID}}},
	{"instance ID of 9 digits", ec2IDs(`["i-012345678"]`), []cause{{ec2 + ".instanceIDs[0]", ec2ID}}},
	{"rds identifier starting with a digit", one("awsRDS", `{"region":"eu-west-1","dbInstanceIdentifier":"1orders"}`), []cause{{rds + ".dbInstanceIdentifier", rdsInstance}}},
	{"rds identifier with an underscore", one("awsRDS", `{"region":"eu-west-1","dbInstanceIdentifier":"orders_db"}`), []cause{{rds + ".dbInstanceIdentifier", rdsInstance}}},
	{"rds identifier with a double hyphen", one("awsRDS", `{"region":"eu-west-1","dbInstanceIdentifier":"orders--db"}`), []cause{{rds + ".dbInstanceIdentifier", rdsInstance}}},
	{"rds cluster identifier ending in a hyphen", one("awsRDS", `{"region":"eu-west-1","dbClusterIdentifier":"orders-"}`), []cause{{rds + ".dbClusterIdentifier", rdsCluster}}},
	{"cache group starting with a digit", one("awsElastiCache", `{"region":"eu-west-1","replicationGroupID":"1orders"}`), []cause{{cache + ".replicationGroupID", cacheGroup}}},
	{"cache group with a double hyphen", one("awsElastiCache", `{"region":"eu-west-1","replicationGroupID":"orders--a"}`), []cause{{cache + ".replicationGroupID", cacheGroup}}},
	{"cache cluster with a dot", one("awsElastiCache", `{"region":"eu-west-1","cacheClusterID":"sessions.a"}`), []cause{{cache + ".cacheClusterID", cacheCluster}}},
	{"cache region of a host", one("awsElastiCache", `{"region":"169.254.169.254","serverlessCacheName":"lru"}`), []cause{{cache + ".region", awsRegion}}},
	{"memorydb cluster ending in a hyphen", one("awsMemoryDB", `{"region":"eu-west-1","clusterName":"ledger-"}`), []cause{{mdb + ".clusterName", memoryDBName}}},
	{"ec2 tag key of 129 characters", one("awsEC2", `{"region":"eu-west-1","tags":{"`+strings.Repeat("k", 129)+`":"v"}}`), []cause{{ec2 + ".tags", ec2Tags}}},
	{"rds tag value of 257 characters", one("awsRDS", `{"region":"eu-west-1","tags":{"app":"`+strings.Repeat("v", 257)+`"}}`), []cause{{rds + ".tags", rdsTags}}},
	{"rds empty tag key", one("awsRDS", `{"region":"eu-west-1","tags":{"":"orders"}}`), []cause{{rds + ".tags", rdsTags}}},

	// IPv4-mapped IPv6: one message, naming the IPv4 address to write.
	{"IPv4-mapped IPv6", addresses(nil, "::ffff:192.0.2.7"), []cause{{addr0, mapped("192.0.2.7")}}},
	{"IPv4-mapped IPv6 with FQDN enabled", addresses(withFQDN, "::ffff:192.0.2.7"), []cause{{addr0, mapped("192.0.2.7")}}},
	{"IPv4-mapped IPv6 written out", addresses(nil, "0:0:0:0:0:ffff:192.0.2.7"), []cause{{addr0, mapped("192.0.2.7")}}},
	{"IPv4-mapped IPv6 in hex", addresses(nil, "::ffff:c000:207"), []cause{{addr0, mappedHex}}},
	{"IPv4-mapped IPv6 in hex, capitals", addresses(nil, "0:0:0:0:0:FFFF:C000:0207"), []cause{{addr0, mappedHex}}},
	{"IPv4-mapped IPv6 after a good address", addresses(nil, "192.0.2.10", "::ffff:198.51.100.7"), []cause{{"spec.sources[0].static.endpoints[1].address", mapped("198.51.100.7")}}},
	{"IPv6 with two ::", addresses(nil, "2001:db8::1::2"), []cause{{addr0, invalidIPv6}}},
	{"mapped-looking IPv6 with too many groups", addresses(nil, "0:0:0:0:0:0:ffff:c000:207"), []cause{{addr0, invalidIPv6}}},
	{"IPv4 out of range", addresses(nil, "192.0.2.300"), []cause{{addr0, invalidIPv4}}},
	{"IPv4 with a leading zero", addresses(nil, "192.0.2.07"), []cause{{addr0, invalidIPv4}}},

	// Numbers written as names.
	{"one number", addresses(withFQDN, "1684301000"), []cause{{addr0, staticNumeric}}},
	{"IPv4 with a trailing dot", addresses(withFQDN, "100.100.100.200."), []cause{{addr0, staticNumeric}}},
	{"three numbers", addresses(nil, "100.100.51400"), []cause{{addr0, staticNumeric}}},
	{"hex dotted", addresses(withFQDN, "0x64.0x64.0x64.0xc8"), []cause{{addr0, staticNumeric}}},
	{"hex dotted without FQDN", addresses(nil, "0x64.0x64.0x64.0xc8"), []cause{{addr0, staticNumeric}, {"spec", staticNeedsFQDN}}},
	{"two hex numbers", addresses(withFQDN, "0xc0.0x207"), []cause{{addr0, staticNumeric}}},
	{"mixed hex and decimal", addresses(withFQDN, "192.0x0.2.7"), []cause{{addr0, staticNumeric}}},
	{"in-cluster static name", addresses(withFQDN, "db.payments.svc.cluster.local"), []cause{{addr0, staticInCluster}}},
	{"svc static name", addresses(withFQDN, "db.payments.svc"), []cause{{addr0, staticInCluster}}},
	{"DNS name without FQDN", addresses(nil, "db.example.com"), []cause{{"spec", staticNeedsFQDN}}},

	// Names that lead back into the cluster, to the host or to a metadata
	// service, which the controller refuses too.
	{"static name of one label", addresses(withFQDN, "db"), []cause{{addr0, staticOneLabel}}},
	{"static name of one label without FQDN", addresses(nil, "cafe"), []cause{{addr0, staticOneLabel}, {"spec", staticNeedsFQDN}}},
	{"static name under localhost", addresses(withFQDN, "db.localhost"), []cause{{addr0, staticLocalhost}}},
	{"static GCE metadata name", addresses(withFQDN, "metadata.google.internal"), []cause{{addr0, staticMetadata}}},
	{"static name under a metadata name", addresses(withFQDN, "x.metadata.goog"), []cause{{addr0, staticMetadata}}},
	{"static AWS instance-data name", addresses(withFQDN, "instance-data.ec2.internal"), []cause{{addr0, staticMetadata}}},
	{"static kubernetes.default", addresses(withFQDN, "kubernetes.default"), []cause{{addr0, staticSearchPath}}},
	{"static Pod name", addresses(withFQDN, "10-0-0-1.default.pod"), []cause{{addr0, staticSearchPath}}},
	{"static metadata name after a good one", addresses(withFQDN, "db.example.com", "metadata.goog"), []cause{{"spec.sources[0].static.endpoints[1].address", staticMetadata}}},

	{"dns one number", dnsOf("1684301000"), []cause{{dnsName, dnsNumeric}}},
	{"dns hex dotted", dnsOf("0x64.0x64.0x64.0xc8"), []cause{{dnsName, dnsNumeric}}},
	{"dns hex in capitals", dnsOf("0X64.0X64.0X64.0XC8"), []cause{{dnsName, dnsNumeric}}},
	{"dns octal dotted", dnsOf("0144.0144.0144.0310"), []cause{{dnsName, dnsNumeric}}},
	{"dns IPv4 with a trailing dot", dnsOf("100.100.100.200."), []cause{{dnsName, dnsNumeric}}},
	{"dns IPv4", dnsOf("192.0.2.7"), []cause{{dnsName, dnsNumeric}}},
	{"dns cluster.local", dnsOf("db.payments.svc.cluster.local"), []cause{{dnsName, dnsInCluster}}},
	{"dns cluster.local absolute", dnsOf("kubernetes.default.svc.cluster.local."), []cause{{dnsName, dnsInCluster}}},
	{"dns cluster.local in capitals", dnsOf("DB.Payments.SVC.Cluster.Local"), []cause{{dnsName, dnsInCluster}}},
	{"dns svc name", dnsOf("db.payments.svc"), []cause{{dnsName, dnsInCluster}}},
	{"dns svc name absolute", dnsOf("db.payments.svc."), []cause{{dnsName, dnsInCluster}}},
	{"dns IPv6", dnsOf("2001:db8::7"), []cause{{dnsName, dnsNotAName}}},
	{"dns empty label", dnsOf("db..example.com"), []cause{{dnsName, dnsNotAName}}},
	{"dns with a slash", dnsOf("db.example.com/x"), []cause{{dnsName, dnsNotAName}}},
	{"dns name of one label", dnsOf("db"), []cause{{dnsName, dnsOneLabel}}},
	{"dns name of one label, absolute", dnsOf("db."), []cause{{dnsName, dnsOneLabel}}},
	{"dns localhost", dnsOf("localhost"), []cause{{dnsName, dnsOneLabel}, {dnsName, dnsLocalhost}}},
	{"dns name under localhost", dnsOf("db.localhost"), []cause{{dnsName, dnsLocalhost}}},
	{"dns name under localhost, absolute in capitals", dnsOf("DB.LocalHost."), []cause{{dnsName, dnsLocalhost}}},
	{"dns GCE metadata name", dnsOf("Metadata.Google.Internal."), []cause{{dnsName, dnsMetadata}}},
	{"dns name under a metadata name", dnsOf("x.metadata.google.internal"), []cause{{dnsName, dnsMetadata}}},
	{"dns AWS instance-data name", dnsOf("instance-data.eu-west-1.compute.internal"), []cause{{dnsName, dnsMetadata}}},
	{"dns kubernetes.default", dnsOf("kubernetes.default"), []cause{{dnsName, dnsSearchPath}}},
	{"dns kube-dns.kube-system absolute", dnsOf("kube-dns.kube-system."), []cause{{dnsName, dnsSearchPath}}},
	{"dns Pod name", dnsOf("10-0-0-1.default.pod"), []cause{{dnsName, dnsSearchPath}}},

	// Consul names go into the URL path and query.
	{"consul service climbing the path", one("consul", `{"service":"../../v1/agent/self"}`), []cause{{consul + ".service", consulService}}},
	{"consul service with a slash", one("consul", `{"service":"web/../../acl/tokens"}`), []cause{{consul + ".service", consulService}}},
	{"consul service with a query", one("consul", `{"service":"web?dc=other"}`), []cause{{consul + ".service", consulService}}},
	{"consul service with ..", one("consul", `{"service":"web..db"}`), []cause{{consul + ".service", consulService}}},
	{"consul service starting with a dash", one("consul", `{"service":"-web"}`), []cause{{consul + ".service", consulService}}},
	{"consul empty service", one("consul", `{"service":""}`), []cause{{consul + ".service", consulService}}},
	{"consul tag with a slash", consulOf(`,"tags":["primary","a/b"]`), []cause{{consul + ".tags[1]", consulTag}}},
	{"consul tag with a query", consulOf(`,"tags":["x?y"]`), []cause{{consul + ".tags[0]", consulTag}}},
	{"consul tag with a fragment", consulOf(`,"tags":["x#y"]`), []cause{{consul + ".tags[0]", consulTag}}},
	{"consul empty tag", consulOf(`,"tags":[""]`), []cause{{consul + ".tags[0]", consulTag}}},
	{"consul namespace in capitals", consulOf(`,"namespace":"Team-A"`), []cause{{consul + ".namespace", consulNamespace}}},
	{"consul namespace with a slash", consulOf(`,"namespace":"a/b"`), []cause{{consul + ".namespace", consulNamespace}}},
	{"consul partition with an underscore", consulOf(`,"partition":"part_a"`), []cause{{consul + ".partition", consulPartition}}},
	{"consul datacenter with a slash", consulOf(`,"datacenter":"dc1/../x"`), []cause{{consul + ".datacenter", consulDatacenter}}},
	{"consul node meta key with a colon", consulOf(`,"nodeMeta":{"rack:a":"1"}`), []cause{{consul + ".nodeMeta", consulMetaKeys}}},
	{"consul node meta value of 513 characters", consulOf(`,"nodeMeta":{"rack":"` + strings.Repeat("v", 513) + `"}`), []cause{{consul + ".nodeMeta", consulMetaBounds}}},
	{"consul empty node meta key", consulOf(`,"nodeMeta":{"":"1"}`), []cause{{consul + ".nodeMeta", consulMetaBounds}}},

	// Probe paths and queries: what a URL's path and query hold, bounded.
	{"probe path with a space", probed("/a b"), []cause{{"spec.probe.http.path", probePath}}},
	{"probe path with a fragment", probed("/health#x"), []cause{{"spec.probe.http.path", probePath}}},
	{"probe path with a header", probed("/a\r\nHost: other"), []cause{{"spec.probe.http.path", probePath}}},
	{"probe path with a bad escape", probed("/a%zz"), []cause{{"spec.probe.http.path", probePath}}},
	{"probe path without a slash", probed("health"), []cause{{"spec.probe.http.path", probePath}}},
	// Too long for its rule to run, which the API server says too.
	{"probe path of 257 characters", probed("/" + strings.Repeat("a", 256)), []cause{{"spec.probe.http.path", "may not be more than 256 bytes"},
		{"<nil>", "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"}}},

	// Drain period.
	{"drain period of 2h", drain("2h"), []cause{{"spec.drainPeriod", "spec.drainPeriod: 2h is longer than the maximum of 1h; use 1h or less"}}},
	{"drain period just over 1h", drain("1h0m0.001s"), []cause{{"spec.drainPeriod", "spec.drainPeriod: 1h0m0.001s is longer than the maximum of 1h; use 1h or less"}}},
	{"negative drain period", drain("-5s"), []cause{{"spec.drainPeriod", "spec.drainPeriod: -5s is negative; use 0s or more"}}},
	{"drain period in words", drain("5 minutes"), []cause{{"spec.drainPeriod", drainNotADuration}}},
	{"drain period in days", drain("1d"), []cause{{"spec.drainPeriod", drainNotADuration}}},

	// Fixed lists longer than the controller publishes of a family.
	{"one IPv4 address too many", fixed(most+1, 0, 0, 0), []cause{{"spec", fixedIPv4}}},
	{"IPv4 addresses and EC2 instance IDs", fixed(most, 0, 0, 1), []cause{{"spec", fixedIPv4}}},
	{"one IPv6 address too many", fixed(0, most+1, 0, 0), []cause{{"spec", fixedIPv6}}},
	{"one DNS name too many", fixed(0, 0, most+1, 0), []cause{{"spec", fixedNames}}},
}

// acceptedSpecs are specs admission must accept.
var acceptedSpecs = []struct{ name, spec string }{
	// NAT64 addresses are the controller's to unwrap and check.
	{"NAT64 in hex", addresses(nil, "64:ff9b::c000:207")},
	{"NAT64 dotted", addresses(nil, "64:ff9b::192.0.2.7")},
	{"IPv6 with ffff elsewhere", addresses(nil, "2001:db8:ffff::1")},
	{"IPv4 and IPv6", addresses(nil, "192.0.2.10", "2001:db8::10")},
	{"names with FQDN", addresses(withFQDN, "db.example.com", "1e100.net", "db0x1.example.com", "svc.example.com",
		"localhost.example.com", "kubernetes.default.example.com", "instance-data-backup.example.com", "pod.example.com", "cafe.example")},
	{"regions and instance IDs", `{"sources":[
		{"name":"eu","awsEC2":{"region":"eu-west-1","instanceIDs":["i-01234567","i-0123456789abcdef0"]}},
		{"name":"gov","awsEC2":{"region":"us-gov-west-1","tags":{"app":"web"}}},
		{"name":"cn","awsRDS":{"region":"cn-north-1","dbInstanceIdentifier":"orders-db-1"}},
		{"name":"ap","awsRDS":{"region":"ap-southeast-5","dbClusterIdentifier":"Aurora1","role":"writer"}},
		{"name":"iso","awsRDS":{"region":"us-isob-east-1","tags":{"app":"orders","aws:cloudformation:stack-name":""}}},
		{"name":"eusc","awsEC2":{"region":"eusc-de-east-1","tags":{"app":"web"}}}]}`},
	{"caches", `{"sources":[
		{"name":"group","awsElastiCache":{"region":"eu-west-1","replicationGroupID":"Orders-1","role":"readers"}},
		{"name":"memcached","awsElastiCache":{"region":"eu-west-1","cacheClusterID":"sessions-0001-001"}},
		{"name":"serverless","awsElastiCache":{"region":"us-gov-west-1","serverlessCacheName":"lru","role":"readers"}},
		{"name":"memorydb","awsMemoryDB":{"region":"eu-west-1","clusterName":"ledger"}}]}`},
	{"consul names", consulOf(`,"datacenter":"dc_1-east","namespace":"team-a","partition":"default",` +
		`"tags":["primary","v=2","zone:a","v1.2_x"],"nodeMeta":{"rack":"r1","zone_id":"a:b/c"},"zoneMetaKey":"zone"`)},
	{"consul service with dots and underscores", one("consul", `{"service":"web.v2_api-1"}`)},
	{"as many fixed addresses as the controller publishes, of each family", fixed(most-1000, 5000, 0, 1000)},
	{"dns names", `{"sources":[{"name":"a","dns":{"name":"db.example.com."}},{"name":"b","dns":{"name":"_db._tcp.Example.COM"}},
		{"name":"c","dns":{"name":"1e100.net"}},{"name":"d","dns":{"name":"cluster.local.example.com"}},
		{"name":"e","dns":{"name":"db.localhosts"}},{"name":"f","dns":{"name":"kube-system.example.com"}},
		{"name":"g","dns":{"name":"metadata.google.internal.example.com."}},{"name":"h","dns":{"name":"x-instance-data.example.com"}}]}`},
	{"probe path and query", probed("/health/ready?verbose=1&x=a%2Fb")},
	{"probe path of 256 characters", probed("/" + strings.Repeat("a", 255))},
	{"drain period of 1h", drain("1h")},
	{"drain period of 0s", drain("0s")},
	{"drain period of 0", drain("0")},
	{"drain period of 59m59.5s", drain("59m59.5s")},
}

// backendObject is an ExternalBackend in ns named name with one port and the
// fields of spec (JSON).
func backendObject(t *testing.T, ns, name, spec string) *unstructured.Unstructured {
	t.Helper()
	var s map[string]any
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		t.Fatalf("spec of %s: %v", name, err)
	}
	s["service"] = map[string]any{"ports": []any{map[string]any{"name": "pg", "port": int64(5432)}}}
	u := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{}, "spec": s}}
	u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("ExternalBackend"))
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

// expectRefused fails the test unless err is an Invalid error whose causes
// are exactly want, each ending in its whole message.
func expectRefused(t *testing.T, err error, want []cause) {
	t.Helper()
	var status apierrors.APIStatus
	if err == nil {
		t.Errorf("accepted, want refused with %v", want)
		return
	}
	if !apierrors.IsInvalid(err) || !errors.As(err, &status) || status.Status().Details == nil {
		t.Errorf("error %v, want Invalid", err)
		return
	}
	var got []cause
	for _, c := range status.Status().Details.Causes {
		got = append(got, cause{c.Field, c.Message})
	}
	// A cause's message is "Invalid value: <value>: <rule's message>".
	matches := func(g, w cause) bool { return g.field == w.field && strings.HasSuffix(g.msg, ": "+w.msg) }
	for _, w := range want {
		if !slices.ContainsFunc(got, func(g cause) bool { return matches(g, w) }) {
			t.Errorf("no cause %s: %q; got %q", w.field, w.msg, got)
		}
	}
	for _, g := range got {
		if !slices.ContainsFunc(want, func(w cause) bool { return matches(g, w) }) {
			t.Errorf("unexpected cause %s: %q", g.field, g.msg)
		}
	}
}

// TestAdmissionRefusesWithOneMessage creates each refused spec and patches a
// working backend to it: both are refused with exactly the causes the case
// gives, and the working backend stays as it was.
func TestAdmissionRefusesWithOneMessage(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	working := staticBackend(ns, "working", "192.0.2.10", "192.0.2.11")
	createReady(t, working, "working", "192.0.2.10", "192.0.2.11")
	before, generation := versions(t, ns, "working"), working.Generation
	good := working.Spec.DeepCopy()

	for i, bad := range refusedSpecs {
		t.Run(bad.name, func(t *testing.T) {
			expectRefused(t, k8s.Create(ctx, backendObject(t, ns, fmt.Sprintf("bad-%d", i), bad.spec)), bad.want)

			patch := []byte(`{"spec":` + bad.spec + `}`)
			err := k8s.Patch(ctx, get(t, working), client.RawPatch(types.MergePatchType, patch))
			expectRefused(t, err, bad.want)
			if err == nil {
				mustUpdate(t, working, func(xb *v1alpha1.ExternalBackend) { xb.Spec = *good.DeepCopy() })
			}
		})
	}

	if cur := get(t, working); cur.Generation != generation {
		t.Errorf("generation %d, was %d: a patch got through", cur.Generation, generation)
	}
	expectUnchanged(t, ns, "working", before)
}

// TestAdmissionAccepts: the rules refuse no valid spec (a server-side dry run
// of each, so the controller has nothing to do).
func TestAdmissionAccepts(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	for i, ok := range acceptedSpecs {
		t.Run(ok.name, func(t *testing.T) {
			if err := k8s.Create(ctx, backendObject(t, ns, fmt.Sprintf("ok-%d", i), ok.spec), client.DryRunAll); err != nil {
				t.Errorf("refused: %v", err)
			}
		})
	}
}
