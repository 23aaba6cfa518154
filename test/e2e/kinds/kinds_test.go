package kinds_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/config/crd"
	"github.com/backendslice/backendslice/internal/admission"
	"github.com/backendslice/backendslice/test/e2e/framework"
	"github.com/backendslice/backendslice/test/examplekind"
)

// exampleProvider is an example BackendProvider of catalog admitting
// namespaces, listing items (nil: every item).
func exampleProvider(name, catalog string, namespaces []string, items ...string) *v1alpha1.BackendProvider {
	return &v1alpha1.BackendProvider{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.BackendProviderSpec{
		Example:    &v1alpha1.ExampleProvider{Catalog: catalog, AllowedItems: items},
		Namespaces: v1alpha1.NamespaceSelection{Names: append([]string{"unused"}, namespaces...)}}}
}

// createProvider creates bp, deleted when the test ends.
func createProvider(t *testing.T, bp *v1alpha1.BackendProvider) {
	t.Helper()
	framework.Create(t, bp)
	t.Cleanup(func() { _ = framework.E().Client.Delete(context.Background(), bp) })
}

// backend is an ExternalBackend of one TCP port, both IP families and no
// drain period, with one source through provider.
func backend(ns, provider string, src v1alpha1.Source) *v1alpha1.ExternalBackend {
	src.Name, src.ProviderRef = "items", &v1alpha1.ProviderReference{Name: provider}
	return &v1alpha1.ExternalBackend{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "assets"},
		Spec: v1alpha1.ExternalBackendSpec{
			Service:      v1alpha1.ServiceSpec{Ports: []v1alpha1.ServicePort{{Name: "tcp", Port: 5432}}},
			AddressTypes: []v1alpha1.AddressType{v1alpha1.AddressTypeIPv4, v1alpha1.AddressTypeIPv6},
			DrainPeriod:  &metav1.Duration{},
			Sources:      []v1alpha1.Source{src},
		},
	}
}

// item is an example source of item.
func item(name string) v1alpha1.Source {
	return v1alpha1.Source{Example: &v1alpha1.ExampleSource{Item: name}}
}

// TestExamplePublishes: an example source through an example provider is
// admitted, resolved by the example provider with the row's connection
// (its catalog), and published; a change in the catalog is published too.
// The provider's status says its kind, from the same table.
func TestExamplePublishes(t *testing.T) {
	t.Parallel()
	ns := framework.Namespace(t)
	provider := "example-" + ns
	createProvider(t, exampleProvider(provider, "catalog-"+ns, []string{ns}, "db"))
	catalogs.Set("catalog-"+ns, "db", "192.0.2.41", "2001:db8::41")
	xb := backend(ns, provider, item("db"))
	framework.Create(t, xb)

	framework.WaitReady(t, xb)
	framework.WaitAddresses(t, ns, xb.Name, framework.Served("192.0.2.41", "2001:db8::41")...)
	if catalogs.Asked(ns) == 0 {
		t.Fatal("published, but the example provider was never asked")
	}
	catalogs.Set("catalog-"+ns, "db", "192.0.2.42")
	framework.WaitAddresses(t, ns, xb.Name, "192.0.2.42")

	framework.Eventually(t, framework.Timeout, "the provider's status says its kind and Ready", func() error {
		bp := &v1alpha1.BackendProvider{}
		if err := framework.E().Client.Get(context.Background(), client.ObjectKey{Name: provider}, bp); err != nil {
			return err
		}
		ready := meta.FindStatusCondition(bp.Status.Conditions, v1alpha1.ConditionReady)
		if bp.Status.Kind != "example" || ready == nil || ready.Status != metav1.ConditionTrue {
			return fmt.Errorf("status kind %q, Ready %+v", bp.Status.Kind, ready)
		}
		return nil
	})
}

// TestExampleRefusals: the table's rows decide admission. An example
// source through a static provider and a static source through an example
// provider are refused by kind, naming the kinds the table gives; an item
// the provider does not list is refused by the row's own rule; a namespace
// the provider does not admit is refused as for every kind. Refused
// sources publish nothing and ask the example provider nothing.
func TestExampleRefusals(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		// setup creates the provider of namespace ns and returns its name
		// and the backend's source.
		setup func(t *testing.T, ns string) (string, v1alpha1.Source)
		says  []string
	}{
		{"example through static", func(t *testing.T, ns string) (string, v1alpha1.Source) {
			createProvider(t, &v1alpha1.BackendProvider{ObjectMeta: metav1.ObjectMeta{Name: "static-" + ns}, Spec: v1alpha1.BackendProviderSpec{
				Static: &v1alpha1.StaticProvider{}, AllowedCIDRs: []string{"192.0.2.0/24"},
				Namespaces: v1alpha1.NamespaceSelection{Names: []string{ns}}}})
			return "static-" + ns, item("db")
		}, []string{"is of kind static and cannot serve example sources; name a BackendProvider of kind example"}},
		{"static through example", func(t *testing.T, ns string) (string, v1alpha1.Source) {
			createProvider(t, exampleProvider("example-"+ns, "catalog-"+ns, []string{ns}))
			return "example-" + ns, v1alpha1.Source{Static: &v1alpha1.StaticSource{Endpoints: []v1alpha1.StaticEndpoint{{Address: "192.0.2.43"}}}}
		}, []string{"is of kind example and cannot serve static sources; name a BackendProvider of kind static"}},
		{"item not listed", func(t *testing.T, ns string) (string, v1alpha1.Source) {
			createProvider(t, exampleProvider("example-"+ns, "catalog-"+ns, []string{ns}, "another"))
			return "example-" + ns, item("db")
		}, []string{`spec.sources[items].example.item: "db" is not among the items BackendProvider`, examplekind.RuleAllowedItems}},
		{"namespace not admitted", func(t *testing.T, ns string) (string, v1alpha1.Source) {
			createProvider(t, exampleProvider("example-"+ns, "catalog-"+ns, nil))
			return "example-" + ns, item("db")
		}, []string{"is not admitted to BackendProvider"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ns := framework.Namespace(t)
			provider, src := c.setup(t, ns)
			catalogs.Set("catalog-"+ns, "db", "192.0.2.43")
			xb := backend(ns, provider, src)
			framework.Create(t, xb)
			waitRefused(t, xb, c.says...)
			if got := framework.Slices(t, ns, xb.Name); len(got) != 0 {
				t.Errorf("a refused source published %d slice(s)", len(got))
			}
			if n := catalogs.Asked(ns); n != 0 {
				t.Errorf("the example provider was asked %d time(s) for a refused source", n)
			}
		})
	}
}

// TestShippedCRDsRefuseTheExampleKind: the CRDs a release installs (the
// ones the binary embeds, checked by the API server's own admission code)
// refuse the made-up kind's fields, naming them.
func TestShippedCRDsRefuseTheExampleKind(t *testing.T) {
	c, err := admission.New(crd.ExternalBackendYAML, crd.BackendProviderYAML)
	if err != nil {
		t.Fatal(err)
	}
	xb := backend("team", "example", item("db"))
	xb.TypeMeta = metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "ExternalBackend"}
	bp := exampleProvider("example", "main", []string{"team"})
	bp.TypeMeta = metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "BackendProvider"}
	for _, tc := range []struct {
		obj  client.Object
		says string
	}{
		{xb, "spec.sources[].example: a made-up kind of backendslice's own tests, which no release serves"},
		{bp, "spec.example: a made-up kind of backendslice's own tests, which no release serves"},
	} {
		data, err := json.Marshal(tc.obj)
		if err != nil {
			t.Fatal(err)
		}
		res := c.Create(context.Background(), data, "team")
		if res.Err == nil || !strings.Contains(res.Err.Error(), tc.says) {
			t.Errorf("the shipped CRDs on %T: %v, want a refusal saying %q", tc.obj, res.Err, tc.says)
		}
	}
}

// waitRefused waits until Resolved and Ready are False with reason
// ProviderNotAdmitted for xb's generation, their messages holding parts.
func waitRefused(t *testing.T, xb *v1alpha1.ExternalBackend, parts ...string) {
	t.Helper()
	framework.Eventually(t, framework.Timeout, fmt.Sprintf("%s/%s refused saying %q", xb.Namespace, xb.Name, parts), func() error {
		cur := framework.Get(t, xb)
		for _, typ := range []string{v1alpha1.ConditionResolved, v1alpha1.ConditionReady} {
			c := meta.FindStatusCondition(cur.Status.Conditions, typ)
			switch {
			case c == nil:
				return fmt.Errorf("no %s condition yet", typ)
			case c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonProviderNotAdmitted || c.ObservedGeneration != cur.Generation:
				return fmt.Errorf("%s is %s/%s (generation %d of %d): %s", typ, c.Status, c.Reason, c.ObservedGeneration, cur.Generation, c.Message)
			}
			for _, p := range parts {
				if !strings.Contains(c.Message, p) {
					return fmt.Errorf("%s message %q lacks %q", typ, c.Message, p)
				}
			}
		}
		return nil
	})
}
