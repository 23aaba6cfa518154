package tenancy_test

import (
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// quiet is how long TestQuietOnceSettled watches a settled install.
const quiet = 3 * time.Second

// TestQuietOnceSettled: once an admitted and a refused backend have
// settled, nothing loops. Over a quiet window the controller writes no
// Service or slice, rewrites no status (of the backends or the provider),
// and reconciles at most a couple of times. It runs alone (not parallel),
// so that the counters are this test's.
func TestQuietOnceSettled(t *testing.T) {
	admitted := newNamespace(t, "quiet-admitted", nil)
	refused := newNamespace(t, "quiet-refused", nil)
	provider := uniqueName(admitted, "static")
	createProvider(t, provider, admits("", admitted), staticSpec("192.0.2.0/24"))
	good := backend(admitted, "db", nil, staticSource(provider, "192.0.2.90", "192.0.2.91"))
	bad := backend(refused, "db", nil, staticSource(provider, "192.0.2.92"))
	framework.Create(t, good)
	framework.Create(t, bad)
	waitStates(t, admitted, "db", statesOf(ready, "192.0.2.90", "192.0.2.91"))
	waitRefused(t, bad, "namespace "+refused+" is not admitted")
	framework.WaitReady(t, good)
	// Let the last status patches and their echoes pass.
	time.Sleep(time.Second)

	// versions are the resourceVersions of both backends and the provider:
	// a status rewrite changes them.
	versions := func() []string {
		bp := &v1alpha1.BackendProvider{}
		if err := k8s.Get(ctx, client.ObjectKey{Name: provider}, bp); err != nil {
			t.Fatal(err)
		}
		return []string{framework.Get(t, good).ResourceVersion, framework.Get(t, bad).ResourceVersion, bp.ResourceVersion}
	}
	reconciles := func() float64 {
		n, _ := framework.MetricValue(t, "backendslice_reconciles_total", nil)
		return n
	}
	before, r0 := versions(), reconciles()
	w0 := framework.Writes(t, "Service") + framework.Writes(t, "EndpointSlice")
	time.Sleep(quiet)
	after, r1 := versions(), reconciles()
	w1 := framework.Writes(t, "Service") + framework.Writes(t, "EndpointSlice")
	t.Logf("in %s of quiet: %v reconciles, %v writes", quiet, r1-r0, w1-w0)
	if w1 != w0 {
		t.Errorf("%v Service and slice write(s) in %s of quiet", w1-w0, quiet)
	}
	if r1-r0 > 2 {
		t.Errorf("%v reconciles in %s of quiet, want at most 2", r1-r0, quiet)
	}
	for i, what := range []string{"the admitted backend", "the refused backend", "the BackendProvider"} {
		if before[i] != after[i] {
			t.Errorf("%s was rewritten in %s of quiet (resourceVersion %s -> %s)", what, quiet, before[i], after[i])
		}
	}
}
