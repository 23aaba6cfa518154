package tenancy_test

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/awstest"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// TestAWSConsentTag: an RDS instance whose owner tagged it
// backendslice.io/namespaces=<payments>,<billing> is published, through a
// BackendProvider with that consent tag, in namespaces payments and
// billing, and refused in namespace web (which the provider admits: the
// refusal is the owner's) with AccessDenied naming the tag and the
// namespace; web publishes nothing.
func TestAWSConsentTag(t *testing.T) {
	t.Parallel()
	fake := newFake(t)
	payments := newNamespace(t, "payments", nil)
	billing := newNamespace(t, "billing", nil)
	web := newNamespace(t, "web", nil)
	id := "orders-" + payments
	fake.PutDBInstance(dbInstance(id, "192.0.2.91", map[string]string{v1alpha1.DefaultConsentTag: payments + "," + billing}))
	bp := uniqueName(payments, "aws")
	createProvider(t, bp, admits("", payments, billing, web), awsSpec(fake.URL, "", v1alpha1.DefaultConsentTag))
	waitProviderStatus(t, bp, "aws", metav1.ConditionTrue, v1alpha1.ReasonProviderReady)

	refused := backend(web, "orders", nil, rdsSource(bp, id))
	framework.Create(t, refused)
	for _, ns := range []string{payments, billing} {
		xb := backend(ns, "orders", nil, rdsSource(bp, id))
		framework.Create(t, xb)
		waitStates(t, ns, "orders", statesOf(ready, "192.0.2.91"))
		framework.WaitReady(t, xb)
	}
	parts := []string{"DB instance " + id, "no tag " + v1alpha1.DefaultConsentTag + " naming namespace " + web}
	waitConditions(t, refused, metav1.ConditionFalse, v1alpha1.ReasonAccessDenied, parts...)
	waitEvent(t, refused, corev1.EventTypeWarning, v1alpha1.ReasonAccessDenied, parts...)
	waitStates(t, web, "orders", map[string]string{})

	if n := fake.CallsBy(awstest.DescribeDBInstances, controllerKey); n == 0 {
		t.Errorf("no DescribeDBInstances signed with the controller's key reached the provider's endpoint")
	}
	if n := ownAWS.TotalCalls(); n != 0 {
		t.Errorf("the controller's own AWS endpoint was called %d time(s)", n)
	}
}

// TestAWSErrorsRedacted: AWS refuses DescribeDBInstances with its usual
// answer, which names the caller's assumed role and the account
// ("User: arn:aws:sts::123456789012:assumed-role/... is not authorized to
// perform: rds:DescribeDBInstances on resource: arn:aws:rds:..."), to a backend reading through a
// BackendProvider with a role of account A. The backend's status and
// Events say AccessDenied, the action and the fix, naming the
// BackendProvider, and hold neither an ARN nor an account ID: AWS's text
// is redacted and the provider's role is named by its provider.
func TestAWSErrorsRedacted(t *testing.T) {
	t.Parallel()
	fake := newFake(t)
	ns := newNamespace(t, "redacted", nil)
	fake.AddRole(roleA, keyA)
	id := "orders-" + ns
	fake.PutDBInstance(dbInstance(id, "192.0.2.111", nil))
	fake.Fail(awstest.DescribeDBInstances, "AccessDenied", -1)
	bp := uniqueName(ns, "account-a")
	createProvider(t, bp, admits("", ns), awsSpec(fake.URL, roleA, ""))
	xb := backend(ns, "orders", nil, rdsSource(bp, id))
	framework.Create(t, xb)

	parts := []string{"AWS refused rds:DescribeDBInstances in " + region,
		"AccessDenied: User: <redacted ARN> is not authorized to perform: rds:DescribeDBInstances on resource: <redacted ARN>", "grant the role of BackendProvider " + bp + " permission"}
	cur := waitConditions(t, xb, metav1.ConditionFalse, v1alpha1.ReasonAccessDenied, parts...)
	waitEvent(t, xb, corev1.EventTypeWarning, v1alpha1.ReasonAccessDenied, parts...)
	framework.ExpectNotNamed(t, cur, awstest.Account, "111111111111", roleA, "arn:aws", "assumed-role")
	if n := fake.CallsBy(awstest.DescribeDBInstances, keyA); n == 0 {
		t.Errorf("no DescribeDBInstances as account A: the refusal was not AWS's")
	}
}

// Two AWS accounts: their roles, and the access keys the fake gives their
// sessions.
const (
	roleA   = "arn:aws:iam::111111111111:role/backendslice-reader"
	roleB   = "arn:aws:iam::222222222222:role/backendslice-reader"
	roleBad = "arn:aws:iam::333333333333:role/nobody-trusts-me"
	keyA    = "ASIAACCOUNTA"
	keyB    = "ASIAACCOUNTB"
)

// TestAWSAccounts reads two AWS accounts through the wire fake with STS
// AssumeRole: two BackendProviders with different assumeRoleARN each see
// their own account's instances (the same tag selects in both), every
// Describe call is signed with the assumed role's key, never the
// controller's; a provider whose role cannot be assumed gives AccessDenied
// naming the role and the provider, and publishes nothing.
func TestAWSAccounts(t *testing.T) {
	t.Parallel()
	fake := newFake(t)
	ns := newNamespace(t, "accounts", nil)
	idA, idB := "db-a-"+ns, "db-b-"+ns
	tags := map[string]string{"app": "db"}
	fake.AddRole(roleA, keyA)
	fake.AddRole(roleB, keyB)
	fake.PutDBInstance(dbInstance(idA, "192.0.2.101", tags))
	fake.PutDBInstance(dbInstance(idB, "192.0.2.102", tags))
	fake.SetAccount(keyA, idA)
	fake.SetAccount(keyB, idB)
	bpA, bpB, bpBad := uniqueName(ns, "account-a"), uniqueName(ns, "account-b"), uniqueName(ns, "untrusted")
	createProvider(t, bpA, admits("", ns), awsSpec(fake.URL, roleA, ""))
	createProvider(t, bpB, admits("", ns), awsSpec(fake.URL, roleB, ""))
	createProvider(t, bpBad, admits("", ns), awsSpec(fake.URL, roleBad, ""))

	a := backend(ns, "from-a", nil, rdsTagSource(bpA, tags))
	b := backend(ns, "from-b", nil, rdsTagSource(bpB, tags))
	bad := backend(ns, "untrusted", nil, rdsTagSource(bpBad, tags))
	for _, xb := range []*v1alpha1.ExternalBackend{a, b, bad} {
		framework.Create(t, xb)
	}
	waitStates(t, ns, "from-a", statesOf(ready, "192.0.2.101"))
	waitStates(t, ns, "from-b", statesOf(ready, "192.0.2.102"))
	framework.WaitReady(t, a)
	framework.WaitReady(t, b)
	parts := []string{"the role of BackendProvider " + bpBad, "sts:AssumeRole on resource: <redacted ARN>", "trust policy"}
	cur := waitConditions(t, bad, metav1.ConditionFalse, v1alpha1.ReasonAccessDenied, parts...)
	waitEvent(t, bad, corev1.EventTypeWarning, v1alpha1.ReasonAccessDenied, parts...)
	waitStates(t, ns, "untrusted", map[string]string{})
	// The role is the platform team's, in the BackendProvider: its ARN,
	// and the account AWS names, are not the tenant's to read.
	framework.ExpectNotNamed(t, cur, roleBad, "333333333333", awstest.Account, "arn:aws")

	for _, c := range []struct {
		what, action, key string
		atLeast           bool
		want              int
	}{
		{"AssumeRole with the controller's key (three roles)", awstest.AssumeRole, controllerKey, true, 3},
		{"DescribeDBInstances as account A", awstest.DescribeDBInstances, keyA, true, 1},
		{"DescribeDBInstances as account B", awstest.DescribeDBInstances, keyB, true, 1},
		{"DescribeDBInstances as the controller", awstest.DescribeDBInstances, controllerKey, false, 0},
	} {
		got := fake.CallsBy(c.action, c.key)
		if (c.atLeast && got < c.want) || (!c.atLeast && got != c.want) {
			t.Errorf("%s: %d call(s), want %s%d", c.what, got, map[bool]string{true: "at least ", false: ""}[c.atLeast], c.want)
		}
	}
	if all, signed := fake.Calls(awstest.DescribeDBInstances), fake.CallsBy(awstest.DescribeDBInstances, keyA)+fake.CallsBy(awstest.DescribeDBInstances, keyB); all != signed {
		t.Errorf("%d DescribeDBInstances calls, %d of them as account A or B: the untrusted provider read as someone", all, signed)
	}
	t.Logf("calls: %v", fmt.Sprint(fake.Scopes()))
}

// TestCacheConsentTag: an ElastiCache replication group and a MemoryDB
// cluster tagged backendslice.io/namespaces=<payments> are published
// through a BackendProvider with that consent tag in payments, and refused
// in web (admitted by the provider: the refusal is the owners') with
// AccessDenied naming the cache, the tag and the namespace; web publishes
// nothing. The tags are read with ListTagsForResource and ListTags, as
// AWS lists no tags with caches.
func TestCacheConsentTag(t *testing.T) {
	t.Parallel()
	fake := newFake(t)
	payments := newNamespace(t, "payments", nil)
	web := newNamespace(t, "web", nil)
	consent := map[string]string{v1alpha1.DefaultConsentTag: payments}
	group, cluster := "orders-"+payments, "ledger-"+payments
	putCaches(fake, group, cluster, consent, "192.0.2.95", "192.0.2.96")
	bp := uniqueName(payments, "caches")
	createProvider(t, bp, admits("", payments, web), awsSpec(fake.URL, "", v1alpha1.DefaultConsentTag))
	waitProviderStatus(t, bp, "aws", metav1.ConditionTrue, v1alpha1.ReasonProviderReady)
	groupSource := v1alpha1.Source{Name: "cache", ProviderRef: ref(bp), AWSElastiCache: &v1alpha1.AWSElastiCacheSource{
		Region: region, ReplicationGroupID: group, Role: v1alpha1.AWSCacheRolePrimary}}
	clusterSource := v1alpha1.Source{Name: "mdb", ProviderRef: ref(bp), AWSMemoryDB: &v1alpha1.AWSMemoryDBSource{Region: region, ClusterName: cluster}}

	for _, c := range []struct {
		name string
		src  v1alpha1.Source
		addr string
		what string
	}{
		{"orders", groupSource, "192.0.2.95", "replication group " + group},
		{"ledger", clusterSource, "192.0.2.96", "MemoryDB cluster " + cluster},
	} {
		admitted := backend(payments, c.name, nil, c.src)
		refused := backend(web, c.name, nil, c.src)
		framework.Create(t, admitted)
		framework.Create(t, refused)
		waitStates(t, payments, c.name, statesOf(ready, c.addr))
		framework.WaitReady(t, admitted)
		parts := []string{c.what, "no tag " + v1alpha1.DefaultConsentTag + " naming namespace " + web}
		waitConditions(t, refused, metav1.ConditionFalse, v1alpha1.ReasonAccessDenied, parts...)
		waitEvent(t, refused, corev1.EventTypeWarning, v1alpha1.ReasonAccessDenied, parts...)
		waitStates(t, web, c.name, map[string]string{})
	}
	for _, action := range []string{awstest.ListTagsForResource, awstest.ListTags} {
		if n := fake.CallsBy(action, controllerKey); n == 0 {
			t.Errorf("no %s call: the consent tag was not read", action)
		}
	}
}

// TestUnreadableCacheTagsTellNothing: through a BackendProvider with a
// consent tag, AWS refuses ListTagsForResource (AccessDenied) and
// throttles ListTags past the SDK's retries. A backend of web naming an
// existing ElastiCache group or MemoryDB cluster, whose tags cannot be
// read, then has the status and Event of a backend naming a cache that
// does not exist, condition by condition and word for word but for the
// name, so that a failing tag call does not tell the tenant which caches
// exist; neither publishes anything.
func TestUnreadableCacheTagsTellNothing(t *testing.T) {
	t.Parallel()
	fake := newFake(t)
	web := newNamespace(t, "web", nil)
	consent := map[string]string{v1alpha1.DefaultConsentTag: "payments"}
	group, cluster := "orders-"+web, "ledger-"+web
	putCaches(fake, group, cluster, consent, "192.0.2.97", "192.0.2.98")
	fake.Fail(awstest.ListTagsForResource, "AccessDenied", -1)
	fake.Fail(awstest.ListTags, "ThrottlingException", -1)
	bp := uniqueName(web, "caches")
	createProvider(t, bp, admits("", web), awsSpec(fake.URL, "", v1alpha1.DefaultConsentTag))
	groupSource := func(id string) v1alpha1.Source {
		return v1alpha1.Source{Name: "cache", ProviderRef: ref(bp), AWSElastiCache: &v1alpha1.AWSElastiCacheSource{
			Region: region, ReplicationGroupID: id, Role: v1alpha1.AWSCacheRolePrimary}}
	}
	clusterSource := func(name string) v1alpha1.Source {
		return v1alpha1.Source{Name: "mdb", ProviderRef: ref(bp), AWSMemoryDB: &v1alpha1.AWSMemoryDBSource{Region: region, ClusterName: name}}
	}
	for _, c := range []struct {
		name, cache, absent, action string
		src                         func(string) v1alpha1.Source
	}{
		{"orders", group, "missing-" + group, awstest.ListTagsForResource, groupSource},
		{"ledger", cluster, "missing-" + cluster, awstest.ListTags, clusterSource},
	} {
		existing, absent := backend(web, c.name, nil, c.src(c.cache)), backend(web, c.name+"-absent", nil, c.src(c.absent))
		framework.Create(t, existing)
		framework.Create(t, absent)
		parts := []string{"not found in " + region + " or has no tag " + v1alpha1.DefaultConsentTag + " naming namespace " + web}
		gotReal := waitConditions(t, existing, metav1.ConditionFalse, v1alpha1.ReasonAccessDenied, parts...)
		gotAbsent := waitConditions(t, absent, metav1.ConditionFalse, v1alpha1.ReasonAccessDenied, parts...)
		toldReal := waitEvent(t, existing, corev1.EventTypeWarning, v1alpha1.ReasonAccessDenied, parts...)
		toldAbsent := waitEvent(t, absent, corev1.EventTypeWarning, v1alpha1.ReasonAccessDenied, parts...)
		if n := fake.CallsBy(c.action, controllerKey); n == 0 {
			t.Errorf("%s: no %s call: the tags were not asked for", c.name, c.action)
		}
		asAbsent := func(s string) string { return strings.ReplaceAll(s, c.absent, c.cache) }
		if len(gotReal.Status.Conditions) != len(gotAbsent.Status.Conditions) {
			t.Errorf("%s: conditions %v, a missing cache's %v", c.name, gotReal.Status.Conditions, gotAbsent.Status.Conditions)
		}
		for _, want := range gotAbsent.Status.Conditions {
			got := meta.FindStatusCondition(gotReal.Status.Conditions, want.Type)
			if got == nil || got.Status != want.Status || got.Reason != want.Reason || got.Message != asAbsent(want.Message) {
				t.Errorf("%s: condition %s is %+v, want what a missing cache's says: %s/%s %q", c.name, want.Type, got, want.Status, want.Reason, asAbsent(want.Message))
			}
		}
		for i, want := range gotAbsent.Status.Sources {
			if got := gotReal.Status.Sources[i]; got.Stale != want.Stale || got.Endpoints != want.Endpoints || got.LastError != asAbsent(want.LastError) {
				t.Errorf("%s: status.sources[%d] = %+v, want what a missing cache's says: %+v", c.name, i, got, want)
			}
		}
		if toldReal.Note != asAbsent(toldAbsent.Note) {
			t.Errorf("%s: event %q, a missing cache's %q", c.name, toldReal.Note, asAbsent(toldAbsent.Note))
		}
		waitStates(t, web, c.name, map[string]string{})
	}
}

// putCaches puts into fake an available replication group (its primary
// at groupIP) and a MemoryDB cluster (one node at clusterIP), both tagged
// tags.
func putCaches(fake *awstest.Server, group, cluster string, tags map[string]string, groupIP, clusterIP string) {
	fake.PutCacheCluster(awstest.CacheCluster{ID: group + "-001", Status: "available", Engine: "valkey", ReplicationGroup: group,
		Nodes: []awstest.CacheNode{{ID: "0001", Status: "available", Address: group + "-001.abc123.0001.euw1.cache.amazonaws.com",
			Port: 6379, IPs: []string{groupIP}, Zone: region + "a"}}})
	fake.PutReplicationGroup(awstest.ReplicationGroup{ID: group, Status: "available", Tags: tags,
		Shards: []awstest.Shard{{ID: "0001", Members: []awstest.ShardMember{{CacheCluster: group + "-001", Primary: true}}}}})
	fake.PutMemoryDBCluster(awstest.MemoryDBCluster{Name: cluster, Status: "available", Tags: tags, Shards: []awstest.MemoryDBShard{{
		Name: "0001", Nodes: []awstest.MemoryDBNode{{Name: cluster + "-0001-001", Status: "available", Port: 6379,
			Address: cluster + "-0001-001.abc123.memorydb." + region + ".amazonaws.com", IPs: []string{clusterIP}, Zone: region + "b"}},
	}}})
}
