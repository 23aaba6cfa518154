// Package kinds_test adds a made-up source kind to the controller and runs
// it end to end on a real API server: admitted, refused, resolved and
// published, with no line of the controller changed.
//
// The made-up kind is "example" (test/examplekind): a catalog of items'
// addresses. It is built as a kind of the binary is, and is one: a package
// of its own that exports its rows and its provider, and its fields in the
// API (spec.sources[].example, BackendProvider spec.example). The shipped
// CRDs refuse those fields, so that no release serves a made-up kind; the
// test installs them without the two rules that refuse them, and checks
// that the shipped ones do refuse them.
package kinds_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/cmd/backendslice/wiring"
	"github.com/backendslice/backendslice/controllers"
	"github.com/backendslice/backendslice/providers/static"
	"github.com/backendslice/backendslice/test/e2e/framework"
	"github.com/backendslice/backendslice/test/examplekind"
)

// catalogs are the example catalogs the controller's example provider reads.
var catalogs = examplekind.NewCatalogs()

// exampleRefusal is the rule of the shipped CRDs that refuses the example
// kind's fields.
const exampleRefusal = "!has(self.example)"

func TestMain(m *testing.M) { os.Exit(run(m)) }

// run starts the control plane, lets its CRDs take the example kind, then
// starts the controller as controllers.NewManager wires it for the
// binary, with a registry of the binary's table and the example kind.
func run(m *testing.M) int {
	// stop stops the controller, once it started.
	var stop func()
	return framework.Run(m, framework.Options{
		ControlPlaneOnly: true,
		Started: func(e *framework.Env) error {
			if err := admitExampleKind(e.Client); err != nil {
				return err
			}
			kinds := slices.Concat(wiring.Kinds(), examplekind.Kinds())
			reg, err := kinds.NewRegistry(static.New(), examplekind.New(catalogs))
			if err != nil {
				return err
			}
			cfg := framework.TestConfig()
			// As the chart installs it: sources must name a provider.
			cfg.AllowSourcesWithoutProvider = false
			cfg.SoleWriter = true
			mgr, err := controllers.NewManager(e.Config(), controllers.ManagerOptions{
				MetricsBindAddress:     "0",
				HealthProbeBindAddress: "0",
				Providers:              reg,
				Config:                 cfg,
			})
			if err != nil {
				return err
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- mgr.Start(ctx) }()
			stop = func() {
				cancel()
				if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
					fmt.Fprintln(os.Stderr, "stopping the controller:", err)
				}
			}
			return nil
		},
		Stopping: func() {
			if stop != nil {
				stop()
			}
		},
	})
}

// admitExampleKind removes the rule that refuses the example kind's field
// from both installed CRDs, once each, and waits until the API server
// serves the new schemas.
func admitExampleKind(c client.Client) error {
	ctx := context.Background()
	for _, name := range []string{"externalbackends.backendslice.io", "backendproviders.backendslice.io"} {
		crd := &unstructured.Unstructured{}
		crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
		if err := c.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
			return err
		}
		if n := dropRule(crd.Object, exampleRefusal); n != 1 {
			return fmt.Errorf("CRD %s has the rule %q %d times, want once", name, exampleRefusal, n)
		}
		if err := c.Update(ctx, crd); err != nil {
			return fmt.Errorf("updating CRD %s: %w", name, err)
		}
	}
	// The schema applies to creates once the API server has rebuilt its
	// handler: a dry run tells.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := c.Create(ctx, exampleProvider("dry-run", "dry-run", nil), client.DryRunAll)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the API server still refuses the example kind: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// dropRule removes every x-kubernetes-validations entry whose rule is
// rule from the schema under v, and says how many it removed.
func dropRule(v any, rule string) int {
	n := 0
	switch v := v.(type) {
	case map[string]any:
		if rules, ok := v["x-kubernetes-validations"].([]any); ok {
			kept := slices.DeleteFunc(slices.Clone(rules), func(r any) bool {
				m, _ := r.(map[string]any)
				return m["rule"] == rule
			})
			n += len(rules) - len(kept)
			v["x-kubernetes-validations"] = kept
			if len(kept) == 0 {
				delete(v, "x-kubernetes-validations")
			}
		}
		for _, child := range v {
			n += dropRule(child, rule)
		}
	case []any:
		for _, child := range v {
			n += dropRule(child, rule)
		}
	}
	return n
}
