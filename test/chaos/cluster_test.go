package chaos_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/e2e/framework"
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
		if err := emptyNamespace(ns); err != nil {
			t.Errorf("cleaning namespace %s: %v", ns, err)
		}
		env.world.forget(ns)
	})
	return ns
}

// emptyNamespace deletes every ExternalBackend, Service and EndpointSlice
// of ns. envtest runs no garbage collector (nor namespace controller), so
// owner references delete nothing and the namespace itself stays.
func emptyNamespace(ns string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := framework.E().Client
	for _, obj := range []client.Object{&v1alpha1.ExternalBackend{}, &corev1.Service{}, &discoveryv1.EndpointSlice{}, &corev1.ConfigMap{}} {
		if err := c.DeleteAllOf(ctx, obj, client.InNamespace(ns)); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting %T: %w", obj, err)
		}
	}
	return nil
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
