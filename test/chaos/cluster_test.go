package chaos_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/test/e2e/framework"
	"github.com/backendslice/backendslice/test/replica"
)

// namespace creates a namespace for t whose backends, Services and slices
// are removed when t ends, after its controllers are killed (cleanups run
// last-registered first, and replicas are made after this), so that the
// next test's controller does not reconcile them.
func namespace(t *testing.T) string {
	t.Helper()
	requireSetUp(t)
	ns := framework.Namespace(t)
	t.Cleanup(func() {
		if err := replica.EmptyNamespace(ns); err != nil {
			t.Errorf("cleaning namespace %s: %v", ns, err)
		}
		env.world.forget(ns)
	})
	return ns
}

// deleteService deletes a Service and then, as the garbage collector of a
// real cluster would moments later, the slices it controls: envtest runs
// none, and slices left behind would be orphans that no controller is
// meant to remove.
func deleteService(ctx context.Context, svc *corev1.Service) error {
	c := framework.E().Client
	if err := c.Delete(ctx, svc, client.Preconditions{UID: &svc.UID}); err != nil {
		return err
	}
	var list discoveryv1.EndpointSliceList
	if err := c.List(ctx, &list, client.InNamespace(svc.Namespace)); err != nil {
		return err
	}
	for i := range list.Items {
		s := &list.Items[i]
		if ref := metav1.GetControllerOf(s); ref != nil && ref.UID == svc.UID {
			if err := c.Delete(ctx, s, client.Preconditions{UID: &s.UID}); client.IgnoreNotFound(err) != nil {
				return err
			}
		}
	}
	return nil
}
