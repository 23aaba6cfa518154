package helmtest_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/backendslice/backendslice/cmd/backendslice/wiring"
	helmtest "github.com/backendslice/backendslice/test/helm"
	"github.com/backendslice/backendslice/test/kustomizetest"
)

// TestKustomizeDeploymentIsTheCharts holds the kustomize base's Deployment
// (config/manager) to the one the chart renders with its default values:
// the same replicas and update strategy, and the same Pod but for the
// ServiceAccount's name: image, flags (the base's $(POD_NAMESPACE)
// expanded as the kubelet does), environment, ports, probes, security
// contexts, resources and grace period; and flags the controller accepts.
func TestKustomizeDeploymentIsTheCharts(t *testing.T) {
	base, err := kustomizetest.BuildDefault()
	if err != nil {
		t.Fatal(err)
	}
	kd, err := kustomizetest.Deployment(base)
	if err != nil {
		t.Fatal(err)
	}
	var hd appsv1.Deployment
	typed(t, render(t, nil), "Deployment", &hd)
	if kd.Namespace != helmtest.Namespace {
		t.Fatalf("the base's namespace %s, the chart's rendered in %s: compare them in one", kd.Namespace, helmtest.Namespace)
	}
	if !reflect.DeepEqual(kd.Spec.Replicas, hd.Spec.Replicas) || !reflect.DeepEqual(kd.Spec.Strategy, hd.Spec.Strategy) {
		t.Errorf("replicas %v and strategy %+v, the chart's %v and %+v", *kd.Spec.Replicas, kd.Spec.Strategy, *hd.Spec.Replicas, hd.Spec.Strategy)
	}
	kp, hp := kd.Spec.Template.Spec.DeepCopy(), hd.Spec.Template.Spec.DeepCopy()
	if len(kp.Containers) != 1 || len(hp.Containers) != 1 {
		t.Fatalf("%d and %d containers, want one each", len(kp.Containers), len(hp.Containers))
	}
	env, err := kustomizetest.Env(kp.Containers[0], kd.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	args, err := kustomizetest.Args(kp.Containers[0], env)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(args, hp.Containers[0].Args) {
		t.Errorf("args (expanded) %q,\nthe chart's %q", args, hp.Containers[0].Args)
	}
	kp.Containers[0].Args, hp.Containers[0].Args = nil, nil
	kp.ServiceAccountName, hp.ServiceAccountName = "", ""
	if !reflect.DeepEqual(kp, hp) {
		t.Errorf("Pod (but args and ServiceAccount)\n%+v,\nthe chart's\n%+v", kp, hp)
	}
	if _, err := wiring.OptionsFromArgs(args[1:]); err != nil {
		t.Errorf("the controller refuses the base's arguments: %v", err)
	}
}

// TestKustomizeRolesAreTheCharts checks that the base's Roles in the
// controller's namespace (leader election, and the Secrets BackendProviders
// name) grant what the chart's grant, no more.
func TestKustomizeRolesAreTheCharts(t *testing.T) {
	base, err := kustomizetest.BuildDefault()
	if err != nil {
		t.Fatal(err)
	}
	k, h := roleRules(t, kustomizetest.OfKind(base, "Role")), roleRules(t, ofKind(render(t, nil), "Role"))
	if len(k) == 0 || !reflect.DeepEqual(k, h) {
		t.Errorf("the base's Roles grant\n%+v,\nthe chart's\n%+v", k, h)
	}
}

// roleRules are the rules of Roles, in a stable order.
func roleRules(t *testing.T, roles []*unstructured.Unstructured) []rbacv1.PolicyRule {
	t.Helper()
	var out []rbacv1.PolicyRule
	for _, o := range roles {
		var r rbacv1.Role
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r.Rules...)
	}
	slices.SortFunc(out, func(a, b rbacv1.PolicyRule) int {
		return strings.Compare(a.String(), b.String())
	})
	return out
}
