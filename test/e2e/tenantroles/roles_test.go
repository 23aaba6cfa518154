// Package tenantroles_test checks the tenants' ClusterRoles the chart and the
// kustomize base ship, on a real API server with kube-controller-manager's
// ClusterRole aggregation running: a namespace's `edit` and `view` users, as
// Kubernetes' own roles make them, get exactly the rights on ExternalBackends
// the roles promise, tried by impersonation.
package tenantroles_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/controllers"
	"github.com/backendslice/backendslice/test/e2e/framework"
	helmtest "github.com/backendslice/backendslice/test/helm"
	"github.com/backendslice/backendslice/test/kustomizetest"
)

func TestMain(m *testing.M) {
	os.Exit(framework.Run(m, framework.Options{ControlPlaneOnly: true}))
}

// aggregateTo prefixes the labels that aggregate a ClusterRole into one of
// Kubernetes' view, edit and admin roles.
const aggregateTo = "rbac.authorization.k8s.io/aggregate-to-"

// tenantRoles are the ClusterRoles among objs that carry an aggregation
// label, by name.
func tenantRoles(t *testing.T, objs []*unstructured.Unstructured) map[string]*rbacv1.ClusterRole {
	t.Helper()
	roles := map[string]*rbacv1.ClusterRole{}
	for _, obj := range objs {
		if obj.GetKind() != "ClusterRole" {
			continue
		}
		var role rbacv1.ClusterRole
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &role); err != nil {
			t.Fatal(err)
		}
		for label := range role.Labels {
			if strings.HasPrefix(label, aggregateTo) {
				roles[role.Name] = &role
				break
			}
		}
	}
	return roles
}

// TestTenantRoles renders the chart's and the kustomize base's tenant roles,
// checks that they are the same, applies the chart's, and tries what a
// namespace's edit and view users may do.
func TestTenantRoles(t *testing.T) {
	ctx := context.Background()
	objs, err := helmtest.RenderObjects(nil)
	if err != nil {
		t.Fatal(err)
	}
	chartRoles := tenantRoles(t, objs)
	base, err := kustomizetest.BuildDefault()
	if err != nil {
		t.Fatal(err)
	}
	baseRoles := tenantRoles(t, base)
	var names []string
	for name := range chartRoles {
		names = append(names, name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"backendslice-edit", "backendslice-view"}) {
		t.Fatalf("the chart's tenant roles are %q, want backendslice-edit and backendslice-view", names)
	}
	for name, role := range chartRoles {
		b, ok := baseRoles[name]
		if !ok {
			t.Fatalf("the kustomize base has no tenant role %s (it has %d)", name, len(baseRoles))
		}
		for label, value := range b.Labels {
			if strings.HasPrefix(label, aggregateTo) && role.Labels[label] != value {
				t.Errorf("%s: the chart's label %s=%q, the base's %q", name, label, role.Labels[label], value)
			}
		}
		if fmt.Sprint(b.Rules) != fmt.Sprint(role.Rules) {
			t.Errorf("%s: the chart's rules %v, the base's %v", name, role.Rules, b.Rules)
		}
		role.ResourceVersion = ""
		framework.Create(t, role)
	}

	startAggregation(t)
	waitAggregated(t, "edit", "externalbackends", "create")
	waitAggregated(t, "view", "externalbackends", "list")
	waitAggregated(t, "admin", "externalbackends", "delete")

	for _, ns := range []string{"team-a", "team-b"} {
		framework.Create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	bind(t, "team-a", "edit", "alice")
	bind(t, "team-a", "view", "vera")
	alice, vera := as(t, "alice"), as(t, "vera")

	xb := framework.Backend("team-a", "db", v1alpha1.Source{Name: "fixed", Static: &v1alpha1.StaticSource{
		Endpoints: []v1alpha1.StaticEndpoint{{Address: "192.0.2.10"}},
	}})
	allowed(t, "edit: create an ExternalBackend in its namespace", alice.Create(ctx, xb))
	allowed(t, "edit: update it", alice.Update(ctx, xb))
	xb.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Forged", LastTransitionTime: metav1.Now()}}
	forbidden(t, "edit: write its status", alice.Status().Update(ctx, xb))
	forbidden(t, "edit: create one in another namespace", alice.Create(ctx, framework.Backend("team-b", "db", xb.Spec.Sources...)))
	forbidden(t, "edit: create a BackendProvider", alice.Create(ctx, &v1alpha1.BackendProvider{
		ObjectMeta: metav1.ObjectMeta{Name: "mine"},
		Spec:       v1alpha1.BackendProviderSpec{Namespaces: v1alpha1.NamespaceSelection{Names: []string{"team-a"}}},
	}))
	forbidden(t, "edit: list BackendProviders", alice.List(ctx, &v1alpha1.BackendProviderList{}))

	var list v1alpha1.ExternalBackendList
	allowed(t, "view: list its namespace's ExternalBackends", vera.List(ctx, &list, client.InNamespace("team-a")))
	if len(list.Items) != 1 {
		t.Errorf("view lists %d ExternalBackends in team-a, want 1", len(list.Items))
	}
	forbidden(t, "view: list another namespace's", vera.List(ctx, &list, client.InNamespace("team-b")))
	forbidden(t, "view: create one", vera.Create(ctx, framework.Backend("team-a", "other", xb.Spec.Sources...)))
	forbidden(t, "view: delete one", vera.Delete(ctx, xb))
	allowed(t, "edit: delete it", alice.Delete(ctx, xb))
}

// startAggregation runs kube-controller-manager with its ClusterRole
// aggregation controller alone, which fills Kubernetes' view, edit and
// admin roles from the labelled ones, as in a cluster.
func startAggregation(t *testing.T) {
	t.Helper()
	bin, err := framework.LabBinary("kube-controller-manager")
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "kube-controller-manager.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--kubeconfig", framework.WriteKubeconfig(t, framework.E().Config()),
		"--controllers", "clusterrole-aggregation", "--leader-elect=false", "--secure-port", "0")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = logFile.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				t.Logf("kube-controller-manager's log:\n%s", b)
			}
		}
	})
}

// waitAggregated waits until Kubernetes' ClusterRole role grants verb on
// resource of our API group.
func waitAggregated(t *testing.T, role, resource, verb string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var cr rbacv1.ClusterRole
		if err := framework.E().Client.Get(context.Background(), client.ObjectKey{Name: role}, &cr); err != nil {
			t.Fatal(err)
		}
		for _, r := range cr.Rules {
			if slices.Contains(r.APIGroups, v1alpha1.GroupVersion.Group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("ClusterRole %s never granted %s on %s: %v", role, verb, resource, cr.Rules)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// bind gives user Kubernetes' ClusterRole role in namespace ns.
func bind(t *testing.T, ns, role, user string) {
	t.Helper()
	framework.Create(t, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: user + "-" + role},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	})
}

// as is a client that impersonates user.
func as(t *testing.T, user string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(framework.E().Config())
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	scheme, err := controllers.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func allowed(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("%s: %v, want it allowed", what, err)
	}
}

func forbidden(t *testing.T, what string, err error) {
	t.Helper()
	if !apierrors.IsForbidden(err) {
		t.Errorf("%s: %v, want Forbidden", what, err)
	}
}
