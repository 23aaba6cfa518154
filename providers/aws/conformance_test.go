package aws_test

import (
	"context"
	"testing"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
	awsprovider "github.com/backendslice/backendslice/providers/aws"
	"github.com/backendslice/backendslice/providers/providertest"
	"github.com/backendslice/backendslice/test/awstest"
)

// refused is a failure of a source that names a role the controller may
// not assume.
var refused = providertest.Failure{Terminal: true, Reason: v1alpha1.ReasonAccessDenied, MessageContains: []string{"--aws-allowed-role-arns"}}

// notOurs is a failure of a source of another kind.
var notOurs = providertest.Failure{Terminal: true, Reason: v1alpha1.ReasonInvalidSpec}

// other is a static source, which neither AWS provider resolves.
var other = v1alpha1.Source{Name: "other", Static: &v1alpha1.StaticSource{Endpoints: []v1alpha1.StaticEndpoint{{Address: "192.0.2.1"}}}}

// elsewhere is a failure of a source whose region is not the one of the
// BackendProvider it names.
var elsewhere = providertest.Failure{Terminal: true, Reason: v1alpha1.ReasonInvalidSpec, MessageContains: []string{"BackendProvider virginia serves us-east-1"}}

// inVirginia is a request for src through a BackendProvider of us-east-1.
func inVirginia(src v1alpha1.Source) providers.Request {
	req := providertest.NewRequest(src)
	req.Connection = &providers.Connection{Name: "virginia", Key: "v1", Settings: &awsprovider.Settings{Region: "us-east-1"}}
	return req
}

func TestRDSConformance(t *testing.T) {
	e := newEnv(t, nil)
	aurora(e)
	ep := func(addr string) providers.Endpoint {
		return providers.Endpoint{Address: addr, Zone: "eu-west-1a", Hostname: "aurora-" + addr[len(addr)-1:], Serving: true, Port: 5432}
	}
	providertest.Run(t, providertest.Harness{
		Kind:     awsprovider.KindRDS,
		Kinds:    awsprovider.Kinds(),
		Provider: e.s.RDS(),
		Good: func(*testing.T) []providertest.Case {
			return []providertest.Case{
				{Name: "instance", Request: providertest.NewRequest(rdsSource(v1alpha1.AWSRDSSource{DBInstanceIdentifier: "aurora-1"})),
					Want: []providers.Endpoint{ep("192.0.2.21")}},
				{Name: "readers", Request: providertest.NewRequest(rdsSource(v1alpha1.AWSRDSSource{DBClusterIdentifier: "aurora", Role: v1alpha1.AWSRDSRoleReaders})),
					Want: []providers.Endpoint{ep("192.0.2.22"), ep("192.0.2.23")}},
				{Name: "no tag matches", Request: providertest.NewRequest(rdsSource(v1alpha1.AWSRDSSource{Tags: map[string]string{"app": "none"}}))},
			}
		},
		Missing: func(*testing.T) providertest.MissingCase {
			return providertest.MissingCase{
				Request: providertest.NewRequest(rdsSource(v1alpha1.AWSRDSSource{DBInstanceIdentifier: "nope"})),
				Fail:    &providertest.Failure{Terminal: true, Gone: true, Reason: v1alpha1.ReasonBackendNotFound, MessageContains: []string{"dbInstanceIdentifier"}},
			}
		},
		Broken: func(*testing.T) []providertest.FailCase {
			return []providertest.FailCase{
				{Name: "static source", Request: providertest.NewRequest(other), Failure: notOurs},
				{Name: "role not allowed", Request: providertest.NewRequest(rdsSource(v1alpha1.AWSRDSSource{
					DBInstanceIdentifier: "aurora-1", AssumeRoleARN: "arn:aws:iam::123456789012:role/x"})), Failure: refused},
				{Name: "region not its BackendProvider's", Request: inVirginia(rdsSource(v1alpha1.AWSRDSSource{DBInstanceIdentifier: "aurora-1"})),
					Failure: elsewhere},
			}
		},
	})
}

func TestEC2Conformance(t *testing.T) {
	e := newEnv(t, nil)
	e.fake.PutEC2Instance(vm("i-0a", "10"))
	e.fake.PutEC2Instance(vm("i-0b", "11"))
	stopped := vm("i-0c", "12")
	stopped.State = "stopped"
	e.fake.PutEC2Instance(stopped)
	ep := func(id, addr string) providers.Endpoint {
		return providers.Endpoint{Address: addr, Zone: "eu-west-1b", Hostname: id, Serving: true}
	}
	// The suite resolves every case as the same source of one backend, so
	// a case that reads nothing (a refused role) lets go of the listing;
	// another backend reading it keeps it, as backends sharing a region do.
	keeper := providertest.NewRequest(ec2Source(v1alpha1.AWSEC2Source{Tags: map[string]string{"app": "web"}}))
	keeper.Backend = "keeper"
	if _, err := e.s.EC2().Resolve(context.Background(), keeper); err != nil {
		t.Fatal(err)
	}
	providertest.Run(t, providertest.Harness{
		Kind:     awsprovider.KindEC2,
		Kinds:    awsprovider.Kinds(),
		Provider: e.s.EC2(),
		Good: func(*testing.T) []providertest.Case {
			return []providertest.Case{
				{Name: "by ID", Request: providertest.NewRequest(ec2Source(v1alpha1.AWSEC2Source{InstanceIDs: []string{"i-0a"}}), v1alpha1.AddressTypeIPv4),
					Want: []providers.Endpoint{ep("i-0a", "198.51.100.10")}},
				{Name: "by tag", Request: providertest.NewRequest(ec2Source(v1alpha1.AWSEC2Source{Tags: map[string]string{"app": "web"}})),
					Want: []providers.Endpoint{
						ep("i-0a", "198.51.100.10"), ep("i-0a", "2001:db8:1::10"),
						ep("i-0b", "198.51.100.11"), ep("i-0b", "2001:db8:1::11"),
					}},
			}
		},
		Missing: func(*testing.T) providertest.MissingCase {
			return providertest.MissingCase{
				Request: providertest.NewRequest(ec2Source(v1alpha1.AWSEC2Source{InstanceIDs: []string{"i-nope"}})),
				Fail:    &providertest.Failure{Terminal: true, Gone: true, Reason: v1alpha1.ReasonBackendNotFound, MessageContains: []string{"instanceIDs"}},
			}
		},
		Broken: func(*testing.T) []providertest.FailCase {
			return []providertest.FailCase{
				{Name: "static source", Request: providertest.NewRequest(other), Failure: notOurs},
				{Name: "role not allowed", Request: providertest.NewRequest(ec2Source(v1alpha1.AWSEC2Source{
					InstanceIDs: []string{"i-0a"}, AssumeRoleARN: "arn:aws:iam::123456789012:role/x"})), Failure: refused},
				{Name: "region not its BackendProvider's", Request: inVirginia(ec2Source(v1alpha1.AWSEC2Source{InstanceIDs: []string{"i-0a"}})),
					Failure: elsewhere},
			}
		},
	})
	if got := e.fake.Calls(awstest.DescribeInstances); got != 1 {
		t.Errorf("the whole suite made %d DescribeInstances calls, want 1: every resolve reads the shared listing", got)
	}
}

func TestElastiCacheConformance(t *testing.T) {
	e := newEnv(t, nil)
	e.fake.PutServerlessCache(serverless("lru", "192.0.2.51", "2001:db8::51"))
	putGroup(e, "orders", false, []string{"192.0.2.41", "192.0.2.42"})
	ep := func(addr, host string, port int32, zone string) providers.Endpoint {
		return providers.Endpoint{Address: addr, Zone: zone, Hostname: host, Serving: true, Port: port}
	}
	providertest.Run(t, providertest.Harness{
		Kind:     awsprovider.KindElastiCache,
		Kinds:    awsprovider.Kinds(),
		Provider: e.s.ElastiCache(),
		Good: func(*testing.T) []providertest.Case {
			return []providertest.Case{
				{Name: "serverless", Request: providertest.NewRequest(cacheSource(v1alpha1.AWSElastiCacheSource{ServerlessCacheName: "lru"})),
					Want: []providers.Endpoint{ep("192.0.2.51", "lru", 6379, ""), ep("2001:db8::51", "lru", 6379, "")}},
				{Name: "replication group", Request: providertest.NewRequest(cacheSource(v1alpha1.AWSElastiCacheSource{ReplicationGroupID: "orders"})),
					Want: []providers.Endpoint{ep("192.0.2.41", "orders-001", 6379, "eu-west-1a"), ep("192.0.2.42", "orders-002", 6379, "eu-west-1b")}},
			}
		},
		Missing: func(*testing.T) providertest.MissingCase {
			return providertest.MissingCase{
				Request: providertest.NewRequest(cacheSource(v1alpha1.AWSElastiCacheSource{ServerlessCacheName: "nope"})),
				Fail:    &providertest.Failure{Terminal: true, Gone: true, Reason: v1alpha1.ReasonBackendNotFound, MessageContains: []string{"serverlessCacheName"}},
			}
		},
		Broken: func(*testing.T) []providertest.FailCase {
			return []providertest.FailCase{
				{Name: "static source", Request: providertest.NewRequest(other), Failure: notOurs},
				{Name: "role not allowed", Request: providertest.NewRequest(cacheSource(v1alpha1.AWSElastiCacheSource{
					ServerlessCacheName: "lru", AssumeRoleARN: "arn:aws:iam::123456789012:role/x"})), Failure: refused},
				{Name: "region not its BackendProvider's", Request: inVirginia(cacheSource(v1alpha1.AWSElastiCacheSource{ServerlessCacheName: "lru"})),
					Failure: elsewhere},
			}
		},
	})
}

func TestMemoryDBConformance(t *testing.T) {
	e := newEnv(t, nil)
	memoryDB(e, "ledger", "198.51.100.1", "198.51.100.2", "198.51.100.3", "198.51.100.4")
	ep := func(addr, host, zone string) providers.Endpoint {
		return providers.Endpoint{Address: addr, Zone: zone, Hostname: host, Serving: true, Port: 6379}
	}
	inRegion := func(name, role string) v1alpha1.Source {
		src := memoryDBSource(name)
		src.AWSMemoryDB.AssumeRoleARN = role
		return src
	}
	providertest.Run(t, providertest.Harness{
		Kind:     awsprovider.KindMemoryDB,
		Kinds:    awsprovider.Kinds(),
		Provider: e.s.MemoryDB(),
		Good: func(*testing.T) []providertest.Case {
			return []providertest.Case{
				{Name: "cluster", Request: providertest.NewRequest(memoryDBSource("ledger")), Want: []providers.Endpoint{
					ep("198.51.100.1", "ledger-0001-001", "eu-west-1a"), ep("198.51.100.2", "ledger-0001-002", "eu-west-1b"),
					ep("198.51.100.3", "ledger-0002-001", "eu-west-1a"), ep("198.51.100.4", "ledger-0002-002", "eu-west-1b"),
				}},
			}
		},
		Missing: func(*testing.T) providertest.MissingCase {
			return providertest.MissingCase{
				Request: providertest.NewRequest(memoryDBSource("nope")),
				Fail:    &providertest.Failure{Terminal: true, Gone: true, Reason: v1alpha1.ReasonBackendNotFound, MessageContains: []string{"clusterName"}},
			}
		},
		Broken: func(*testing.T) []providertest.FailCase {
			return []providertest.FailCase{
				{Name: "static source", Request: providertest.NewRequest(other), Failure: notOurs},
				{Name: "role not allowed", Request: providertest.NewRequest(inRegion("ledger", "arn:aws:iam::123456789012:role/x")), Failure: refused},
				{Name: "region not its BackendProvider's", Request: inVirginia(memoryDBSource("ledger")), Failure: elsewhere},
			}
		},
	})
}
