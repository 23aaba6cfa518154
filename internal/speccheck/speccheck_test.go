package speccheck

import (
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
	awsprovider "github.com/backendslice/backendslice/providers/aws"
	consulprovider "github.com/backendslice/backendslice/providers/consul"
	dnsprovider "github.com/backendslice/backendslice/providers/dns"
	staticprovider "github.com/backendslice/backendslice/providers/static"
)

// testKinds is a table of the kinds these tests use, from their packages.
func testKinds() providers.Kinds {
	return slices.Concat(staticprovider.Kinds(), dnsprovider.Kinds(), consulprovider.Kinds(), awsprovider.Kinds())
}

func TestValidateSpec(t *testing.T) {
	long := strings.Repeat("a", 64)
	cases := []struct {
		name        string
		objName     string
		serviceName string
		drain       *metav1.Duration
		sources     []v1alpha1.Source
		want        []string // texts the error contains; nil: valid
		notWant     []string
	}{
		{name: "valid default name", objName: "db"},
		{name: "valid explicit name", objName: long, serviceName: "postgres"},
		{name: "63 characters", objName: strings.Repeat("a", 63)},
		{name: "zero drain", objName: "db", drain: &metav1.Duration{}},
		{name: "positive drain", objName: "db", drain: &metav1.Duration{Duration: time.Minute}},
		{
			name: "long default name", objName: long,
			want:    []string{"spec.service.name", `"` + long + `"`, "DNS-1035", "set spec.service.name"},
			notWant: []string{"spec.drainPeriod"},
		},
		{
			// A DNS-1123 subdomain is a valid ExternalBackend name but not a Service name.
			name: "dotted default name", objName: "db.payments",
			want: []string{"spec.service.name", `"db.payments"`},
		},
		{
			name: "default name starting with a digit", objName: "1db",
			want: []string{"spec.service.name"},
		},
		{
			name: "negative drain", objName: "db", drain: &metav1.Duration{Duration: -5 * time.Second},
			want:    []string{"spec.drainPeriod", "-5s", "negative"},
			notWant: []string{"spec.service.name"},
		},
		{
			name: "both wrong", objName: long, drain: &metav1.Duration{Duration: -time.Second},
			want: []string{"spec.service.name", "spec.drainPeriod", "; "},
		},
		{
			// Stored before admission refused empty selectors.
			name: "ec2 source with empty selectors", objName: "db",
			sources: []v1alpha1.Source{{Name: "vms", AWSEC2: &v1alpha1.AWSEC2Source{
				Region: "eu-west-1", InstanceIDs: []string{}, Tags: map[string]string{}}}},
			want:    []string{"spec.sources[vms].awsEC2", "every instance in eu-west-1", "name at least one tag"},
			notWant: []string{"spec.service.name", "spec.drainPeriod"},
		},
		{
			name: "rds source with empty selectors", objName: "db",
			sources: []v1alpha1.Source{{Name: "db", AWSRDS: &v1alpha1.AWSRDSSource{Region: "eu-west-1", Tags: map[string]string{}}}},
			want:    []string{"spec.sources[db].awsRDS", "every DB instance in eu-west-1", "dbInstanceIdentifier"},
		},
		{
			name: "aws sources that select", objName: "db",
			sources: []v1alpha1.Source{
				{Name: "vms", AWSEC2: &v1alpha1.AWSEC2Source{Region: "eu-west-1", Tags: map[string]string{"app": "web"}}},
				{Name: "ids", AWSEC2: &v1alpha1.AWSEC2Source{Region: "eu-west-1", InstanceIDs: []string{"i-01234567"}}},
				{Name: "one", AWSRDS: &v1alpha1.AWSRDSSource{Region: "eu-west-1", DBInstanceIdentifier: "orders"}},
				{Name: "aurora", AWSRDS: &v1alpha1.AWSRDSSource{Region: "eu-west-1", DBClusterIdentifier: "orders"}},
				{Name: "tagged", AWSRDS: &v1alpha1.AWSRDSSource{Region: "eu-west-1", Tags: map[string]string{"app": "orders"}}},
			},
		},
	}
	v := New()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			xb := &v1alpha1.ExternalBackend{
				ObjectMeta: metav1.ObjectMeta{Name: c.objName, Namespace: "ns"},
				Spec: v1alpha1.ExternalBackendSpec{
					Service:     v1alpha1.ServiceSpec{Name: c.serviceName},
					DrainPeriod: c.drain,
					Sources:     c.sources,
				},
			}
			err := v.Err(testKinds(), "", xb)
			if c.want == nil {
				if err != nil {
					t.Errorf("Err = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Err = nil, want an error naming %v", c.want)
			}
			for _, s := range c.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
			for _, s := range c.notWant {
				if strings.Contains(err.Error(), s) {
					t.Errorf("error %q contains %q", err, s)
				}
			}
		})
	}
}

func TestServiceName(t *testing.T) {
	xb := &v1alpha1.ExternalBackend{ObjectMeta: metav1.ObjectMeta{Name: "db"}}
	if got := ServiceName(xb); got != "db" {
		t.Errorf("ServiceName = %q, want the object's name", got)
	}
	xb.Spec.Service.Name = "postgres"
	if got := ServiceName(xb); got != "postgres" {
		t.Errorf("ServiceName = %q, want spec.service.name", got)
	}
}

// TestSourceChecksReadTheTable checks sources by their rows: a made-up row
// ahead of awsEC2 that claims its tagless sources checks them its own way,
// and the built-in rows check the rest.
func TestSourceChecksReadTheTable(t *testing.T) {
	tagless := func(s v1alpha1.Source) bool { return s.AWSEC2 != nil && len(s.AWSEC2.Tags) == 0 }
	kinds := append(providers.Kinds{{Kind: "fleet", Of: tagless, Provider: &providers.ProviderKind{Name: "fleet"},
		Check: func(s v1alpha1.Source) string { return "spec.sources[" + s.Name + "]: fleet says no" }}},
		testKinds()...)
	xb := &v1alpha1.ExternalBackend{Spec: v1alpha1.ExternalBackendSpec{Sources: []v1alpha1.Source{
		{Name: "vms", AWSEC2: &v1alpha1.AWSEC2Source{Region: "eu-west-1"}},
		{Name: "db", AWSRDS: &v1alpha1.AWSRDSSource{Region: "eu-west-1"}},
		{Name: "fixed", Static: &v1alpha1.StaticSource{}},
	}}}
	got := sourceChecks(kinds, xb)
	want := []string{
		"spec.sources[vms]: fleet says no",
		"spec.sources[db].awsRDS: no identifier and no tags would select every DB instance in eu-west-1; set dbInstanceIdentifier, dbClusterIdentifier or at least one tag",
	}
	if !slices.Equal(got, want) {
		t.Errorf("sourceChecks = %q, want %q", got, want)
	}
}

// TestLookupNamesUnderTheClusterDomain: a DNS source whose name points back
// into the cluster under the configured --cluster-domain is invalid, which
// the CRD's rules (they know only cluster.local) cannot say.
func TestLookupNamesUnderTheClusterDomain(t *testing.T) {
	dns := func(name string) *v1alpha1.ExternalBackend {
		return &v1alpha1.ExternalBackend{ObjectMeta: metav1.ObjectMeta{Name: "db"}, Spec: v1alpha1.ExternalBackendSpec{
			Sources: []v1alpha1.Source{{Name: "name", DNS: &v1alpha1.DNSSource{Name: name}}}}}
	}
	cases := []struct {
		name, domain string
		want         string // "" for valid
	}{
		{"db.example.com", "corp.test", ""},
		{"db.payments.svc.corp.test", "corp.test", `spec.sources[name].dns.name: "db.payments.svc.corp.test" is in the cluster's DNS domain corp.test`},
		{"DB.Payments.svc.Corp.Test.", "corp.test", "cluster's DNS domain corp.test"},
		{"kube-dns.kube-system", "corp.test", "Service of namespace kube-system"},
		{"instance-data.ec2.internal", "", "instance metadata service"},
	}
	v := New()
	for _, c := range cases {
		err := v.Err(testKinds(), c.domain, dns(c.name))
		if (err == nil) != (c.want == "") || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s under %q: %v, want an error containing %q", c.name, c.domain, err, c.want)
		}
	}
}
