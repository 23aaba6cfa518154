package examplekind_test

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/providers/providertest"
	"github.com/backendslice/backendslice/test/examplekind"
)

// through is a request for an example source of item through the example
// BackendProvider of catalog.
func through(catalog, item string) providers.Request {
	req := providertest.NewRequest(v1alpha1.Source{Name: item, ProviderRef: &v1alpha1.ProviderReference{Name: "shop"},
		Example: &v1alpha1.ExampleSource{Item: item}})
	req.Connection = &providers.Connection{Name: "shop", Key: "v1", Settings: &examplekind.Settings{Catalog: catalog}}
	return req
}

// TestConformance: the example kind's provider passes the suite every
// kind passes.
func TestConformance(t *testing.T) {
	catalogs := examplekind.NewCatalogs()
	catalogs.Set("shop", "db", "192.0.2.51", "2001:db8::51")
	providertest.Run(t, providertest.Harness{
		Kind:     examplekind.Kind,
		Kinds:    examplekind.Kinds(),
		Provider: examplekind.New(catalogs),
		Good: func(*testing.T) []providertest.Case {
			return []providertest.Case{{Name: "db", Request: through("shop", "db"),
				Want: []providers.Endpoint{{Address: "192.0.2.51", Serving: true}, {Address: "2001:db8::51", Serving: true}}}}
		},
		Missing: func(*testing.T) providertest.MissingCase {
			return providertest.MissingCase{Request: through("shop", "gone"),
				Fail: &providertest.Failure{Terminal: true, Gone: true, Reason: v1alpha1.ReasonBackendNotFound,
					MessageContains: []string{`catalog "shop" has no item "gone"`}}}
		},
		Broken: func(*testing.T) []providertest.FailCase {
			noProvider := through("shop", "db")
			noProvider.Connection = nil
			return []providertest.FailCase{
				{Name: "another kind", Request: providertest.NewRequest(v1alpha1.Source{Name: "s", Static: &v1alpha1.StaticSource{}}),
					Failure: providertest.Failure{Terminal: true, Reason: v1alpha1.ReasonInvalidSpec, MessageContains: []string{"spec.sources[s]"}}},
				{Name: "no provider", Request: noProvider,
					Failure: providertest.Failure{Terminal: true, Reason: v1alpha1.ReasonProviderNotAvailable, MessageContains: []string{"spec.sources[db].providerRef"}}},
			}
		},
	})
}

// TestRow: the row claims example sources and BackendProviders, connects
// to the provider's catalog, and admits only the items it lists.
func TestRow(t *testing.T) {
	kinds := examplekind.Kinds()
	bp := &v1alpha1.BackendProvider{ObjectMeta: metav1.ObjectMeta{Name: "shop", UID: "uid", Generation: 1},
		Spec: v1alpha1.BackendProviderSpec{Example: &v1alpha1.ExampleProvider{Catalog: "main", AllowedItems: []string{"db"}}}}
	conn, err := kinds.Connect(context.Background(), bp, nil)
	if s, ok := providers.SettingsOf[*examplekind.Settings](conn); err != nil || !ok || s.Catalog != "main" || conn.Name != "shop" {
		t.Errorf("Connect = %+v, %v", conn, err)
	}
	if got := kinds.ProviderKindOf(bp); got != "example" {
		t.Errorf("ProviderKindOf = %q", got)
	}
	row := kinds.Of(v1alpha1.Source{Example: &v1alpha1.ExampleSource{}})
	if row == nil || row.Kind != examplekind.Kind {
		t.Fatalf("row %+v", row)
	}
	if d := row.Admit(bp, v1alpha1.Source{Name: "s", Example: &v1alpha1.ExampleSource{Item: "db"}}); d != nil {
		t.Errorf("a listed item refused: %+v", d)
	}
	d := row.Admit(bp, v1alpha1.Source{Name: "s", Example: &v1alpha1.ExampleSource{Item: "cache"}})
	want := `spec.sources[s].example.item: "cache" is not among the items BackendProvider "shop" serves (spec.example.allowedItems [db])`
	if d == nil || d.Rule != examplekind.RuleAllowedItems || d.Message != want {
		t.Errorf("an unlisted item: %+v, want %q", d, want)
	}
}
