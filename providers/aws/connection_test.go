package aws_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
	awsprovider "github.com/backendslice/backendslice/providers/aws"
	"github.com/backendslice/backendslice/providers/providertest"
	"github.com/backendslice/backendslice/test/awstest"
)

// The controller's own access key (newEnv's static credentials), and the
// roles of two accounts with the access keys the fake gives their sessions.
const (
	controllerKey = "AKIDEXAMPLE"
	roleA         = "arn:aws:iam::111111111111:role/backendslice-reader"
	roleB         = "arn:aws:iam::222222222222:role/backendslice-reader"
	keyA          = "ASIAACCOUNTA"
	keyB          = "ASIAACCOUNTB"
)

// consentTag is the tag owners list the namespaces that may publish their
// instances in.
const consentTag = "backendslice.io/namespaces"

// awsConnection is BackendProvider name: role assumed at endpoint, in the
// test region.
func awsConnection(name, role, endpoint string) *providers.Connection {
	return &providers.Connection{Name: name, Key: "v1", Settings: &awsprovider.Settings{
		Region: region, AssumeRoleARN: role, EndpointURL: endpoint,
	}}
}

// asked is a request for src through c, from a backend of namespace named
// after c, so that sources through two providers are two backends' and
// hold their listings side by side.
func asked(src v1alpha1.Source, namespace string, c *providers.Connection, types ...v1alpha1.AddressType) providers.Request {
	req := providertest.NewRequest(src, types...)
	req.Namespace, req.Backend, req.Connection = namespace, c.Name, c
	return req
}

// resolveReq resolves req with p, failing the test on an error.
func resolveReq(t *testing.T, p providers.Provider, req providers.Request) []providers.Endpoint {
	t.Helper()
	res, err := p.Resolve(context.Background(), req)
	if err != nil {
		t.Fatalf("Resolve %s in %s through %s: %v", req.Source.Name, req.Namespace, req.Connection.Name, err)
	}
	return res.Endpoints
}

// resolveReqErr resolves req with p and returns its failure, failing the
// test when it succeeds.
func resolveReqErr(t *testing.T, p providers.Provider, req providers.Request) *providers.Error {
	t.Helper()
	res, err := p.Resolve(context.Background(), req)
	if err == nil {
		t.Fatalf("Resolve %s succeeded with %+v; want a failure", req.Source.Name, res.Endpoints)
	}
	return providers.AsError(err)
}

// tagged is instance i with tags added.
func tagged(i awstest.DBInstance, tags map[string]string) awstest.DBInstance {
	i.Tags = tags
	return i
}

// TestConnectionsReadTheirAccounts puts the instances of two accounts in
// one fake and reads them through two BackendProviders, each assuming its
// account's role (not in --aws-allowed-role-arns): each sees its own
// instances only, calls RDS and EC2 with its role's credentials, never the
// controller's, and has clients and listings of its own.
func TestConnectionsReadTheirAccounts(t *testing.T) {
	e := newEnv(t, nil)
	e.fake.AddRole(roleA, keyA)
	e.fake.AddRole(roleB, keyB)
	app := map[string]string{"app": "db"}
	e.fake.PutDBInstance(tagged(dbInstance("db-a", "192.0.2.11"), app))
	e.fake.PutDBInstance(tagged(dbInstance("db-b", "192.0.2.12"), app))
	e.fake.PutEC2Instance(vm("i-0a", "11"))
	e.fake.PutEC2Instance(vm("i-0b", "12"))
	e.fake.SetAccount(keyA, "db-a", "i-0a")
	e.fake.SetAccount(keyB, "db-b", "i-0b")
	a, b := awsConnection("account-a", roleA, e.fake.URL), awsConnection("account-b", roleB, e.fake.URL)
	rdsP, ec2P := e.s.RDS(), e.s.EC2()
	dbs := rdsSource(v1alpha1.AWSRDSSource{Tags: app})
	vms := ec2Source(v1alpha1.AWSEC2Source{Tags: map[string]string{"app": "web"}})

	wantAddresses(t, "RDS through account-a", resolveReq(t, rdsP, asked(dbs, "team", a, v1alpha1.AddressTypeIPv4)), "192.0.2.11")
	wantAddresses(t, "RDS through account-b", resolveReq(t, rdsP, asked(dbs, "team", b, v1alpha1.AddressTypeIPv4)), "192.0.2.12")
	wantAddresses(t, "EC2 through account-a", resolveReq(t, ec2P, asked(vms, "team", a, v1alpha1.AddressTypeIPv4)), "198.51.100.11")
	wantAddresses(t, "EC2 through account-b", resolveReq(t, ec2P, asked(vms, "team", b, v1alpha1.AddressTypeIPv4)), "198.51.100.12")
	// The other account's instance does not exist for this one.
	other := resolveReqErr(t, rdsP, asked(rdsSource(v1alpha1.AWSRDSSource{DBInstanceIdentifier: "db-b"}), "team", a))
	wantErr(t, other, true, true, v1alpha1.ReasonBackendNotFound, `DB instance "db-b" not found`)

	for _, c := range []struct {
		action, key string
		want        int
	}{
		// One session a role, cached for the listings that follow.
		{awstest.AssumeRole, controllerKey, 2},
		{awstest.DescribeDBInstances, keyA, 1},
		{awstest.DescribeDBInstances, keyB, 1},
		{awstest.DescribeInstances, keyA, 1},
		{awstest.DescribeInstances, keyB, 1},
		{awstest.DescribeDBInstances, controllerKey, 0},
		{awstest.DescribeInstances, controllerKey, 0},
	} {
		if got := e.fake.CallsBy(c.action, c.key); got != c.want {
			t.Errorf("%s signed by %s: %d calls, want %d", c.action, c.key, got, c.want)
		}
	}
	wantKept(t, e.s, "two accounts, RDS and EC2 each", 4, 2)
}

// TestConnectionsAtTwoEndpoints reads the same role in the same region
// through two BackendProviders at two fakes (two partitions, or two VPC
// endpoints): the endpoint is part of the identity, so neither shares the
// other's clients, STS session or listing.
func TestConnectionsAtTwoEndpoints(t *testing.T) {
	e := newEnv(t, nil)
	there := awstest.New()
	t.Cleanup(there.Close)
	e.fake.AddRole(roleA, keyA)
	there.AddRole(roleA, keyB)
	// Published by name: the session resolves names through the first fake only.
	e.fake.PutDBInstance(dbInstance("db-1", "192.0.2.31"))
	elsewhere := dbInstance("db-1", "192.0.2.32")
	elsewhere.Address = "db-1.elsewhere.eu-west-1.rds.amazonaws.com"
	there.PutDBInstance(elsewhere)
	db := rdsSource(v1alpha1.AWSRDSSource{DBInstanceIdentifier: "db-1"})
	p := e.s.RDS()
	fqdn := v1alpha1.AddressTypeFQDN

	wantAddresses(t, "through the first endpoint", resolveReq(t, p, asked(db, "team", awsConnection("here", roleA, e.fake.URL), fqdn)),
		"db-1.abcdefgh.eu-west-1.rds.amazonaws.com")
	wantAddresses(t, "through the second endpoint", resolveReq(t, p, asked(db, "team", awsConnection("there", roleA, there.URL), fqdn)),
		elsewhere.Address)
	for _, f := range []*awstest.Server{e.fake, there} {
		if a, d := f.CallsBy(awstest.AssumeRole, controllerKey), f.Calls(awstest.DescribeDBInstances); a != 1 || d != 1 {
			t.Errorf("fake at %s: %d AssumeRole and %d DescribeDBInstances calls, want 1 each: STS and RDS at the provider's endpoint", f.URL, a, d)
		}
	}
	wantKept(t, e.s, "one role at two endpoints", 2, 2)
}

// TestConnectionRoleRefused names a role the fake does not know: STS
// refuses it, the source fails AccessDenied naming the BackendProvider,
// not its role nor AWS's ARNs (the backend's tenant reads it), no RDS call
// is made, and another BackendProvider goes on. The session's log has
// AWS's whole answer, ARNs and account IDs included, for the platform team.
func TestConnectionRoleRefused(t *testing.T) {
	var logged []string
	var mu sync.Mutex
	e := newEnv(t, func(o *awsprovider.Options) {
		o.Log = funcr.New(func(prefix, args string) {
			mu.Lock()
			defer mu.Unlock()
			logged = append(logged, args)
		}, funcr.Options{})
	})
	e.fake.AddRole(roleA, keyA)
	e.fake.PutDBInstance(dbInstance("db-1", "192.0.2.41"))
	p := e.s.RDS()
	db := rdsSource(v1alpha1.AWSRDSSource{DBInstanceIdentifier: "db-1"})
	const unknown = "arn:aws:iam::333333333333:role/nobody"
	pe := resolveReqErr(t, p, asked(db, "team", awsConnection("ghost", unknown, e.fake.URL)))
	wantErr(t, pe, true, false, v1alpha1.ReasonAccessDenied,
		"the role of BackendProvider ghost", "AccessDenied: User: <redacted ARN> is not authorized to perform: sts:AssumeRole on resource: <redacted ARN>", "trust policy")
	for _, secret := range []string{"333333333333", "123456789012", "arn:aws", "assumed-role"} {
		if strings.Contains(pe.Error(), secret) {
			t.Errorf("message %q names %q", pe.Error(), secret)
		}
	}
	mu.Lock()
	log := strings.Join(logged, "\n")
	mu.Unlock()
	for _, whole := range []string{`"listing"="DescribeDBInstances"`, `"role"="` + unknown + `"`, "sts:AssumeRole on resource: " + unknown, "arn:aws:sts::123456789012:assumed-role/"} {
		if !strings.Contains(log, whole) {
			t.Errorf("the session's log lacks %q: %s", whole, log)
		}
	}
	if n := e.fake.Calls(awstest.DescribeDBInstances); n != 0 {
		t.Errorf("%d DescribeDBInstances calls without credentials, want 0", n)
	}
	wantAddresses(t, "another BackendProvider", resolveReq(t, p, asked(db, "team", awsConnection("known", roleA, e.fake.URL), v1alpha1.AddressTypeIPv4)), "192.0.2.41")
}

// TestConsentTag publishes through a BackendProvider with a consent tag:
// an instance or cluster is published in a namespace its tag lists (exact
// names, spaces ignored), left out of tag selections elsewhere, and refused
// as AccessDenied (gone, so that it drains) where a source names it; every
// answer comes from one shared listing per action.
func TestConsentTag(t *testing.T) {
	e := newEnv(t, nil)
	consent := func(namespaces string) map[string]string {
		return map[string]string{"app": "db", consentTag: namespaces}
	}
	e.fake.PutDBInstance(tagged(dbInstance("db-pay", "192.0.2.51"), consent(" payments , billing")))
	e.fake.PutDBInstance(tagged(dbInstance("db-web", "192.0.2.52"), map[string]string{"app": "db"}))
	e.fake.PutDBInstance(tagged(dbInstance("db-near", "192.0.2.53"), consent("payments-test")))
	e.fake.PutDBCluster(awstest.DBCluster{Identifier: "aurora", Status: "available",
		Members: []awstest.ClusterMember{{Instance: "db-web", Writer: true}}, Tags: map[string]string{consentTag: "billing"}})
	payVM := vm("i-0pay", "51")
	payVM.Tags = map[string]string{"app": "web", consentTag: "payments"}
	e.fake.PutEC2Instance(payVM)
	e.fake.PutEC2Instance(vm("i-0web", "52"))
	c := awsConnection("shared-rds", "", e.fake.URL)
	settingsOf(c).ConsentTag = consentTag
	rdsP, ec2P := e.s.RDS(), e.s.EC2()
	byTag := rdsSource(v1alpha1.AWSRDSSource{Tags: map[string]string{"app": "db"}})
	named := func(id string) v1alpha1.Source { return rdsSource(v1alpha1.AWSRDSSource{DBInstanceIdentifier: id}) }
	cluster := rdsSource(v1alpha1.AWSRDSSource{DBClusterIdentifier: "aurora"})
	vms := func(ids ...string) v1alpha1.Source { return ec2Source(v1alpha1.AWSEC2Source{InstanceIDs: ids}) }
	ipv4 := v1alpha1.AddressTypeIPv4

	wantAddresses(t, "tag selection in payments", resolveReq(t, rdsP, asked(byTag, "payments", c, ipv4)), "192.0.2.51")
	wantAddresses(t, "tag selection in billing", resolveReq(t, rdsP, asked(byTag, "billing", c, ipv4)), "192.0.2.51")
	wantAddresses(t, "tag selection in web", resolveReq(t, rdsP, asked(byTag, "web", c, ipv4)))
	wantAddresses(t, "named in payments", resolveReq(t, rdsP, asked(named("db-pay"), "payments", c, ipv4)), "192.0.2.51")
	wantAddresses(t, "cluster in billing", resolveReq(t, rdsP, asked(cluster, "billing", c, ipv4)), "192.0.2.52")
	wantAddresses(t, "listed IDs in payments", resolveReq(t, ec2P, asked(vms("i-0pay", "i-0web"), "payments", c, ipv4)), "198.51.100.51")

	for _, r := range []struct {
		name string
		p    providers.Provider
		req  providers.Request
		want string
	}{
		{"named in web", rdsP, asked(named("db-pay"), "web", c),
			"spec.sources[db].awsRDS.dbInstanceIdentifier: DB instance db-pay is not found in " + region + " or has no tag backendslice.io/namespaces naming namespace web: " +
				"its owner must add the namespace to the tag (backendslice.io/namespaces=web,...) before it can be published here"},
		// A name that does not exist says exactly what a refusal says:
		// a tenant cannot list the account's databases by name.
		{"named but missing", rdsP, asked(named("db-absent"), "web", c),
			"spec.sources[db].awsRDS.dbInstanceIdentifier: DB instance db-absent is not found in " + region + " or has no tag backendslice.io/namespaces naming namespace web: " +
				"its owner must add the namespace to the tag (backendslice.io/namespaces=web,...) before it can be published here"},
		{"a longer name is no match", rdsP, asked(named("db-near"), "payments", c), "DB instance db-near is not found in " + region + " or has no tag"},
		{"no tag at all", rdsP, asked(named("db-web"), "payments", c), "DB instance db-web is not found in " + region + " or has no tag"},
		{"cluster in payments", rdsP, asked(cluster, "payments", c), "DB cluster aurora is not found in " + region + " or has no tag backendslice.io/namespaces naming namespace payments"},
		{"listed IDs none consenting", ec2P, asked(vms("i-0web", "i-0none"), "payments", c),
			"spec.sources[vms].awsEC2.instanceIDs: EC2 instances i-0web, i-0none are not found in " + region + " or have no tag"},
		{"listed IDs in web", ec2P, asked(vms("i-0pay", "i-0web"), "web", c), "EC2 instances i-0pay, i-0web are not found in " + region + " or have no tag"},
	} {
		t.Run(r.name, func(t *testing.T) {
			wantErr(t, resolveReqErr(t, r.p, r.req), true, true, v1alpha1.ReasonAccessDenied, r.want)
		})
	}
	for _, action := range []string{awstest.DescribeDBInstances, awstest.DescribeDBClusters, awstest.DescribeInstances} {
		if n := e.fake.Calls(action); n != 1 {
			t.Errorf("%s: %d calls, want 1: consent is checked on the shared listing", action, n)
		}
	}
}

// TestConnectionRefusedCallsNothing gives sources that cannot be read
// through their BackendProvider: each is refused as InvalidSpec before any
// AWS call, listing or client.
func TestConnectionRefusedCallsNothing(t *testing.T) {
	e := newEnv(t, func(o *awsprovider.Options) { o.AllowedRoleARNs = []string{roleA} })
	conn := func(change func(*awsprovider.Settings)) *providers.Connection {
		c := awsConnection("team", roleA, e.fake.URL)
		change(settingsOf(c))
		return c
	}
	usEast := conn(func(c *awsprovider.Settings) { c.Region = "us-east-1" })
	db := rdsSource(v1alpha1.AWSRDSSource{DBInstanceIdentifier: "db-1"})
	withRole := rdsSource(v1alpha1.AWSRDSSource{DBInstanceIdentifier: "db-1", AssumeRoleARN: roleA})
	noRegion := rdsSource(v1alpha1.AWSRDSSource{DBInstanceIdentifier: "db-1"})
	noRegion.AWSRDS.Region = ""
	dnsConn := &providers.Connection{Name: "resolvers", Key: "v1", Settings: struct{ Resolvers []string }{[]string{"192.0.2.53"}}}
	for _, c := range []struct {
		name string
		p    providers.Provider
		req  providers.Request
		want string
	}{
		{"RDS region not the provider's", e.s.RDS(), asked(db, "team", usEast),
			"spec.sources[db].awsRDS.region: eu-west-1, but BackendProvider team serves us-east-1; write us-east-1 or use another provider"},
		{"EC2 region not the provider's", e.s.EC2(), asked(ec2Source(v1alpha1.AWSEC2Source{InstanceIDs: []string{"i-0a"}}), "team", usEast),
			"spec.sources[vms].awsEC2.region: eu-west-1, but BackendProvider team serves us-east-1"},
		// Even a role the flags allow: through a provider, the provider's role is read.
		{"source's own role", e.s.RDS(), asked(withRole, "team", conn(func(*awsprovider.Settings) {})),
			"spec.sources[db].awsRDS.assumeRoleARN: a source through BackendProvider team reads as that provider's role; remove assumeRoleARN, and set the role in the BackendProvider"},
		{"not an AWS provider", e.s.RDS(), asked(db, "team", dnsConn), "BackendProvider resolvers is not an AWS connection"},
		{"provider role not a role ARN", e.s.RDS(), asked(db, "team", conn(func(c *awsprovider.Settings) { c.AssumeRoleARN = "reader" })),
			`BackendProvider team: "reader" is not an IAM role ARN`},
		{"no region anywhere", e.s.RDS(), asked(noRegion, "team", conn(func(c *awsprovider.Settings) { c.Region = "" })),
			"spec.sources[db].awsRDS.region: empty, and BackendProvider team names no region"},
	} {
		t.Run(c.name, func(t *testing.T) {
			wantErr(t, resolveReqErr(t, c.p, c.req), true, false, v1alpha1.ReasonInvalidSpec, c.want)
		})
	}
	if n := e.fake.TotalCalls(); n != 0 {
		t.Errorf("refused sources made %d AWS calls, want 0", n)
	}
	wantKept(t, e.s, "after refused sources only", 0, 0)
}

// TestConnectionRegion reads a source that names no region, and one that
// names the provider's, in the provider's region.
func TestConnectionRegion(t *testing.T) {
	e := newEnv(t, nil)
	e.fake.PutDBInstance(dbInstance("db-1", "192.0.2.61"))
	c := awsConnection("virginia", "", e.fake.URL)
	settingsOf(c).Region = "us-east-1"
	for _, r := range []string{"", "us-east-1"} {
		src := rdsSource(v1alpha1.AWSRDSSource{DBInstanceIdentifier: "db-1"})
		src.AWSRDS.Region = v1alpha1.AWSRegion(r)
		wantAddresses(t, "source region "+r, resolveReq(t, e.s.RDS(), asked(src, "team", c, v1alpha1.AddressTypeIPv4)), "192.0.2.61")
	}
	if n := e.fake.Scopes()["us-east-1/rds"]; n != 1 {
		t.Errorf("%d calls signed for us-east-1/rds, want the one listing: scopes %v", n, e.fake.Scopes())
	}
}
