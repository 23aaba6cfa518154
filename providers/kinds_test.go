package providers_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
)

// secrets is a SecretReader over a map of "name/key" to value.
type secrets map[string]string

func (s secrets) SecretValue(_ context.Context, user string, ref v1alpha1.SecretKeyReference) ([]byte, error) {
	v, ok := s[ref.Name+"/"+ref.Key]
	if !ok {
		return nil, errors.New(user + ": Secret " + ref.Name + " not found")
	}
	return []byte(v), nil
}

func backendProvider(name string, generation int64, spec v1alpha1.BackendProviderSpec) *v1alpha1.BackendProvider {
	return &v1alpha1.BackendProvider{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Generation: generation}, Spec: spec}
}

var (
	consulSpec = v1alpha1.BackendProviderSpec{Consul: &v1alpha1.ConsulProvider{
		Address: "https://consul:8501", Datacenter: "eu",
		TokenSecretRef: &v1alpha1.SecretKeyReference{Name: "token", Key: "t"},
		TLS: &v1alpha1.ProviderTLS{ServerName: "consul.internal",
			CASecretRef: &v1alpha1.SecretKeyReference{Name: "ca", Key: "ca.crt"}},
	}}
	awsSpec = v1alpha1.BackendProviderSpec{AWS: &v1alpha1.AWSProvider{Region: "eu-west-1", AssumeRoleARN: "arn:aws:iam::1:role/r",
		EndpointURL: "http://127.0.0.1:1", ConsentTag: "consent"}}
)

func TestProviderKindOf(t *testing.T) {
	kinds := providers.BuiltinKinds()
	for _, c := range []struct {
		spec v1alpha1.BackendProviderSpec
		want string
	}{
		{v1alpha1.BackendProviderSpec{Static: &v1alpha1.StaticProvider{}}, "static"},
		{v1alpha1.BackendProviderSpec{DNS: &v1alpha1.DNSProvider{}}, "dns"},
		{consulSpec, "consul"},
		{awsSpec, "aws"},
		{v1alpha1.BackendProviderSpec{}, ""},
	} {
		if got := kinds.ProviderKindOf(backendProvider("p", 1, c.spec)); got != c.want {
			t.Errorf("ProviderKindOf(%+v) = %q, want %q", c.spec, got, c.want)
		}
	}
	// Both AWS source kinds are served by the one aws provider kind.
	rds, ec2 := kinds.Of(v1alpha1.Source{AWSRDS: &v1alpha1.AWSRDSSource{}}), kinds.Of(v1alpha1.Source{AWSEC2: &v1alpha1.AWSEC2Source{}})
	if rds.Provider != ec2.Provider || rds.Provider.Name != "aws" {
		t.Errorf("awsRDS served by %+v, awsEC2 by %+v; want one aws provider kind", rds.Provider, ec2.Provider)
	}
}

func TestConnect(t *testing.T) {
	kinds := providers.BuiltinKinds()
	sec := secrets{"token/t": "s3cr3t", "ca/ca.crt": "PEM"}
	connect := func(t *testing.T, bp *v1alpha1.BackendProvider, s providers.SecretReader) *providers.Connection {
		t.Helper()
		conn, err := kinds.Connect(context.Background(), bp, s)
		if err != nil {
			t.Fatalf("Connect: %v", err)
		}
		return conn
	}
	t.Run("only admits", func(t *testing.T) {
		for _, spec := range []v1alpha1.BackendProviderSpec{
			{Static: &v1alpha1.StaticProvider{}}, {DNS: &v1alpha1.DNSProvider{}}, {},
		} {
			if conn := connect(t, backendProvider("p", 1, spec), sec); conn != nil {
				t.Errorf("Connect(%+v) = %+v, want nil", spec, conn)
			}
		}
	})
	t.Run("dns", func(t *testing.T) {
		conn := connect(t, backendProvider("resolvers", 1, v1alpha1.BackendProviderSpec{DNS: &v1alpha1.DNSProvider{Resolvers: []string{"192.0.2.53:53"}}}), sec)
		if conn.Name != "resolvers" || conn.Key == "" || conn.DNS == nil || !slices.Equal(conn.DNS.Resolvers, []string{"192.0.2.53:53"}) || conn.Consul != nil || conn.AWS != nil {
			t.Errorf("Connect = %+v", conn)
		}
	})
	t.Run("aws", func(t *testing.T) {
		conn := connect(t, backendProvider("acct", 1, awsSpec), sec)
		want := providers.AWSConnection{Region: "eu-west-1", AssumeRoleARN: "arn:aws:iam::1:role/r", EndpointURL: "http://127.0.0.1:1", ConsentTag: "consent"}
		if conn.Name != "acct" || conn.AWS == nil || *conn.AWS != want || conn.Consul != nil || conn.DNS != nil {
			t.Errorf("Connect = %+v", conn)
		}
	})
	t.Run("consul", func(t *testing.T) {
		bp := backendProvider("consul-eu", 1, consulSpec)
		rotating := secrets{"token/t": "s3cr3t", "ca/ca.crt": "PEM"}
		conn := connect(t, bp, rotating)
		c := conn.Consul
		if conn.Name != "consul-eu" || c == nil || c.Address != "https://consul:8501" || c.Datacenter != "eu" ||
			c.ServerName != "consul.internal" || string(c.CAPEM) != "PEM" {
			t.Fatalf("Connect = %+v (consul %+v)", conn, c)
		}
		rotating["token/t"] = "rotated"
		if tok, err := c.Token(); err != nil || tok != "rotated" {
			t.Errorf("Token() = %q, %v; want the rotated token, read at each call", tok, err)
		}
		// The key follows the generation and the CA, not the token.
		if again := connect(t, bp, rotating); again.Key != conn.Key {
			t.Errorf("a rotated token changed the key")
		}
		if next := connect(t, backendProvider("consul-eu", 2, consulSpec), rotating); next.Key == conn.Key {
			t.Errorf("a new generation kept the key")
		}
		rotating["ca/ca.crt"] = "PEM2"
		if newCA := connect(t, bp, rotating); newCA.Key == conn.Key {
			t.Errorf("a new CA kept the key")
		}
	})
	t.Run("consul without a token", func(t *testing.T) {
		spec := v1alpha1.BackendProviderSpec{Consul: &v1alpha1.ConsulProvider{Address: "consul:8500"}}
		tok, err := connect(t, backendProvider("open", 1, spec), nil).Consul.Token()
		if err != nil || tok != "" {
			t.Errorf("Token() = %q, %v; want none", tok, err)
		}
	})
	t.Run("consul Secret missing", func(t *testing.T) {
		for name, s := range map[string]secrets{"token": {"ca/ca.crt": "PEM"}, "ca": {"token/t": "x"}} {
			_, err := kinds.Connect(context.Background(), backendProvider("consul-eu", 1, consulSpec), s)
			if err == nil || !strings.Contains(err.Error(), "BackendProvider consul-eu") || !strings.Contains(err.Error(), "Secret "+name) {
				t.Errorf("without Secret %s: Connect error %v, want one naming the provider and the Secret", name, err)
			}
		}
	})
}

func TestSecretsOf(t *testing.T) {
	kinds := providers.BuiltinKinds()
	for _, c := range []struct {
		spec v1alpha1.BackendProviderSpec
		want []string
	}{
		{consulSpec, []string{"token", "ca"}},
		{v1alpha1.BackendProviderSpec{Consul: &v1alpha1.ConsulProvider{Address: "consul:8500"}}, nil},
		{awsSpec, nil},
		{v1alpha1.BackendProviderSpec{Static: &v1alpha1.StaticProvider{}}, nil},
		{v1alpha1.BackendProviderSpec{}, nil},
	} {
		if got := kinds.SecretsOf(backendProvider("p", 1, c.spec)); !slices.Equal(got, c.want) {
			t.Errorf("SecretsOf(%+v) = %q, want %q", c.spec, got, c.want)
		}
	}
}

func TestConsulAdmission(t *testing.T) {
	consul := providers.BuiltinKinds().Of(v1alpha1.Source{Consul: &v1alpha1.ConsulSource{}})
	p := backendProvider("consul-eu", 1, v1alpha1.BackendProviderSpec{Consul: &v1alpha1.ConsulProvider{AllowedServices: []string{"pay-*"}}})
	src := func(service string) v1alpha1.Source {
		return v1alpha1.Source{Name: "s", Consul: &v1alpha1.ConsulSource{Service: service}}
	}
	if d := consul.Admit(p, src("pay-db")); d != nil {
		t.Errorf("pay-db refused: %+v", d)
	}
	d := consul.Admit(p, src("billing"))
	want := `spec.sources[s].consul.service: "billing" is not among the services BackendProvider "consul-eu" serves (spec.consul.allowedServices [pay-*])`
	if d == nil || d.Rule != providers.RuleAllowedServices || d.Message != want {
		t.Errorf("billing: %+v, want rule %s saying %q", d, providers.RuleAllowedServices, want)
	}
}

// TestConsulScopeAdmission: a provider pins the datacenters, namespaces
// and partitions sources may read through its token, not only the service.
func TestConsulScopeAdmission(t *testing.T) {
	consul := providers.BuiltinKinds().Of(v1alpha1.Source{Consul: &v1alpha1.ConsulSource{}})
	p := backendProvider("consul-eu", 1, v1alpha1.BackendProviderSpec{Consul: &v1alpha1.ConsulProvider{
		Datacenter: "eu-1", AllowedDatacenters: []string{"eu-*"}, AllowedNamespaces: []string{"default", "team-a"},
		AllowedPartitions: []string{"default"}}})
	cases := []struct {
		name     string
		src      v1alpha1.ConsulSource
		rule     string // "" for admitted
		contains string
	}{
		{name: "the provider's datacenter by default", src: v1alpha1.ConsulSource{Service: "db"}},
		{name: "an allowed datacenter", src: v1alpha1.ConsulSource{Service: "db", Datacenter: "eu-2", Namespace: "team-a"}},
		{name: "another datacenter", src: v1alpha1.ConsulSource{Service: "db", Datacenter: "us-1"}, rule: providers.RuleAllowedDatacenters,
			contains: `spec.sources[s].consul.datacenter: "us-1" is not among the datacenters BackendProvider "consul-eu" serves (spec.consul.allowedDatacenters [eu-*])`},
		{name: "another namespace", src: v1alpha1.ConsulSource{Service: "db", Namespace: "team-b"}, rule: providers.RuleAllowedNamespaces,
			contains: `spec.sources[s].consul.namespace: "team-b" is not among the namespaces BackendProvider "consul-eu" serves (spec.consul.allowedNamespaces [default team-a])`},
		{name: "another partition", src: v1alpha1.ConsulSource{Service: "db", Partition: "finance"}, rule: providers.RuleAllowedPartitions,
			contains: `spec.consul.allowedPartitions [default]`},
	}
	for _, c := range cases {
		src := c.src
		d := consul.Admit(p, v1alpha1.Source{Name: "s", Consul: &src})
		switch {
		case c.rule == "" && d != nil:
			t.Errorf("%s: refused: %+v", c.name, d)
		case c.rule != "" && (d == nil || d.Rule != c.rule || !strings.Contains(d.Message, c.contains)):
			t.Errorf("%s: %+v, want rule %s saying %q", c.name, d, c.rule, c.contains)
		}
	}
	// A provider without the lists lets every scope through, as before.
	open := backendProvider("consul-any", 1, v1alpha1.BackendProviderSpec{Consul: &v1alpha1.ConsulProvider{}})
	if d := consul.Admit(open, v1alpha1.Source{Name: "s", Consul: &v1alpha1.ConsulSource{Service: "db", Datacenter: "us-1", Namespace: "x", Partition: "y"}}); d != nil {
		t.Errorf("a provider without allowed* lists refused: %+v", d)
	}
}

func TestGlobsAllow(t *testing.T) {
	for _, c := range []struct {
		globs   []string
		service string
		want    bool
	}{
		{nil, "anything", true},
		{[]string{"*"}, "anything", true},
		{[]string{"pay-*"}, "pay-db", true},
		{[]string{"pay-*"}, "payroll", false},
		{[]string{"db?"}, "db1", true},
		{[]string{"db?"}, "db12", false},
		{[]string{"[bad"}, "[bad", false},
	} {
		if got := providers.GlobsAllow(c.globs, c.service); got != c.want {
			t.Errorf("GlobsAllow(%q, %q) = %v, want %v", c.globs, c.service, got, c.want)
		}
	}
}

func TestCheck(t *testing.T) {
	kinds := providers.BuiltinKinds()
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
		{v1alpha1.Source{Name: "fixed", Static: &v1alpha1.StaticSource{}}, ""},
		{v1alpha1.Source{Name: "none"}, ""},
	} {
		if got := kinds.Check(c.src); got != c.want {
			t.Errorf("Check(%s) = %q, want %q", c.src.Name, got, c.want)
		}
	}
}

// TestBuiltinKindsAreFresh: a caller that changes its table changes no
// other's.
func TestBuiltinKindsAreFresh(t *testing.T) {
	mine := providers.BuiltinKinds()
	mine[0].Kind = "changed"
	mine[0].Provider.Name = "changed"
	if k := providers.BuiltinKinds()[0]; k.Kind != providers.KindStatic || k.Provider.Name != "static" {
		t.Errorf("a changed table showed in the next one: %q served by %q", k.Kind, k.Provider.Name)
	}
	if providers.Kinds(nil).OrBuiltin().KindOf(v1alpha1.Source{Static: &v1alpha1.StaticSource{}}) != providers.KindStatic {
		t.Error("a nil table does not read as the built-in one")
	}
}

// TestRegistryOfATable registers a made-up kind through a table alone: it
// claims the DNS sources of one zone ahead of the dns row, so the registry
// asks its provider for those and the dns provider for the rest; a
// provider of a kind the table lacks is refused.
func TestRegistryOfATable(t *testing.T) {
	inZone := func(s v1alpha1.Source) bool { return s.DNS != nil && strings.HasSuffix(s.DNS.Name, ".inventory.test") }
	kinds := append(providers.Kinds{{Kind: "inventory", Of: inZone, Provider: &providers.ProviderKind{Name: "inventory",
		Of: func(v1alpha1.BackendProviderSpec) bool { return false }}}}, providers.BuiltinKinds()...)
	inventory, dns := &recorder{kind: "inventory"}, &recorder{kind: providers.KindDNS}
	r, err := kinds.NewRegistry(inventory, dns)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Kinds().KindOf(v1alpha1.Source{DNS: &v1alpha1.DNSSource{Name: "db.inventory.test"}}); got != "inventory" {
		t.Errorf("the registry's table says %q", got)
	}
	for _, name := range []string{"db.inventory.test", "db.example.com"} {
		if _, err := r.Resolve(context.Background(), providers.Request{Source: v1alpha1.Source{Name: name, DNS: &v1alpha1.DNSSource{Name: name}}}); err != nil {
			t.Fatal(err)
		}
	}
	if len(inventory.got) != 1 || inventory.got[0].Source.Name != "db.inventory.test" || len(dns.got) != 1 || dns.got[0].Source.Name != "db.example.com" {
		t.Errorf("inventory asked %+v, dns asked %+v", inventory.got, dns.got)
	}
	_, err = providers.NewRegistry(&recorder{kind: "inventory"})
	if err == nil || !strings.Contains(err.Error(), `"inventory"`) {
		t.Errorf("NewRegistry of the built-in kinds took an inventory provider: %v", err)
	}
}

func TestSourceKindsOf(t *testing.T) {
	ks := providers.BuiltinKinds()
	for _, c := range []struct {
		spec v1alpha1.BackendProviderSpec
		want []providers.Kind
	}{
		{v1alpha1.BackendProviderSpec{AWS: &v1alpha1.AWSProvider{}}, []providers.Kind{providers.KindAWSRDS, providers.KindAWSEC2, providers.KindAWSElastiCache, providers.KindAWSMemoryDB}},
		{v1alpha1.BackendProviderSpec{Consul: &v1alpha1.ConsulProvider{}}, []providers.Kind{providers.KindConsul}},
		{v1alpha1.BackendProviderSpec{}, nil},
	} {
		if got := ks.SourceKindsOf(ks.ProviderOf(c.spec)); !slices.Equal(got, c.want) {
			t.Errorf("SourceKindsOf(%+v) = %v, want %v", c.spec, got, c.want)
		}
	}
}
