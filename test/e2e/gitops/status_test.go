package gitops

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// backend is an ExternalBackend with one source and a port.
func backend(ns, name string, src v1alpha1.Source) *v1alpha1.ExternalBackend {
	return &v1alpha1.ExternalBackend{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1alpha1.ExternalBackendSpec{
			Service: v1alpha1.ServiceSpec{Ports: []v1alpha1.ServicePort{{Name: "https", Port: 443}}},
			Sources: []v1alpha1.Source{src},
		},
	}
}

// staticSource lists fixed addresses.
func staticSource(addrs ...string) v1alpha1.Source {
	src := v1alpha1.Source{Name: "vms", Static: &v1alpha1.StaticSource{}}
	for _, a := range addrs {
		src.Static.Endpoints = append(src.Static.Endpoints, v1alpha1.StaticEndpoint{Address: a})
	}
	return src
}

// TestKStatusAndHealthOfLiveBackends holds health.lua and kstatus to the
// objects the controller really writes, in each state it can reach with the
// static provider alone.
func TestKStatusAndHealthOfLiveBackends(t *testing.T) {
	t.Run("ready", func(t *testing.T) {
		xb := backend(framework.Namespace(t), "web", staticSource("192.0.2.10"))
		framework.Create(t, xb)
		framework.WaitReady(t, xb)
		judge(t, xb, "Healthy", status.CurrentStatus)
	})

	t.Run("provider not available", func(t *testing.T) {
		xb := backend(framework.Namespace(t), "search", v1alpha1.Source{Name: "vendor", DNS: &v1alpha1.DNSSource{Name: "search.example.com"}})
		framework.Create(t, xb)
		framework.WaitCondition(t, xb, v1alpha1.ConditionStalled, metav1.ConditionTrue, v1alpha1.ReasonProviderNotAvailable)
		judge(t, xb, "Degraded", status.FailedStatus)
	})

	t.Run("service conflict", func(t *testing.T) {
		ns := framework.Namespace(t)
		framework.Create(t, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: ns},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
		})
		xb := backend(ns, "orders", staticSource("192.0.2.20"))
		framework.Create(t, xb)
		framework.WaitCondition(t, xb, v1alpha1.ConditionStalled, metav1.ConditionTrue, v1alpha1.ReasonServiceConflict)
		judge(t, xb, "Degraded", status.FailedStatus)
	})

	t.Run("write failing on a new generation then recovering", func(t *testing.T) {
		ns := framework.Namespace(t)
		xb := backend(ns, "cart", staticSource("192.0.2.30"))
		framework.Create(t, xb)
		framework.WaitReady(t, xb)

		// A quota of no EndpointSlices makes the API server refuse the second
		// slice the spec change needs (one endpoint per slice): a failure
		// the controller retries.
		quota := noSlices(t, ns)
		if err := framework.Update(t, xb, func(xb *v1alpha1.ExternalBackend) {
			xb.Spec.MaxEndpointsPerSlice = ptr.To[int32](1)
			xb.Spec.Sources[0].Static.Endpoints = append(xb.Spec.Sources[0].Static.Endpoints, v1alpha1.StaticEndpoint{Address: "192.0.2.31"})
		}); err != nil {
			t.Fatal(err)
		}
		framework.WaitCondition(t, xb, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonWriteFailed)
		msg := judge(t, xb, "Degraded", status.InProgressStatus)
		if !strings.Contains(msg, "generation is 2, but latest observed generation is 1") {
			t.Errorf("kstatus says %q; want it to wait for generation 2", msg)
		}

		if err := framework.E().Client.Delete(context.Background(), quota); err != nil {
			t.Fatal(err)
		}
		framework.WaitReady(t, xb)
		judge(t, xb, "Healthy", status.CurrentStatus)
	})

	t.Run("suspended", func(t *testing.T) {
		xb := backend(framework.Namespace(t), "batch", staticSource("192.0.2.40"))
		framework.Create(t, xb)
		framework.WaitReady(t, xb)
		if err := framework.Update(t, xb, func(xb *v1alpha1.ExternalBackend) { xb.Spec.Suspend = true }); err != nil {
			t.Fatal(err)
		}
		framework.WaitCondition(t, xb, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonSuspended)
		judge(t, xb, "Suspended", status.CurrentStatus)
	})
}

// noSlices makes the API server refuse new EndpointSlices in ns with a
// quota of none, and returns the quota. Admission enforces what the quota's
// status says, and no quota controller runs here to write it, so the test
// does.
func noSlices(t *testing.T, ns string) *corev1.ResourceQuota {
	t.Helper()
	none := corev1.ResourceList{corev1.ResourceName("count/endpointslices.discovery.k8s.io"): resource.MustParse("0")}
	quota := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "no-slices", Namespace: ns},
		Spec:       corev1.ResourceQuotaSpec{Hard: none},
	}
	framework.Create(t, quota)
	quota.Status = corev1.ResourceQuotaStatus{Hard: none, Used: none}
	if err := framework.E().Client.Status().Update(context.Background(), quota); err != nil {
		t.Fatal(err)
	}
	waitSlicesRefused(t, ns)
	return quota
}

// waitSlicesRefused waits until the API server's quota admission, which
// learns of new quotas through an informer, refuses EndpointSlices in ns.
func waitSlicesRefused(t *testing.T, ns string) {
	t.Helper()
	probe := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{GenerateName: "probe-", Namespace: ns},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	framework.Eventually(t, framework.Timeout, "quota refusing EndpointSlices", func() error {
		err := framework.E().Client.Create(context.Background(), probe.DeepCopy(), client.DryRunAll)
		switch {
		case err == nil:
			return errors.New("a dry-run create of an EndpointSlice is still accepted")
		case !apierrors.IsForbidden(err):
			return fmt.Errorf("a dry-run create of an EndpointSlice: %w; want it forbidden by the quota", err)
		}
		return nil
	})
}
