package helmtest_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	helmtest "github.com/backendslice/backendslice/test/helm"
)

// scraperToken is the bearer authorization the ServiceMonitor and
// PodMonitor scrape with when metrics.secure: the scraper's token Secret.
var scraperToken = map[string]any{"type": "Bearer", "credentials": map[string]any{"name": "backendslice-metrics-scraper", "key": "token"}}

// TestSecureMetrics: by default the controller serves its metrics over
// HTTPS for tokens the API server authorizes (--metrics-secure=true on the
// port the Service and monitors name), the chart renders the
// metrics-reader ClusterRole of config/rbac, and a monitor scrapes as a
// ServiceAccount bound to it, with its token Secret; metrics.secure=false
// is plain HTTP with none of them.
func TestSecureMetrics(t *testing.T) {
	objs := renderYAML(t, "metrics: {serviceMonitor: {enabled: true}}")
	if args := metricsArgs(t, objs); !slices.Equal(args, []string{"--metrics-bind-address=:8443", "--metrics-secure=true"}) {
		t.Errorf("metrics flags %q, want HTTPS on 8443", args)
	}
	var want, reader rbacv1.ClusterRole
	readYAML(t, "config/rbac/metrics_reader_role.yaml", &want)
	for _, o := range ofKind(objs, "ClusterRole") {
		if o.GetName() == "backendslice-metrics-reader" {
			mustConvert(t, o, &reader)
		}
	}
	if len(want.Rules) != 1 || !reflect.DeepEqual(reader.Rules, want.Rules) {
		t.Errorf("metrics-reader rules %v, want config/rbac's %v", reader.Rules, want.Rules)
	}
	sm := ofKind(objs, "ServiceMonitor")
	if len(sm) != 1 {
		t.Fatalf("%d ServiceMonitors, want 1", len(sm))
	}
	endpoints, _, _ := unstructured.NestedSlice(sm[0].Object, "spec", "endpoints")
	wantEndpoints := []any{map[string]any{"port": "metrics", "path": "/metrics", "interval": "30s", "scrapeTimeout": "10s",
		"scheme": "https", "authorization": scraperToken, "tlsConfig": map[string]any{"insecureSkipVerify": true}}}
	if !reflect.DeepEqual(endpoints, wantEndpoints) {
		t.Errorf("ServiceMonitor endpoints %v, want %v", endpoints, wantEndpoints)
	}
	var secret corev1.Secret
	typed(t, objs, "Secret", &secret)
	if secret.Name != "backendslice-metrics-scraper" || secret.Type != corev1.SecretTypeServiceAccountToken ||
		secret.Annotations[corev1.ServiceAccountNameKey] != "backendslice-metrics-scraper" || secret.Namespace != helmtest.Namespace {
		t.Errorf("the scraper's token Secret: %s/%s of type %s for %q", secret.Namespace, secret.Name, secret.Type, secret.Annotations[corev1.ServiceAccountNameKey])
	}
	if !bound(t, objs, "backendslice-metrics-scraper", "backendslice-metrics-reader") {
		t.Error("no ClusterRoleBinding of the scraper ServiceAccount to the metrics-reader ClusterRole")
	}

	plain := renderYAML(t, "metrics: {secure: false, podMonitor: {enabled: true}}")
	if args := metricsArgs(t, plain); !slices.Equal(args, []string{"--metrics-bind-address=:8443", "--metrics-secure=false"}) {
		t.Errorf("metrics flags %q with metrics.secure=false", args)
	}
	pm := ofKind(plain, "PodMonitor")
	if len(pm) != 1 {
		t.Fatalf("%d PodMonitors, want 1", len(pm))
	}
	pmEndpoints, _, _ := unstructured.NestedSlice(pm[0].Object, "spec", "podMetricsEndpoints")
	if e, ok := pmEndpoints[0].(map[string]any); !ok || e["scheme"] != "http" || e["authorization"] != nil {
		t.Errorf("PodMonitor endpoint %v with metrics.secure=false, want plain HTTP", pmEndpoints[0])
	}
	for _, kind := range []string{"Secret", "ServiceAccount"} {
		for _, o := range ofKind(plain, kind) {
			if o.GetName() == "backendslice-metrics-scraper" {
				t.Errorf("%s %s rendered with metrics.secure=false", kind, o.GetName())
			}
		}
	}
}

// metricsArgs are the controller's --metrics-* flags in objs's Deployment.
func metricsArgs(t *testing.T, objs []*unstructured.Unstructured) []string {
	t.Helper()
	var d appsv1.Deployment
	typed(t, objs, "Deployment", &d)
	var out []string
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		if strings.HasPrefix(a, "--metrics-") {
			out = append(out, a)
		}
	}
	return out
}

// bound tells whether a ClusterRoleBinding of objs binds ServiceAccount sa
// of the release namespace to ClusterRole role.
func bound(t *testing.T, objs []*unstructured.Unstructured, sa, role string) bool {
	t.Helper()
	for _, o := range ofKind(objs, "ClusterRoleBinding") {
		var b rbacv1.ClusterRoleBinding
		mustConvert(t, o, &b)
		if b.RoleRef.Kind != "ClusterRole" || b.RoleRef.Name != role {
			continue
		}
		for _, s := range b.Subjects {
			if s.Kind == "ServiceAccount" && s.Name == sa && s.Namespace == helmtest.Namespace {
				return true
			}
		}
	}
	return false
}

// mustConvert converts o into out.
func mustConvert(t *testing.T, o *unstructured.Unstructured, out any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, out); err != nil {
		t.Fatal(err)
	}
}
