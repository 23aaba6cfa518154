package consul_test

import (
	"fmt"
	"testing"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/consultest"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// TestWatchesReleased gives four backends a Consul watch each, then takes
// it away four ways: the source turned into a static one, the backend
// suspended, its spec made invalid, the backend deleted. Every watch must
// stop: the count goes back to what it was. It is not parallel, so that no
// other test starts or stops a watch meanwhile.
func TestWatchesReleased(t *testing.T) {
	ns := framework.Namespace(t)
	before := provider.Watches()
	var xbs []*v1alpha1.ExternalBackend
	for i := range 4 {
		service := fmt.Sprintf("released-%d-%s", i, ns)
		register(t, consultest.Service{Name: service, Address: fmt.Sprintf("192.0.2.%d", 80+i)})
		xb := newBackend(ns, fmt.Sprintf("db%d", i), catalog(service))
		if i == 2 {
			// A name that is no Service name: valid while spec.service.name is set.
			xb.Name, xb.Spec.Service.Name = "db.2", "db2"
		}
		framework.Create(t, xb)
		xbs = append(xbs, xb)
	}
	for _, xb := range xbs {
		framework.WaitReady(t, xb)
	}
	if n := provider.Watches() - before; n != 4 {
		t.Fatalf("%d watches for four backends on four services, want 4", n)
	}

	edits := []func(*v1alpha1.ExternalBackend){
		func(xb *v1alpha1.ExternalBackend) {
			xb.Spec.Sources[0] = v1alpha1.Source{Name: "catalog", Static: &v1alpha1.StaticSource{
				Endpoints: []v1alpha1.StaticEndpoint{{Address: "192.0.2.90"}}}}
		},
		func(xb *v1alpha1.ExternalBackend) { xb.Spec.Suspend = true },
		func(xb *v1alpha1.ExternalBackend) { xb.Spec.Service.Name = "" },
	}
	for i, edit := range edits {
		if err := framework.Update(t, xbs[i], edit); err != nil {
			t.Fatal(err)
		}
	}
	if err := framework.E().Client.Delete(t.Context(), xbs[3]); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, framework.Timeout, "watches released", func() error {
		if n := provider.Watches() - before; n != 0 {
			return fmt.Errorf("%d watches still running", n)
		}
		return nil
	})
}
