package gitops

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// trackingLabel is Argo CD's resource tracking label (the default before
// Argo CD 3.0, which tracks with the argocd.argoproj.io/tracking-id annotation).
const trackingLabel = "app.kubernetes.io/instance"

// argoManifest is an ExternalBackend as it sits in Git, with what Argo CD
// adds when it syncs it: its tracking label and annotation. CRD defaults
// (addressTypes, protocol, health) are left out, as people write them.
const argoManifest = `
apiVersion: backendslice.io/v1alpha1
kind: ExternalBackend
metadata:
  name: orders-db
  namespace: %[1]s
  labels:
    app.kubernetes.io/instance: payments-backends
    team: payments
  annotations:
    argocd.argoproj.io/tracking-id: payments-backends:backendslice.io/ExternalBackend:%[1]s/orders-db
    argocd.argoproj.io/sync-wave: "1"
spec:
  service:
    ports:
      - {name: pg, port: 5432, targetPort: 15432}
    labels: {team: payments}
    annotations: {owner: payments-dba}
  sources:
    - name: vms
      static:
        endpoints:
          - {address: 192.0.2.50, zone: eu-west-1a}
          - {address: 2001:db8::50, zone: eu-west-1b}
`

// argoApply applies the manifest with server-side apply as Argo CD does with
// ServerSideApply=true: its own field manager, taking over conflicting fields.
func argoApply(t *testing.T, ns string, opts ...client.ApplyOption) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(fmt.Appendf(nil, argoManifest, ns), &u.Object); err != nil {
		t.Fatal(err)
	}
	opts = append(opts, client.FieldOwner("argocd-controller"), client.ForceOwnership)
	if err := framework.E().Client.Apply(context.Background(), client.ApplyConfigurationFromUnstructured(u), opts...); err != nil {
		t.Fatalf("server-side apply: %v", err)
	}
	return u
}

// TestHealthyAfterServerSideApplyShowsNoDiff syncs an ExternalBackend as Argo
// CD does, and checks what Argo CD then sees: Healthy, children owned by it
// and untracked, and a dry-run apply of the same manifest that changes
// nothing, so the Application stays Synced.
func TestHealthyAfterServerSideApplyShowsNoDiff(t *testing.T) {
	ns := framework.Namespace(t)
	argoApply(t, ns)
	xb := &v1alpha1.ExternalBackend{ObjectMeta: metav1.ObjectMeta{Name: "orders-db", Namespace: ns}}
	cur := framework.WaitReady(t, xb)
	framework.WaitAddresses(t, ns, "orders-db", framework.Served("192.0.2.50", "2001:db8::50")...)
	judge(t, xb, "Healthy", status.CurrentStatus)

	before := live(t, xb)
	dry := argoApply(t, ns, client.DryRunAll)
	for _, field := range [][]string{{"spec"}, {"metadata", "labels"}, {"metadata", "annotations"}, {"metadata", "generation"}, {"metadata", "resourceVersion"}} {
		got, _, _ := unstructured.NestedFieldNoCopy(dry.Object, field...)
		want, _, _ := unstructured.NestedFieldNoCopy(before.Object, field...)
		if !apiequality.Semantic.DeepEqual(got, want) {
			t.Errorf("dry-run apply of the manifest in Git changes %s:\nlive    %v\napplied %v", strings.Join(field, "."), want, got)
		}
	}

	// Argo CD applies again on every sync (and self-heal); that must not
	// touch the spec, which would make the controller reconcile for nothing.
	argoApply(t, ns)
	if after := live(t, xb); after.GetGeneration() != before.GetGeneration() {
		t.Errorf("applying the same manifest again moved generation from %d to %d", before.GetGeneration(), after.GetGeneration())
	}

	svc := &corev1.Service{}
	if err := framework.E().Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "orders-db"}, svc); err != nil {
		t.Fatal(err)
	}
	if !metav1.IsControlledBy(svc, cur) {
		t.Errorf("Service is not controlled by the ExternalBackend, so Argo CD would not show it as its child: %v", svc.OwnerReferences)
	}
	if svc.Labels["team"] != "payments" || svc.Annotations["owner"] != "payments-dba" {
		t.Errorf("Service lacks spec.service's labels or annotations: %v %v", svc.Labels, svc.Annotations)
	}
	untracked(t, "Service orders-db", &svc.ObjectMeta)
	slices := framework.Slices(t, ns, "orders-db")
	if len(slices) != len(framework.ServedTypes()) {
		t.Fatalf("%d slices, want one per family", len(slices))
	}
	for i := range slices {
		s := &slices[i]
		if !metav1.IsControlledBy(s, svc) {
			t.Errorf("slice %s is not controlled by the Service: %v", s.Name, s.OwnerReferences)
		}
		untracked(t, "EndpointSlice "+s.Name, &s.ObjectMeta)
	}
}

// untracked fails when an object carries Argo CD's tracking label or any of
// its annotations (tracking-id, sync options): Argo CD would take it for a resource of the Application
// itself, show it OutOfSync and prune it, since Git does not hold it.
func untracked(t *testing.T, what string, m *metav1.ObjectMeta) {
	t.Helper()
	if v, ok := m.Labels[trackingLabel]; ok {
		t.Errorf("%s carries Argo CD's tracking label %s=%s", what, trackingLabel, v)
	}
	for k, v := range m.Annotations {
		if strings.HasPrefix(k, "argocd.argoproj.io/") {
			t.Errorf("%s carries Argo CD's annotation %s=%s", what, k, v)
		}
	}
}
