package aws_test

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
	awsprovider "github.com/backendslice/backendslice/providers/aws"
)

// TestKindsShareOneProviderKind: the four AWS source kinds are served by
// the one aws provider kind, whose connection is the provider's account.
func TestKindsShareOneProviderKind(t *testing.T) {
	kinds := awsprovider.Kinds()
	for _, src := range []v1alpha1.Source{{AWSRDS: &v1alpha1.AWSRDSSource{}}, {AWSEC2: &v1alpha1.AWSEC2Source{}},
		{AWSElastiCache: &v1alpha1.AWSElastiCacheSource{}}, {AWSMemoryDB: &v1alpha1.AWSMemoryDBSource{}}} {
		if k := kinds.Of(src); k == nil || k.Provider != kinds[0].Provider || k.Provider.Name != "aws" {
			t.Errorf("%+v served by %+v; want the one aws provider kind", src, k)
		}
	}
	bp := &v1alpha1.BackendProvider{ObjectMeta: metav1.ObjectMeta{Name: "acct", UID: "uid-acct", Generation: 1},
		Spec: v1alpha1.BackendProviderSpec{AWS: &v1alpha1.AWSProvider{Region: "eu-west-1", AssumeRoleARN: "arn:aws:iam::1:role/r",
			EndpointURL: "http://127.0.0.1:1", ConsentTag: "consent"}}}
	conn, err := kinds.Connect(context.Background(), bp, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := providers.SettingsOf[*awsprovider.Settings](conn)
	want := awsprovider.Settings{Region: "eu-west-1", AssumeRoleARN: "arn:aws:iam::1:role/r", EndpointURL: "http://127.0.0.1:1", ConsentTag: "consent"}
	if conn.Name != "acct" || conn.Key == "" || !ok || *got != want {
		t.Errorf("Connect = %+v (settings %+v)", conn, got)
	}
	if s := kinds.SecretsOf(bp); s != nil {
		t.Errorf("SecretsOf = %q, want none", s)
	}
}

func TestCheck(t *testing.T) {
	kinds := awsprovider.Kinds()
	for _, c := range []struct {
		src  v1alpha1.Source
		want string
	}{
		{v1alpha1.Source{Name: "vms", AWSEC2: &v1alpha1.AWSEC2Source{Region: "eu-west-1"}},
			"spec.sources[vms].awsEC2: no instance IDs and no tags would select every instance in eu-west-1; list instance IDs or name at least one tag"},
		{v1alpha1.Source{Name: "db", AWSRDS: &v1alpha1.AWSRDSSource{Region: "eu-west-1"}},
			"spec.sources[db].awsRDS: no identifier and no tags would select every DB instance in eu-west-1; set dbInstanceIdentifier, dbClusterIdentifier or at least one tag"},
		{v1alpha1.Source{Name: "vms", AWSEC2: &v1alpha1.AWSEC2Source{Region: "eu-west-1", InstanceIDs: []string{"i-1"}}}, ""},
		{v1alpha1.Source{Name: "vms", AWSEC2: &v1alpha1.AWSEC2Source{Region: "eu-west-1", Tags: map[string]string{"a": "b"}}}, ""},
		{v1alpha1.Source{Name: "db", AWSRDS: &v1alpha1.AWSRDSSource{Region: "eu-west-1", DBClusterIdentifier: "c"}}, ""},
		{v1alpha1.Source{Name: "db", AWSRDS: &v1alpha1.AWSRDSSource{Region: "eu-west-1", DBInstanceIdentifier: "i"}}, ""},
		{v1alpha1.Source{Name: "db", AWSRDS: &v1alpha1.AWSRDSSource{Region: "eu-west-1", Tags: map[string]string{"a": "b"}}}, ""},
	} {
		if got := kinds.Check(c.src); got != c.want {
			t.Errorf("Check(%s) = %q, want %q", c.src.Name, got, c.want)
		}
	}
}
