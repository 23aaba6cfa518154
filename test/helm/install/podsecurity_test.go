package install

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/backendslice/backendslice/test/e2e/framework"
	helmtest "github.com/backendslice/backendslice/test/helm"
)

// TestPodSecurityRestricted has the API server's PodSecurity admission judge
// the controller Pod the chart renders, in a namespace that enforces the
// restricted standard: the defaults pass, and so do the OpenShift values
// that drop the fixed user and group ids (runAsNonRoot stays); overrides
// that weaken the defaults are refused, which shows the check bites.
func TestPodSecurityRestricted(t *testing.T) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:   "pod-security-restricted",
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"},
	}}
	if err := framework.E().Client.Create(ctx, ns); client.IgnoreAlreadyExists(err) != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, values string
		// refused names what the admission must refuse; empty: admitted.
		refused string
	}{
		{name: "defaults"},
		{name: "OpenShift: no fixed ids", values: "podSecurityContext: {runAsUser: null, runAsGroup: null, fsGroup: null}"},
		{name: "privilege escalation allowed", values: "securityContext: {allowPrivilegeEscalation: true}", refused: "allowPrivilegeEscalation"},
		{name: "runAsNonRoot dropped", values: "podSecurityContext: {runAsNonRoot: null}\nsecurityContext: {runAsNonRoot: null}", refused: "runAsNonRoot"},
		{name: "a plugin sidecar", values: "plugins: {sidecars: [{name: hostsfile, image: registry.example/hostsfile:1.0, args: [-listen, \"127.0.0.1:9100\"]}]}"},
		{name: "a plugin sidecar escalating", values: "plugins: {sidecars: [{name: hostsfile, image: x, securityContext: {allowPrivilegeEscalation: true}}]}",
			refused: "allowPrivilegeEscalation"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			vals := map[string]any{}
			if err := yaml.Unmarshal([]byte(c.values), &vals); err != nil {
				t.Fatal(err)
			}
			pod := renderedPod(t, vals)
			pod.Namespace = ns.Name
			err := framework.E().Client.Create(ctx, pod, client.DryRunAll)
			switch {
			case c.refused == "" && err != nil:
				t.Errorf("the restricted standard refuses the controller Pod: %v", err)
			case c.refused != "" && (err == nil || !strings.Contains(err.Error(), "violates PodSecurity") || !strings.Contains(err.Error(), c.refused)):
				t.Errorf("got %v, want PodSecurity to refuse %s", err, c.refused)
			}
		})
	}
}

// renderedPod is a Pod of the Deployment the chart renders with vals.
func renderedPod(t *testing.T, vals map[string]any) *corev1.Pod {
	t.Helper()
	for _, o := range renderObjects(t, vals) {
		if o.GetKind() != "Deployment" {
			continue
		}
		var d appsv1.Deployment
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
			t.Fatal(err)
		}
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "controller-", Labels: d.Spec.Template.Labels}, Spec: d.Spec.Template.Spec}
	}
	t.Fatal("the chart renders no Deployment")
	return nil
}

// renderObjects renders the chart with vals, as `helm template` does.
func renderObjects(t *testing.T, vals map[string]any) []*unstructured.Unstructured {
	t.Helper()
	objs, err := helmtest.RenderObjects(vals)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}
