package tenancy

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
	awsprovider "github.com/backendslice/backendslice/providers/aws"
	consulprovider "github.com/backendslice/backendslice/providers/consul"
	staticprovider "github.com/backendslice/backendslice/providers/static"
	"github.com/backendslice/backendslice/test/examplekind"
)

// kinds is a table of the kinds these tests use, from their packages.
func kinds() providers.Kinds {
	return slices.Concat(staticprovider.Kinds(), consulprovider.Kinds(), awsprovider.Kinds())
}

func provider(name string, spec v1alpha1.BackendProviderSpec) *v1alpha1.BackendProvider {
	return &v1alpha1.BackendProvider{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
}

func TestAdmit(t *testing.T) {
	payments := Namespace{Name: "payments", Labels: map[string]string{"team": "payments", "tier": "prod"}}
	web := Namespace{Name: "web", Labels: map[string]string{"team": "web"}}
	byName := v1alpha1.NamespaceSelection{Names: []string{"payments"}}
	byLabel := v1alpha1.NamespaceSelection{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "prod"}}}
	consul := provider("consul-eu", v1alpha1.BackendProviderSpec{Namespaces: byName,
		Consul: &v1alpha1.ConsulProvider{Address: "consul:8500", AllowedServices: []string{"payments-*", "ledger"}}})
	aws := provider("aws-prod", v1alpha1.BackendProviderSpec{Namespaces: byLabel, AWS: &v1alpha1.AWSProvider{Region: "eu-west-1"}})
	static := provider("vms", v1alpha1.BackendProviderSpec{Namespaces: byLabel, Static: &v1alpha1.StaticProvider{}, AllowedCIDRs: []string{"192.0.2.0/24"}})
	badSelector := provider("bad", v1alpha1.BackendProviderSpec{Static: &v1alpha1.StaticProvider{},
		Namespaces: v1alpha1.NamespaceSelection{Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "x", Operator: "Bogus"}}}}})
	ref := func(name string) *v1alpha1.ProviderReference { return &v1alpha1.ProviderReference{Name: name} }
	consulSrc := func(provider, service string) v1alpha1.Source {
		return v1alpha1.Source{Name: "s", ProviderRef: ref(provider), Consul: &v1alpha1.ConsulSource{Service: service}}
	}
	rds := v1alpha1.Source{Name: "s", ProviderRef: ref("aws-prod"), AWSRDS: &v1alpha1.AWSRDSSource{Region: "eu-west-1", DBInstanceIdentifier: "db"}}
	fixed := v1alpha1.Source{Name: "s", ProviderRef: ref("vms"), Static: &v1alpha1.StaticSource{}}
	for _, c := range []struct {
		name     string
		provider *v1alpha1.BackendProvider
		ns       Namespace
		src      v1alpha1.Source
		rule     string // "" when admitted
		says     string
	}{
		{"admitted by name", consul, payments, consulSrc("consul-eu", "payments-db"), "", ""},
		{"admitted by label", aws, payments, rds, "", ""},
		{"static admitted by label", static, payments, fixed, "", ""},
		{"not admitted: neither name nor label", consul, web, consulSrc("consul-eu", "payments-db"), RuleNamespace,
			`namespace web is not admitted to BackendProvider "consul-eu"`},
		{"not admitted: label does not match", aws, web, rds, RuleNamespace, "ask the platform team to admit it"},
		{"provider missing", nil, payments, consulSrc("consul-us", "payments-db"), RuleProviderNotFound,
			`BackendProvider "consul-us" does not exist`},
		{"wrong kind", consul, payments, rds, RuleKind, `is of kind consul and cannot serve awsRDS sources; name a BackendProvider of kind aws`},
		{"service outside the globs", consul, payments, consulSrc("consul-eu", "billing"), consulprovider.RuleAllowedServices,
			`spec.sources[s].consul.service: "billing" is not among the services`},
		{"service matches an exact entry", consul, payments, consulSrc("consul-eu", "ledger"), "", ""},
		{"a selector that does not parse admits nobody", badSelector, payments, v1alpha1.Source{Name: "s", ProviderRef: ref("bad"), Static: &v1alpha1.StaticSource{}},
			RuleNamespace, "invalid spec.namespaces.selector"},
	} {
		t.Run(c.name, func(t *testing.T) {
			wantDecision(t, Admit(kinds(), c.provider, c.ns, c.src), c.src, c.rule, c.says)
		})
	}
}

// wantDecision fails unless got admits src (rule "") or refuses it by rule,
// naming its provider and saying says.
func wantDecision(t *testing.T, got *Refusal, src v1alpha1.Source, rule, says string) {
	t.Helper()
	switch {
	case rule == "" && got != nil:
		t.Fatalf("refused: %v", got)
	case rule == "":
		return
	case got == nil:
		t.Fatalf("admitted, want refused by %s", rule)
	case got.Rule != rule || !strings.Contains(got.Message, says) || got.Provider != src.ProviderRef.Name:
		t.Fatalf("refusal %+v, want rule %s saying %q", got, rule, says)
	}
}

func TestUnreferenced(t *testing.T) {
	src := v1alpha1.Source{Name: "legacy", Static: &v1alpha1.StaticSource{}}
	if r := Unreferenced(src, true); r != nil {
		t.Errorf("an install that allows sources without a provider refused one: %v", r)
	}
	r := Unreferenced(src, false)
	if r == nil || r.Rule != RuleProviderRequired || !strings.Contains(r.Message, "spec.sources[legacy].providerRef: required") {
		t.Errorf("refusal %+v", r)
	}
}

func TestAllowedPrefixes(t *testing.T) {
	open := provider("p", v1alpha1.BackendProviderSpec{})
	if got, restricted := AllowedPrefixes(open); restricted || got != nil {
		t.Errorf("no allowedCIDRs: %v restricted=%v, want unrestricted", got, restricted)
	}
	p := provider("p", v1alpha1.BackendProviderSpec{AllowedCIDRs: []string{"192.0.2.7/24", "2001:db8::/64", "nonsense"}})
	got, restricted := AllowedPrefixes(p)
	want := []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("2001:db8::/64")}
	if !restricted || !slices.Equal(got, want) {
		t.Errorf("got %v restricted=%v, want %v restricted", got, restricted, want)
	}
	if got, restricted := AllowedPrefixes(provider("p", v1alpha1.BackendProviderSpec{AllowedCIDRs: []string{"nonsense"}})); !restricted || len(got) != 0 {
		t.Errorf("only malformed entries: %v restricted=%v, want restricted to nothing", got, restricted)
	}
}

// TestAdmitReadsTheTable admits through a table with the made-up example
// kind (test/examplekind) beside the binary's: its sources go through its
// providers only, with the row's own rule, and kind refusals name the
// table's kinds.
func TestAdmitReadsTheTable(t *testing.T) {
	kinds := slices.Concat(kinds(), examplekind.Kinds())
	ns := Namespace{Name: "payments"}
	admitted := v1alpha1.NamespaceSelection{Names: []string{"payments"}}
	shop := provider("shop", v1alpha1.BackendProviderSpec{Namespaces: admitted,
		Example: &v1alpha1.ExampleProvider{Catalog: "main", AllowedItems: []string{"db"}}})
	consul := provider("consul-eu", v1alpha1.BackendProviderSpec{Namespaces: admitted, Consul: &v1alpha1.ConsulProvider{Address: "consul:8500"}})
	item := func(provider, item string) v1alpha1.Source {
		return v1alpha1.Source{Name: "s", ProviderRef: &v1alpha1.ProviderReference{Name: provider}, Example: &v1alpha1.ExampleSource{Item: item}}
	}
	service := func(provider string) v1alpha1.Source {
		return v1alpha1.Source{Name: "s", ProviderRef: &v1alpha1.ProviderReference{Name: provider}, Consul: &v1alpha1.ConsulSource{Service: "db"}}
	}
	for _, c := range []struct {
		name     string
		provider *v1alpha1.BackendProvider
		src      v1alpha1.Source
		rule     string // "" when admitted
		says     string
	}{
		{"example through example", shop, item("shop", "db"), "", ""},
		{"the row's own rule", shop, item("shop", "cache"), examplekind.RuleAllowedItems,
			`spec.sources[s].example.item: "cache" is not among the items BackendProvider "shop" serves`},
		{"example through consul", consul, item("consul-eu", "db"), RuleKind,
			`BackendProvider "consul-eu" is of kind consul and cannot serve example sources; name a BackendProvider of kind example`},
		{"consul through example", shop, service("shop"), RuleKind,
			`BackendProvider "shop" is of kind example and cannot serve consul sources; name a BackendProvider of kind consul`},
		{"consul through consul", consul, service("consul-eu"), "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			wantDecision(t, Admit(kinds, c.provider, ns, c.src), c.src, c.rule, c.says)
		})
	}
}
