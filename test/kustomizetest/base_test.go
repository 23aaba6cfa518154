package kustomizetest_test

import (
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/backendslice/backendslice/internal/image"
	"github.com/backendslice/backendslice/test/controlplane"
	"github.com/backendslice/backendslice/test/kustomizetest"
)

// clusterScoped are the kinds of the base that live in no namespace.
var clusterScoped = map[string]bool{
	"Namespace": true, "CustomResourceDefinition": true, "ClusterRole": true, "ClusterRoleBinding": true,
}

// build builds config/default or fails the test.
func build(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	objs, err := kustomizetest.BuildDefault()
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// repoFile reads a file of the repository.
func repoFile(t *testing.T, path string) []byte {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDefaultHoldsTheInstall checks that config/default builds, with one
// object of each kind an install needs, the Namespace first, and every
// namespaced object in that namespace.
func TestDefaultHoldsTheInstall(t *testing.T) {
	objs := build(t)
	got := map[string]int{}
	for _, o := range objs {
		got[o.GetKind()]++
	}
	want := map[string]int{
		"Namespace": 1, "CustomResourceDefinition": 2, "ServiceAccount": 1,
		// The controller's ClusterRole, the tenants' view and edit
		// (test/e2e/tenantroles) and the metrics reader.
		"ClusterRole": 4, "ClusterRoleBinding": 1, "Role": 2, "RoleBinding": 2,
		"Service": 1, "Deployment": 1,
	}
	if !maps.Equal(got, want) {
		t.Errorf("kinds %v, want %v", got, want)
	}
	if first := objs[0]; first.GetKind() != "Namespace" || first.GetName() != kustomizetest.Namespace {
		t.Errorf("first object %s %s, want Namespace %s (applied before what lives in it)", first.GetKind(), first.GetName(), kustomizetest.Namespace)
	}
	for _, o := range objs {
		if ns := o.GetNamespace(); clusterScoped[o.GetKind()] != (ns == "") || (ns != "" && ns != kustomizetest.Namespace) {
			t.Errorf("%s %s in namespace %q, want %q", o.GetKind(), o.GetName(), ns, kustomizetest.Namespace)
		}
	}
}

// keepAnnotation tells Argo CD never to prune or delete the CRDs, as the
// chart does: deleting a CRD deletes every object of it.
const keepAnnotation, keepValue = "argocd.argoproj.io/sync-options", "Prune=false,Delete=false"

// TestGeneratedFilesAsTheyAre checks that the CRDs and the ClusterRole are
// the ones `make manifests` generates, not copies that could drift: equal
// to config/crd/bases (but for the annotation that keeps Argo CD from
// deleting them) and config/rbac/role.yaml (but for the name prefix).
func TestGeneratedFilesAsTheyAre(t *testing.T) {
	objs := build(t)
	for _, crd := range kustomizetest.OfKind(objs, "CustomResourceDefinition") {
		a := crd.GetAnnotations()
		if a[keepAnnotation] != keepValue {
			t.Errorf("CRD %s annotations %v, want %s: %s", crd.GetName(), a, keepAnnotation, keepValue)
		}
		delete(a, keepAnnotation)
		crd.SetAnnotations(a)
	}
	for _, file := range []string{"backendslice.io_externalbackends.yaml", "backendslice.io_backendproviders.yaml"} {
		js, err := yaml.YAMLToJSON(repoFile(t, filepath.Join("config", "crd", "bases", file)))
		if err != nil {
			t.Fatal(err)
		}
		want := &unstructured.Unstructured{}
		if err := want.UnmarshalJSON(js); err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(objs, func(o *unstructured.Unstructured) bool {
			return o.GetKind() == "CustomResourceDefinition" && reflect.DeepEqual(o.Object, want.Object)
		})
		if i < 0 {
			t.Errorf("no CRD of the base is config/crd/bases/%s as generated", file)
		}
	}
	var generated rbacv1.ClusterRole
	if err := yaml.Unmarshal(repoFile(t, "config/rbac/role.yaml"), &generated); err != nil {
		t.Fatal(err)
	}
	roles := typedRoles(t, kustomizetest.OfKind(objs, "ClusterRole"))
	i := slices.IndexFunc(roles, func(r rbacv1.Role) bool { return r.Name == "backendslice-"+generated.Name })
	if i < 0 || !reflect.DeepEqual(roles[i].Rules, generated.Rules) {
		t.Errorf("ClusterRoles %+v, want backendslice-%s with the rules of config/rbac/role.yaml", roles, generated.Name)
	}
}

// typedRoles converts Roles or ClusterRoles (the same rules) to Roles.
func typedRoles(t *testing.T, objs []*unstructured.Unstructured) []rbacv1.Role {
	t.Helper()
	var out []rbacv1.Role
	for _, o := range objs {
		var r rbacv1.Role
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// grantsSecrets tells whether a rule covers Secrets of the core group.
func grantsSecrets(r rbacv1.PolicyRule) bool {
	group := slices.Contains(r.APIGroups, "") || slices.Contains(r.APIGroups, "*")
	return group && (slices.Contains(r.Resources, "secrets") || slices.Contains(r.Resources, "*"))
}

// TestNoSecretReadOutsideItsNamespace checks the base's RBAC: the
// ClusterRole grants no Secrets; Secrets are granted by a Role of the
// controller's namespace alone, list and watch only; and every binding
// binds one of the base's own roles to the base's ServiceAccount only.
func TestNoSecretReadOutsideItsNamespace(t *testing.T) {
	objs := build(t)
	for _, r := range typedRoles(t, kustomizetest.OfKind(objs, "ClusterRole")) {
		for _, rule := range r.Rules {
			if grantsSecrets(rule) {
				t.Errorf("ClusterRole %s grants %v on Secrets cluster-wide", r.Name, rule.Verbs)
			}
		}
	}
	secretRoles := 0
	for _, r := range typedRoles(t, kustomizetest.OfKind(objs, "Role")) {
		for _, rule := range r.Rules {
			if !grantsSecrets(rule) {
				continue
			}
			secretRoles++
			if r.Namespace != kustomizetest.Namespace || !slices.Equal(rule.Verbs, []string{"list", "watch"}) || len(rule.ResourceNames) > 0 {
				t.Errorf("Role %s/%s grants %v on Secrets, want list and watch in %s only", r.Namespace, r.Name, rule.Verbs, kustomizetest.Namespace)
			}
		}
	}
	if secretRoles != 1 {
		t.Errorf("%d rules grant Secrets, want the one of the secrets Role (the controller reads BackendProviders' Secrets)", secretRoles)
	}
	checkBindings(t, objs)
}

// checkBindings checks that each binding refers to a role of the base
// (with its name prefix) and binds the base's ServiceAccount alone.
func checkBindings(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	sas := kustomizetest.OfKind(objs, "ServiceAccount")
	if len(sas) != 1 {
		t.Fatalf("%d ServiceAccounts, want 1", len(sas))
	}
	sa := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: sas[0].GetName(), Namespace: sas[0].GetNamespace()}
	roles := map[string]bool{}
	for _, o := range append(kustomizetest.OfKind(objs, "Role"), kustomizetest.OfKind(objs, "ClusterRole")...) {
		roles[o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName()] = true
	}
	bindings := append(kustomizetest.OfKind(objs, "RoleBinding"), kustomizetest.OfKind(objs, "ClusterRoleBinding")...)
	for _, o := range bindings {
		var b rbacv1.RoleBinding // a ClusterRoleBinding has the same fields
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &b); err != nil {
			t.Fatal(err)
		}
		ns := b.Namespace
		if b.RoleRef.Kind == "ClusterRole" {
			ns = ""
		}
		if !roles[b.RoleRef.Kind+"/"+ns+"/"+b.RoleRef.Name] {
			t.Errorf("%s %s refers to %s %s, which the base does not hold", o.GetKind(), b.Name, b.RoleRef.Kind, b.RoleRef.Name)
		}
		if !slices.Equal(b.Subjects, []rbacv1.Subject{sa}) {
			t.Errorf("%s %s binds %+v, want only %+v", o.GetKind(), b.Name, b.Subjects, sa)
		}
	}
}

// TestDeploymentRunsTheImageAndAccount checks that the Deployment runs the
// image `make image` builds and the chart runs by default, as the base's
// ServiceAccount, and that the metrics Service selects its Pods.
func TestDeploymentRunsTheImageAndAccount(t *testing.T) {
	objs := build(t)
	d, err := kustomizetest.Deployment(objs)
	if err != nil {
		t.Fatal(err)
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	chart, err := image.ReadChart(filepath.Join(root, image.ChartDir))
	if err != nil {
		t.Fatal(err)
	}
	pod := d.Spec.Template.Spec
	if want := image.Repository + ":" + chart.AppVersion; len(pod.Containers) != 1 || pod.Containers[0].Image != want {
		t.Errorf("containers %+v, want one running %s", pod.Containers, want)
	}
	if sa := kustomizetest.OfKind(objs, "ServiceAccount"); len(sa) != 1 || pod.ServiceAccountName != sa[0].GetName() {
		t.Errorf("runs as ServiceAccount %q, want the base's", pod.ServiceAccountName)
	}
	if sel := labels.SelectorFromSet(d.Spec.Selector.MatchLabels); !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("the Deployment's selector %v does not select its Pods %v", sel, d.Spec.Template.Labels)
	}
	svcs := kustomizetest.OfKind(objs, "Service")
	if len(svcs) != 1 {
		t.Fatalf("%d Services, want the metrics Service", len(svcs))
	}
	sel, _, _ := unstructured.NestedStringMap(svcs[0].Object, "spec", "selector")
	if len(sel) == 0 || !labels.SelectorFromSet(sel).Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("the metrics Service selects %v, not the controller's Pods %v", sel, d.Spec.Template.Labels)
	}
}

// guideOverlay is the overlay the operator guide shows, with the base taken
// from this checkout (at rel) instead of GitHub.
func guideOverlay(t *testing.T, rel string) string {
	t.Helper()
	const first, remote = "# kustomization.yaml of your overlay", "https://github.com/backendslice/backendslice//config/default?ref="
	const guide = "docs/operator-guide.md"
	doc := string(repoFile(t, guide))
	start := strings.Index(doc, first)
	if start < 0 {
		t.Fatalf("%s has no block starting %q", guide, first)
	}
	block, _, _ := strings.Cut(doc[start:], "```")
	var lines []string
	for _, l := range strings.Split(block, "\n") {
		l = strings.TrimPrefix(l, "  ") // the block is indented under a list item
		if i := strings.Index(l, remote); i >= 0 {
			l = l[:i] + rel
		}
		lines = append(lines, l)
	}
	return strings.Join(lines, "\n")
}

// TestOverlayMovesTheNamespace builds the overlay of config/default that
// the operator guide shows, as a user would: every namespaced object, the bindings'
// subjects and the lease's namespace (the controller's flag, from
// $POD_NAMESPACE) follow its namespace, its image is pinned by digest and
// its flag added.
func TestOverlayMovesTheNamespace(t *testing.T) {
	base, err := kustomizetest.DefaultDir()
	if err != nil {
		t.Fatal(err)
	}
	overlay := t.TempDir()
	// kustomize takes a base by a relative path only.
	rel, err := filepath.Rel(overlay, base)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(guideOverlay(t, rel)), 0o600); err != nil {
		t.Fatal(err)
	}
	objs, err := kustomizetest.Build(overlay)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if !clusterScoped[o.GetKind()] && o.GetNamespace() != "platform-backends" {
			t.Errorf("%s %s in namespace %q, want platform-backends", o.GetKind(), o.GetName(), o.GetNamespace())
		}
		subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
		for _, s := range subjects {
			if s, _ := s.(map[string]any); s["namespace"] != "platform-backends" {
				t.Errorf("%s %s binds %v, want the ServiceAccount in platform-backends", o.GetKind(), o.GetName(), s)
			}
		}
	}
	d, err := kustomizetest.Deployment(objs)
	if err != nil {
		t.Fatal(err)
	}
	c := d.Spec.Template.Spec.Containers[0]
	env, err := kustomizetest.Env(c, d.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	args, err := kustomizetest.Args(c, env)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(args, "--leader-election-namespace=platform-backends") || env["POD_NAMESPACE"] != "platform-backends" {
		t.Errorf("args %v and POD_NAMESPACE %q: want the lease and the Secrets in platform-backends", args, env["POD_NAMESPACE"])
	}
	if !slices.Contains(args, "--denied-cidrs=10.0.0.0/16,172.20.0.0/16") {
		t.Errorf("args %v lack the flag the overlay adds", args)
	}
	if !strings.HasPrefix(c.Image, image.Repository+"@sha256:") {
		t.Errorf("image %s, want %s pinned by the overlay's digest", c.Image, image.Repository)
	}
}
