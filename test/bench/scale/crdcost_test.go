//go:build bench

package scale

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/backendslice/backendslice/config/crd"
	"github.com/backendslice/backendslice/test/controlplane"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// crdBefore is an ExternalBackend CRD to compare the current one with
// (TestCRDRulesCost), for example one from another commit:
// git show main:config/crd/bases/backendslice.io_externalbackends.yaml.
// Without it the test compares with the CRD of rulesBefore.
var crdBefore = flag.String("crdbefore", "", "TestCRDRulesCost: the ExternalBackend CRD to compare the current one with (default: the CRD before the per-endpoint rules were made cheaper, from git)")

// rulesBefore is the commit before the per-endpoint CEL rules were made
// cheaper: the CRD TestCRDRulesCost compares with when not given one.
const rulesBefore = "0a46f1422a9dea3f59658a5d544f0ed5d718dec8"

// crdToCompare reads -crdbefore, or the CRD of rulesBefore from git.
func crdToCompare() ([]byte, error) {
	if *crdBefore != "" {
		return os.ReadFile(*crdBefore)
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("git", "show", rulesBefore+":config/crd/bases/backendslice.io_externalbackends.yaml")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("reading the CRD of %s from git (a shallow clone lacks it: pass -crdbefore=FILE): %w", rulesBefore, err)
	}
	return out, nil
}

// crdRounds is how many rounds of 3 status patches TestCRDRulesCost makes
// of each CRD's backend.
var crdRounds = flag.Int("crdrounds", 5, "TestCRDRulesCost: rounds of 3 status patches per CRD")

// TestCRDRulesCost measures what the CRD's rules cost the API server, side
// by side: it installs the CRD of -crdbefore as group old.backendslice.io
// and the current one as new.backendslice.io, creates scenario a's backend
// of 10,000 endpoints under each, then patches their status in alternating
// rounds while no controller runs, and logs the API server's CPU per
// create and per patch. Run it alone:
// go test -tags bench -run TestCRDRulesCost ./test/bench/scale [-args -crdbefore=FILE].
func TestCRDRulesCost(t *testing.T) {
	ctx := context.Background()
	c := framework.E().Client
	old, err := crdToCompare()
	if err != nil {
		t.Fatal(err)
	}
	groups := []string{"old.backendslice.io", "new.backendslice.io"}
	docs := [][]byte{old, crd.ExternalBackendYAML}
	scheme := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	cc, err := client.New(framework.E().Config(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range groups {
		var def apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(docs[i], &def); err != nil {
			t.Fatal(err)
		}
		def.Name = "externalbackends." + g
		def.Spec.Group = g
		def.Spec.Names.ShortNames = nil
		def.Spec.Names.Categories = nil
		if err := cc.Create(ctx, &def); err != nil {
			t.Fatal(err)
		}
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			var got apiextensionsv1.CustomResourceDefinition
			if err := cc.Get(ctx, client.ObjectKey{Name: def.Name}, &got); err != nil {
				return false, err
			}
			for _, cond := range got.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	ns := namespace(t, "crd-compare")
	rounds := *crdRounds
	framework.RestartControllerAfter(t, func() {
		objs := make([]*unstructured.Unstructured, len(groups))
		create := make([]time.Duration, len(groups))
		for i, g := range groups {
			xb := scenarios[0].backends(ns, false)[0]
			raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(xb)
			if err != nil {
				t.Fatal(err)
			}
			u := &unstructured.Unstructured{Object: raw}
			u.SetAPIVersion(g + "/v1alpha1")
			u.SetKind("ExternalBackend")
			delete(u.Object, "status")
			before := serverCPU(t)
			if err := c.Create(ctx, u); err != nil {
				t.Fatal(err)
			}
			create[i] = serverCPU(t).minus(before).apiserver
			objs[i] = u
		}
		cpu := make([]time.Duration, len(groups))
		n := 0
		for r := range rounds {
			for i := range groups {
				before := serverCPU(t)
				for k := range 3 {
					patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"status":{"slices":%d}}`, r*3+k+1))
					if err := c.Status().Patch(ctx, objs[i], patch); err != nil {
						t.Fatal(err)
					}
				}
				cpu[i] += serverCPU(t).minus(before).apiserver
			}
			n += 3
		}
		var b strings.Builder
		for i, g := range groups {
			fmt.Fprintf(&b, "%s: create %s, status patch %s (of %d)\n", g, create[i], cpu[i]/time.Duration(n), n)
		}
		t.Log("\n" + b.String())
	})
}
