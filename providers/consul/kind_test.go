package consul_test

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
	"github.com/backendslice/backendslice/providers/consul"
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

var consulSpec = v1alpha1.BackendProviderSpec{Consul: &v1alpha1.ConsulProvider{
	Address: "https://consul:8501", Datacenter: "eu",
	TokenSecretRef: &v1alpha1.SecretKeyReference{Name: "token", Key: "t"},
	TLS: &v1alpha1.ProviderTLS{ServerName: "consul.internal",
		CASecretRef: &v1alpha1.SecretKeyReference{Name: "ca", Key: "ca.crt"}},
}}

// TestConnect: the consul row reads the CA now and the token at each
// query, and keys the connection on the generation and the CA.
func TestConnect(t *testing.T) {
	kinds := consul.Kinds()
	connect := func(t *testing.T, bp *v1alpha1.BackendProvider, s providers.SecretReader) (*providers.Connection, *consul.Settings) {
		t.Helper()
		conn, err := kinds.Connect(context.Background(), bp, s)
		if err != nil {
			t.Fatalf("Connect: %v", err)
		}
		c, _ := providers.SettingsOf[*consul.Settings](conn)
		return conn, c
	}
	t.Run("secrets", func(t *testing.T) {
		bp := backendProvider("consul-eu", 1, consulSpec)
		rotating := secrets{"token/t": "s3cr3t", "ca/ca.crt": "PEM"}
		conn, c := connect(t, bp, rotating)
		if conn.Name != "consul-eu" || c == nil || c.Address != "https://consul:8501" || c.Datacenter != "eu" ||
			c.ServerName != "consul.internal" || string(c.CAPEM) != "PEM" {
			t.Fatalf("Connect = %+v (consul %+v)", conn, c)
		}
		rotating["token/t"] = "rotated"
		if tok, err := c.Token(); err != nil || tok != "rotated" {
			t.Errorf("Token() = %q, %v; want the rotated token, read at each call", tok, err)
		}
		// The key follows the generation and the CA, not the token.
		if again, _ := connect(t, bp, rotating); again.Key != conn.Key {
			t.Errorf("a rotated token changed the key")
		}
		if next, _ := connect(t, backendProvider("consul-eu", 2, consulSpec), rotating); next.Key == conn.Key {
			t.Errorf("a new generation kept the key")
		}
		rotating["ca/ca.crt"] = "PEM2"
		if newCA, _ := connect(t, bp, rotating); newCA.Key == conn.Key {
			t.Errorf("a new CA kept the key")
		}
	})
	t.Run("without a token", func(t *testing.T) {
		spec := v1alpha1.BackendProviderSpec{Consul: &v1alpha1.ConsulProvider{Address: "consul:8500"}}
		_, c := connect(t, backendProvider("open", 1, spec), nil)
		tok, err := c.Token()
		if err != nil || tok != "" {
			t.Errorf("Token() = %q, %v; want none", tok, err)
		}
	})
	t.Run("Secret missing", func(t *testing.T) {
		for name, s := range map[string]secrets{"token": {"ca/ca.crt": "PEM"}, "ca": {"token/t": "x"}} {
			_, err := kinds.Connect(context.Background(), backendProvider("consul-eu", 1, consulSpec), s)
			if err == nil || !strings.Contains(err.Error(), "BackendProvider consul-eu") || !strings.Contains(err.Error(), "Secret "+name) {
				t.Errorf("without Secret %s: Connect error %v, want one naming the provider and the Secret", name, err)
			}
		}
	})
}

func TestSecretsOf(t *testing.T) {
	kinds := consul.Kinds()
	for _, c := range []struct {
		spec v1alpha1.BackendProviderSpec
		want []string
	}{
		{consulSpec, []string{"token", "ca"}},
		{v1alpha1.BackendProviderSpec{Consul: &v1alpha1.ConsulProvider{Address: "consul:8500"}}, nil},
		{v1alpha1.BackendProviderSpec{}, nil},
	} {
		if got := kinds.SecretsOf(backendProvider("p", 1, c.spec)); !slices.Equal(got, c.want) {
			t.Errorf("SecretsOf(%+v) = %q, want %q", c.spec, got, c.want)
		}
	}
}

func TestConsulAdmission(t *testing.T) {
	row := consul.Kinds().Of(v1alpha1.Source{Consul: &v1alpha1.ConsulSource{}})
	p := backendProvider("consul-eu", 1, v1alpha1.BackendProviderSpec{Consul: &v1alpha1.ConsulProvider{AllowedServices: []string{"pay-*"}}})
	src := func(service string) v1alpha1.Source {
		return v1alpha1.Source{Name: "s", Consul: &v1alpha1.ConsulSource{Service: service}}
	}
	if d := row.Admit(p, src("pay-db")); d != nil {
		t.Errorf("pay-db refused: %+v", d)
	}
	d := row.Admit(p, src("billing"))
	want := `spec.sources[s].consul.service: "billing" is not among the services BackendProvider "consul-eu" serves (spec.consul.allowedServices [pay-*])`
	if d == nil || d.Rule != consul.RuleAllowedServices || d.Message != want {
		t.Errorf("billing: %+v, want rule %s saying %q", d, consul.RuleAllowedServices, want)
	}
}

// TestConsulScopeAdmission: a provider pins the datacenters, namespaces
// and partitions sources may read through its token, not only the service.
func TestConsulScopeAdmission(t *testing.T) {
	row := consul.Kinds().Of(v1alpha1.Source{Consul: &v1alpha1.ConsulSource{}})
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
		{name: "another datacenter", src: v1alpha1.ConsulSource{Service: "db", Datacenter: "us-1"}, rule: consul.RuleAllowedDatacenters,
			contains: `spec.sources[s].consul.datacenter: "us-1" is not among the datacenters BackendProvider "consul-eu" serves (spec.consul.allowedDatacenters [eu-*])`},
		{name: "another namespace", src: v1alpha1.ConsulSource{Service: "db", Namespace: "team-b"}, rule: consul.RuleAllowedNamespaces,
			contains: `spec.sources[s].consul.namespace: "team-b" is not among the namespaces BackendProvider "consul-eu" serves (spec.consul.allowedNamespaces [default team-a])`},
		{name: "another partition", src: v1alpha1.ConsulSource{Service: "db", Partition: "finance"}, rule: consul.RuleAllowedPartitions,
			contains: `spec.consul.allowedPartitions [default]`},
	}
	for _, c := range cases {
		src := c.src
		d := row.Admit(p, v1alpha1.Source{Name: "s", Consul: &src})
		switch {
		case c.rule == "" && d != nil:
			t.Errorf("%s: refused: %+v", c.name, d)
		case c.rule != "" && (d == nil || d.Rule != c.rule || !strings.Contains(d.Message, c.contains)):
			t.Errorf("%s: %+v, want rule %s saying %q", c.name, d, c.rule, c.contains)
		}
	}
	// A provider without the lists lets every scope through, as before.
	open := backendProvider("consul-any", 1, v1alpha1.BackendProviderSpec{Consul: &v1alpha1.ConsulProvider{}})
	if d := row.Admit(open, v1alpha1.Source{Name: "s", Consul: &v1alpha1.ConsulSource{Service: "db", Datacenter: "us-1", Namespace: "x", Partition: "y"}}); d != nil {
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
		if got := consul.GlobsAllow(c.globs, c.service); got != c.want {
			t.Errorf("GlobsAllow(%q, %q) = %v, want %v", c.globs, c.service, got, c.want)
		}
	}
}
