package migration_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/test/e2e/framework"
	"github.com/backendslice/backendslice/test/netlab"
)

// mirrorManagedBy is the managed-by label of the slices
// kube-controller-manager mirrors from an Endpoints object.
const mirrorManagedBy = "endpointslicemirroring-controller.k8s.io"

// controllersWork waits until kube-controller-manager's two controllers do
// their part, in a namespace of their own: the mirror makes a slice of an
// Endpoints object and removes it with the object, and the garbage
// collector orphans a dependent when its owner is deleted so. It has no
// health endpoint (no serving port), and a controller that runs but has
// not synced would fail the migrations in a way that looks like ours.
func controllersWork(ctx context.Context, e *framework.Env, kcm *netlab.Process) error {
	const ns = "kcm-check"
	c := e.Client
	steps := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mirrored"},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "echo", Port: 80}}},
		},
		// 192.0.2.250 is no host of the lab: kube-proxy programs it, and
		// nothing connects to it.
		endpointsOf(ns, "mirrored", "192.0.2.250"),
	}
	for _, o := range steps {
		if err := c.Create(ctx, o); err != nil {
			return fmt.Errorf("kube-controller-manager check: creating %s: %w", o.GetName(), err)
		}
	}
	mirrored := func(want bool) func() error {
		return func() error {
			n, err := countSlices(ctx, c, ns, "mirrored", mirrorManagedBy)
			if err == nil && (n > 0) != want {
				err = fmt.Errorf("%d mirrored slice(s) of Endpoints %s/mirrored", n, ns)
			}
			return err
		}
	}
	if err := until(ctx, kcm, "the EndpointSlice mirror makes a slice of an Endpoints object", mirrored(true)); err != nil {
		return err
	}
	if err := c.Delete(ctx, endpointsOf(ns, "mirrored")); err != nil {
		return err
	}
	if err := until(ctx, kcm, "the EndpointSlice mirror removes its slice with the Endpoints object", mirrored(false)); err != nil {
		return err
	}
	return orphans(ctx, c, ns, kcm)
}

// orphans deletes a ConfigMap with orphan propagation and waits until the
// garbage collector has let it go and left its dependent without it.
func orphans(ctx context.Context, c client.Client, ns string, kcm *netlab.Process) error {
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "owner"}}
	if err := c.Create(ctx, owner); err != nil {
		return err
	}
	dependent := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "dependent", OwnerReferences: []metav1.OwnerReference{{
		APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, Controller: ptr.To(true),
	}}}}
	if err := c.Create(ctx, dependent); err != nil {
		return err
	}
	if err := c.Delete(ctx, owner, client.PropagationPolicy(metav1.DeletePropagationOrphan)); err != nil {
		return err
	}
	return until(ctx, kcm, "the garbage collector orphans a dependent", func() error {
		err := c.Get(ctx, client.ObjectKeyFromObject(owner), owner)
		if err == nil {
			return fmt.Errorf("ConfigMap %s still there (finalizers %v)", owner.Name, owner.Finalizers)
		}
		if !apierrors.IsNotFound(err) {
			return err
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(dependent), dependent); err != nil {
			return fmt.Errorf("the dependent: %w", err)
		}
		if len(dependent.OwnerReferences) > 0 {
			return fmt.Errorf("the dependent still names %v", dependent.OwnerReferences)
		}
		return nil
	})
}

// until polls check until it returns nil; it fails when ctx ends or
// kube-controller-manager exits first.
func until(ctx context.Context, kcm *netlab.Process, what string, check func() error) error {
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-kcm.Exited():
			return fmt.Errorf("kube-controller-manager ended before %s: %w", what, errors.Join(kcm.Err(), err))
		case <-ctx.Done():
			return fmt.Errorf("kube-controller-manager: %s did not happen: %w", what, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// countSlices counts the slices of Service svc in ns managed by managedBy.
func countSlices(ctx context.Context, c client.Client, ns, svc, managedBy string) (int, error) {
	var list discoveryv1.EndpointSliceList
	err := c.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{
		discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: managedBy,
	})
	return len(list.Items), err
}

// endpointsOf is a legacy Endpoints object of Service svc in ns with addrs
// ready on port echo (the hosts' echoPort).
func endpointsOf(ns, svc string, addrs ...string) *corev1.Endpoints { //nolint:staticcheck // the legacy object a migration retires
	ep := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: svc}} //nolint:staticcheck // as above
	if len(addrs) == 0 {
		return ep
	}
	sub := corev1.EndpointSubset{Ports: []corev1.EndpointPort{{Name: portName, Port: echoPort, Protocol: corev1.ProtocolTCP}}} //nolint:staticcheck // as above
	for _, a := range addrs {
		sub.Addresses = append(sub.Addresses, corev1.EndpointAddress{IP: a})
	}
	ep.Subsets = []corev1.EndpointSubset{sub} //nolint:staticcheck // as above
	return ep
}
