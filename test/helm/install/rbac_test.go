package install

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/test/e2e/framework"
	helmtest "github.com/backendslice/backendslice/test/helm"
)

// chartRules are the rules the chart grants with its default values:
// cluster-wide (its ClusterRole) and in the release namespace (its Role).
func chartRules(t *testing.T) (cluster, namespaced []rbacv1.PolicyRule) {
	t.Helper()
	ch, err := helmtest.Load()
	if err != nil {
		t.Fatal(err)
	}
	manifest, _, err := helmtest.Render(ch, nil)
	if err != nil {
		t.Fatal(err)
	}
	return rulesOf(t, manifest)
}

// rulesOf are the rules of the ClusterRoles and Roles of a manifest.
func rulesOf(t *testing.T, manifest string) (cluster, namespaced []rbacv1.PolicyRule) {
	t.Helper()
	objs, err := helmtest.Objects(manifest)
	if err != nil {
		t.Fatal(err)
	}
	return rulesOfObjects(t, objs)
}

// rulesOfObjects are the rules of the controller's ClusterRoles and Roles
// among objs: not the tenants', which aggregate into Kubernetes' view, edit
// and admin and are bound to no identity of the controller
// (test/e2e/tenantroles tests them).
func rulesOfObjects(t *testing.T, objs []*unstructured.Unstructured) (cluster, namespaced []rbacv1.PolicyRule) {
	t.Helper()
	for _, o := range objs {
		var role rbacv1.Role // a ClusterRole has the same rules
		if o.GetKind() != "ClusterRole" && o.GetKind() != "Role" || aggregated(o.GetLabels()) {
			continue
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &role); err != nil {
			t.Fatal(err)
		}
		if o.GetKind() == "ClusterRole" {
			cluster = append(cluster, role.Rules...)
		} else {
			namespaced = append(namespaced, role.Rules...)
		}
	}
	if len(cluster) == 0 || len(namespaced) == 0 {
		t.Fatalf("%d cluster-wide and %d namespaced rules are granted; want both", len(cluster), len(namespaced))
	}
	return cluster, namespaced
}

// aggregated tells a role labelled to be aggregated into Kubernetes' own.
func aggregated(labels map[string]string) bool {
	for label := range labels {
		if strings.HasPrefix(label, "rbac.authorization.k8s.io/aggregate-to-") {
			return true
		}
	}
	return false
}

// split gives each API group and resource of the rules a rule of its own,
// so that a verb can be taken from one resource alone.
func split(rules []rbacv1.PolicyRule) []rbacv1.PolicyRule {
	var out []rbacv1.PolicyRule
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				out = append(out, rbacv1.PolicyRule{
					APIGroups: []string{g}, Resources: []string{res},
					ResourceNames: slices.Clone(r.ResourceNames), Verbs: slices.Clone(r.Verbs),
				})
			}
		}
	}
	return out
}

// requests are the requests the rules allow.
func requests(rules []rbacv1.PolicyRule) []request {
	var out []request
	for _, r := range split(rules) {
		for _, v := range r.Verbs {
			out = append(out, request{verb: v, group: r.APIGroups[0], resource: r.Resources[0]})
		}
	}
	return out
}

// without is rules less the requests in drop.
func without(rules []rbacv1.PolicyRule, drop func(request) bool) []rbacv1.PolicyRule {
	var out []rbacv1.PolicyRule
	for _, r := range split(rules) {
		r.Verbs = slices.DeleteFunc(r.Verbs, func(v string) bool {
			return drop(request{verb: v, group: r.APIGroups[0], resource: r.Resources[0]})
		})
		if len(r.Verbs) > 0 {
			out = append(out, r)
		}
	}
	return out
}

// grant creates a ServiceAccount in ns and gives it clusterRules
// cluster-wide and nsRules in ns, bound as the chart binds its roles, and
// waits until the API server's authoriser applies them.
func grant(t *testing.T, ns string, clusterRules, nsRules []rbacv1.PolicyRule) identity {
	t.Helper()
	id := identity{namespace: ns, name: "controller"}
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: id.name}}
	name := ns + "-controller"
	cluster := []client.Object{
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: clusterRules},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		},
	}
	for _, o := range append([]client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: id.name}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Rules: nsRules},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		},
	}, cluster...) {
		framework.Create(t, o)
	}
	t.Cleanup(func() {
		for _, o := range cluster {
			if err := framework.E().Client.Delete(ctx, o); err != nil {
				t.Errorf("deleting %s: %v", o.GetName(), err)
			}
		}
	})
	waitGranted(t, id, ns, clusterRules, nsRules)
	return id
}

// waitGranted waits until the authoriser allows id every request of
// clusterRules anywhere and of nsRules in ns: RBAC objects take effect
// a moment after they are written.
func waitGranted(t *testing.T, id identity, ns string, clusterRules, nsRules []rbacv1.PolicyRule) {
	t.Helper()
	check := func(rules []rbacv1.PolicyRule, namespace string) error {
		for _, r := range split(rules) {
			for _, v := range r.Verbs {
				attrs := &authorizationv1.ResourceAttributes{Namespace: namespace, Verb: v, Group: r.APIGroups[0]}
				attrs.Resource, attrs.Subresource, _ = strings.Cut(r.Resources[0], "/")
				if len(r.ResourceNames) > 0 {
					attrs.Name = r.ResourceNames[0]
				}
				if err := allowed(id, attrs); err != nil {
					return err
				}
			}
		}
		return nil
	}
	framework.Eventually(t, framework.Timeout, "RBAC of "+id.user()+" in effect", func() error {
		return errors.Join(check(clusterRules, ""), check(nsRules, ns))
	})
}

// allowed asks the authoriser, as an administrator, whether id may do attrs.
func allowed(id identity, attrs *authorizationv1.ResourceAttributes) error {
	ok, err := mayDo(id, attrs)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%s may not %s %s/%s (%s) in %q yet", id.user(), attrs.Verb, attrs.Resource, attrs.Subresource, attrs.Group, attrs.Namespace)
	}
	return nil
}

// mayDo asks the authoriser with a SubjectAccessReview, as
// `kubectl auth can-i --as` does, whether id (with the groups a
// ServiceAccount token carries) may do attrs; a namespace of "" asks about
// every namespace at once.
func mayDo(id identity, attrs *authorizationv1.ResourceAttributes) (bool, error) {
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:               id.user(),
		Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + id.namespace, "system:authenticated"},
		ResourceAttributes: attrs,
	}}
	if err := framework.E().Client.Create(ctx, sar); err != nil {
		return false, err
	}
	return sar.Status.Allowed, nil
}

// secretVerbs are every verb the API server authorises on Secrets.
var secretVerbs = []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}

// checkSecretAccess shows, through the authoriser, that id reads Secrets
// in its own namespace alone and only as its cache does (list and watch:
// get is not needed, and list discloses as much), and never writes one;
// then that a list there succeeds and one elsewhere is refused.
func checkSecretAccess(t *testing.T, id identity) {
	t.Helper()
	other := framework.Namespace(t)
	for _, c := range []struct {
		where, namespace string
		may              []string
	}{
		{"its namespace", id.namespace, []string{"list", "watch"}},
		{"another namespace", other, nil},
		{"kube-system", metav1.NamespaceSystem, nil},
		{"every namespace (cluster-wide)", metav1.NamespaceAll, nil},
	} {
		for _, verb := range secretVerbs {
			for _, name := range []string{"", "x"} {
				if name != "" && (verb == "list" || verb == "watch" || verb == "create" || verb == "deletecollection") {
					continue
				}
				ok, err := mayDo(id, &authorizationv1.ResourceAttributes{Namespace: c.namespace, Verb: verb, Resource: "secrets", Name: name})
				if err != nil {
					t.Fatal(err)
				}
				if want := slices.Contains(c.may, verb); ok != want {
					t.Errorf("%s may %s secrets %q in %s: %v, want %v", id.user(), verb, name, c.where, ok, want)
				}
			}
		}
	}
	as := id.client(t)
	if err := as.List(ctx, &corev1.SecretList{}, client.InNamespace(id.namespace)); err != nil {
		t.Errorf("listing Secrets in its namespace %s: %v", id.namespace, err)
	}
	for _, ns := range []string{other, metav1.NamespaceAll} {
		if err := as.List(ctx, &corev1.SecretList{}, client.InNamespace(ns)); !apierrors.IsForbidden(err) {
			t.Errorf("listing Secrets in %q: got %v, want Forbidden", ns, err)
		}
	}
}
