package providers_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
)

func backendProvider(name string, spec v1alpha1.BackendProviderSpec) *v1alpha1.BackendProvider {
	return &v1alpha1.BackendProvider{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Generation: 1}, Spec: spec}
}

func TestProviderKindOf(t *testing.T) {
	kinds := table()
	for _, c := range []struct {
		spec v1alpha1.BackendProviderSpec
		want string
	}{
		{v1alpha1.BackendProviderSpec{Static: &v1alpha1.StaticProvider{}}, "static"},
		{v1alpha1.BackendProviderSpec{AWS: &v1alpha1.AWSProvider{}}, "aws"},
		{v1alpha1.BackendProviderSpec{Plugin: &v1alpha1.PluginProvider{}}, ""},
		{v1alpha1.BackendProviderSpec{}, ""},
	} {
		if got := kinds.ProviderKindOf(backendProvider("p", c.spec)); got != c.want {
			t.Errorf("ProviderKindOf(%+v) = %q, want %q", c.spec, got, c.want)
		}
	}
	var names []string
	for _, p := range kinds.ProviderKinds() {
		names = append(names, p.Name)
	}
	if want := []string{"static", "dns", "consul", "aws"}; !slices.Equal(names, want) {
		t.Errorf("ProviderKinds = %v, want %v: each once, in the order of its first row", names, want)
	}
}

func TestSourceKindsOf(t *testing.T) {
	ks := table()
	for _, c := range []struct {
		spec v1alpha1.BackendProviderSpec
		want []providers.Kind
	}{
		{v1alpha1.BackendProviderSpec{AWS: &v1alpha1.AWSProvider{}}, []providers.Kind{kindAWSRDS, kindAWSEC2}},
		{v1alpha1.BackendProviderSpec{Consul: &v1alpha1.ConsulProvider{}}, []providers.Kind{kindConsul}},
		{v1alpha1.BackendProviderSpec{}, nil},
	} {
		if got := ks.SourceKindsOf(ks.ProviderOf(c.spec)); !slices.Equal(got, c.want) {
			t.Errorf("SourceKindsOf(%+v) = %v, want %v", c.spec, got, c.want)
		}
	}
}

// TestRowsAnswerForTheirKind: Connect, SecretsOf and Check ask the row of
// the provider's or the source's kind, and nothing for a kind without one.
func TestRowsAnswerForTheirKind(t *testing.T) {
	ks := table()
	consul := ks.Of(v1alpha1.Source{Consul: &v1alpha1.ConsulSource{}})
	consul.Provider.Connect = func(_ context.Context, bp *v1alpha1.BackendProvider, _ providers.SecretReader) (*providers.Connection, error) {
		c := providers.NewConnection(bp)
		c.Settings = bp.Spec.Consul.Address
		return c, nil
	}
	consul.Provider.Secrets = func(bp *v1alpha1.BackendProvider) []string { return []string{bp.Name + "-token"} }
	consul.Check = func(src v1alpha1.Source) string { return "spec.sources[" + src.Name + "].consul: checked" }
	bp := backendProvider("catalog", v1alpha1.BackendProviderSpec{Consul: &v1alpha1.ConsulProvider{Address: "consul:8500"}})
	conn, err := ks.Connect(context.Background(), bp, nil)
	if addr, ok := providers.SettingsOf[string](conn); err != nil || conn.Name != "catalog" || !ok || addr != "consul:8500" {
		t.Errorf("Connect = %+v, %v", conn, err)
	}
	if _, ok := providers.SettingsOf[int](conn); ok {
		t.Error("SettingsOf took settings of another type")
	}
	if got := ks.SecretsOf(bp); !slices.Equal(got, []string{"catalog-token"}) {
		t.Errorf("SecretsOf = %q", got)
	}
	if got := ks.Check(v1alpha1.Source{Name: "c", Consul: &v1alpha1.ConsulSource{}}); got != "spec.sources[c].consul: checked" {
		t.Errorf("Check = %q", got)
	}
	static := backendProvider("fixed", v1alpha1.BackendProviderSpec{Static: &v1alpha1.StaticProvider{}})
	if conn, err := ks.Connect(context.Background(), static, nil); conn != nil || err != nil || ks.SecretsOf(static) != nil {
		t.Errorf("a kind without Connect or Secrets: %+v, %v, %q", conn, err, ks.SecretsOf(static))
	}
	if got := ks.Check(v1alpha1.Source{Name: "s", Static: &v1alpha1.StaticSource{}}); got != "" {
		t.Errorf("Check of a row without one = %q", got)
	}
}

// TestNewConnectionKey: the key follows the provider's identity,
// generation and what else the connection depends on.
func TestNewConnectionKey(t *testing.T) {
	bp := backendProvider("p", v1alpha1.BackendProviderSpec{})
	k := providers.NewConnection(bp, []byte("CA")).Key
	next := bp.DeepCopy()
	next.Generation++
	for name, other := range map[string]string{
		"same":             providers.NewConnection(bp, []byte("CA")).Key,
		"new generation":   providers.NewConnection(next, []byte("CA")).Key,
		"another CA":       providers.NewConnection(bp, []byte("CA2")).Key,
		"another identity": providers.NewConnection(backendProvider("q", v1alpha1.BackendProviderSpec{}), []byte("CA")).Key,
	} {
		if (other == k) != (name == "same") {
			t.Errorf("%s: key %s against %s", name, other, k)
		}
	}
}

// TestConfigureAndBuild: each provider kind binds its own flags once,
// and Build makes the providers of every kind from what the flags say,
// with the controller's environment.
func TestConfigureAndBuild(t *testing.T) {
	ks := table()
	var floors []int
	for _, p := range ks.ProviderKinds() {
		p.FlagPrefix = p.Name + "-"
		p.Configure = func(fs *pflag.FlagSet) providers.Constructor {
			wait := fs.Duration(p.FlagPrefix+"wait", time.Second, "how long")
			return func(_ context.Context, env providers.Env) ([]providers.Provider, error) {
				floors = append(floors, env.NamespaceWatchFloor)
				if *wait == 0 {
					return nil, errors.New("--" + p.FlagPrefix + "wait=0: must be positive")
				}
				var out []providers.Provider
				for _, k := range ks.SourceKindsOf(p) {
					out = append(out, &recorder{kind: k})
				}
				return out, nil
			}
		}
	}
	fs := pflag.NewFlagSet("controller", pflag.ContinueOnError)
	c := ks.Configure(fs)
	if err := fs.Parse([]string{"--dns-wait=2s"}); err != nil {
		t.Fatal(err)
	}
	reg, err := ks.Build(context.Background(), c, providers.Env{NamespaceWatchFloor: 3})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []providers.Kind
	for _, p := range reg.Providers() {
		kinds = append(kinds, p.Kind())
	}
	if want := []providers.Kind{kindStatic, kindDNS, kindConsul, kindAWSRDS, kindAWSEC2}; !slices.Equal(kinds, want) || !slices.Equal(floors, []int{3, 3, 3, 3}) {
		t.Errorf("built %v (floors %v), want %v, each kind built once with the environment", kinds, floors, want)
	}
	fs = pflag.NewFlagSet("controller", pflag.ContinueOnError)
	c = ks.Configure(fs)
	if err := fs.Parse([]string{"--aws-wait=0s"}); err != nil {
		t.Fatal(err)
	}
	if _, err := ks.Build(context.Background(), c, providers.Env{}); err == nil || !strings.Contains(err.Error(), "--aws-wait=0") {
		t.Errorf("Build with a bad flag: %v, want the kind's error naming the flag", err)
	}
}

// TestRegistryOfATable registers a made-up kind through a table alone: it
// claims the DNS sources of one zone ahead of the dns row, so the registry
// asks its provider for those and the dns provider for the rest; a
// provider of a kind the table lacks is refused.
func TestRegistryOfATable(t *testing.T) {
	inZone := func(s v1alpha1.Source) bool { return s.DNS != nil && strings.HasSuffix(s.DNS.Name, ".inventory.test") }
	kinds := append(providers.Kinds{{Kind: "inventory", Of: inZone, Provider: &providers.ProviderKind{Name: "inventory",
		Of: func(v1alpha1.BackendProviderSpec) bool { return false }}}}, table()...)
	inventory, dns := &recorder{kind: "inventory"}, &recorder{kind: kindDNS}
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
	_, err = table().NewRegistry(&recorder{kind: "inventory"})
	if err == nil || !strings.Contains(err.Error(), `"inventory"`) {
		t.Errorf("NewRegistry of a table without inventory took an inventory provider: %v", err)
	}
}
