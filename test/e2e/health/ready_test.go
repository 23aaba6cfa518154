package health

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/backendslice/backendslice/test/controlplane"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

var ctx = context.Background()

// notSyncedWindow is how long a controller whose cache cannot sync is
// watched answering not Ready.
const notSyncedWindow = 5 * time.Second

// TestReadyOnlyOnceCachesSynced runs the binary, with leader election as
// the chart runs it, under an identity that may not list Namespaces (a
// kind its controller watches): it leads, but its Namespace informer
// cannot sync, and /readyz must fail, saying why, for as long as that
// lasts. Once list and watch on Namespaces are granted, the informer syncs
// and /readyz passes. (Before this check, /readyz answered a ping: Ready
// at once.)
func TestReadyOnlyOnceCachesSynced(t *testing.T) {
	ns := framework.Namespace(t)
	user := "system:serviceaccount:" + ns + ":backendslice"
	rules := controllerRules(t)
	var withoutNamespaces []rbacv1.PolicyRule
	for _, r := range rules {
		r.Resources = slices.DeleteFunc(slices.Clone(r.Resources), func(s string) bool { return s == "namespaces" })
		if len(r.Resources) > 0 {
			withoutNamespaces = append(withoutNamespaces, r)
		}
	}
	grant(t, ns+"-controller", user, append(withoutNamespaces, rbacv1.PolicyRule{
		APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"},
	}))
	impersonated := rest.CopyConfig(framework.E().Config())
	impersonated.Impersonate = rest.ImpersonationConfig{UserName: user}
	c := startBinary(t, "controller", nil, "--kubeconfig="+framework.WriteKubeconfig(t, impersonated),
		"--leader-elect", "--leader-election-namespace="+ns)

	c.eventually(time.Minute, "it leads", func() error {
		if !c.leads() {
			return fmt.Errorf("not leading")
		}
		return nil
	})
	// The controllers start once it leads, and ask for their informers.
	time.Sleep(time.Second)
	for end := time.Now().Add(notSyncedWindow); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if code, body := c.probe("/readyz"); code == http.StatusOK {
			t.Fatalf("/readyz answers 200 while the Namespace informer cannot list: %s", body)
		}
	}
	if _, body := c.probe("/readyz/informers-synced"); !strings.Contains(body, "have not synced") {
		t.Errorf("/readyz/informers-synced says %q; want it to say the caches have not synced", body)
	}

	granted := time.Now()
	grant(t, ns+"-namespaces", user, []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"list", "watch"}}})
	c.eventually(90*time.Second, "Ready once Namespaces can be listed", func() error { return c.wantStatus("/readyz", http.StatusOK) })
	t.Logf("Ready %s after list and watch on Namespaces were granted", time.Since(granted).Round(100*time.Millisecond))
}

// TestStandbyStaysReady runs two replicas with leader election: the one that
// does not lead is Ready too (its caches synced), or a rolling update, which
// waits for the new Pod's readiness before it stops an old one, would never
// proceed; the stuck-reconcile check, on where it is asked for, passes on
// both; a replica that leads stays Ready.
func TestStandbyStaysReady(t *testing.T) {
	ns := framework.Namespace(t)
	args := []string{"--leader-elect", "--leader-election-namespace=" + ns}
	first := startBinary(t, "first", nil, append(args, "--stuck-reconcile-timeout=1m")...)
	first.eventually(time.Minute, "it leads", func() error {
		if !first.leads() {
			return fmt.Errorf("not leading")
		}
		return nil
	})
	first.eventually(time.Minute, "the leader is Ready", func() error { return first.wantStatus("/readyz", http.StatusOK) })
	started := time.Now()
	second := startBinary(t, "second", nil, args...)
	second.eventually(time.Minute, "the standby is Ready", func() error { return second.wantStatus("/readyz", http.StatusOK) })
	t.Logf("the standby was Ready %s after it started", time.Since(started).Round(100*time.Millisecond))
	for range 10 {
		if second.leads() {
			t.Fatal("the second replica leads while the first holds the lease")
		}
		for _, c := range []*controller{first, second} {
			for _, path := range []string{"/readyz", "/healthz"} {
				if err := c.wantStatus(path, http.StatusOK); err != nil {
					t.Errorf("%s: %v", c.name, err)
				}
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	// The check is served where it was asked for, and only there.
	if err := first.wantStatus("/healthz/reconcile-loop", http.StatusOK); err != nil {
		t.Error(err)
	}
	if code, _ := second.probe("/healthz/reconcile-loop"); code != http.StatusNotFound {
		t.Errorf("second replica, without --stuck-reconcile-timeout: /healthz/reconcile-loop answers %d, want 404", code)
	}
}

// controllerRules are the ClusterRole rules the controller's markers
// generate (config/rbac/role.yaml, the chart's).
func controllerRules(t *testing.T) []rbacv1.PolicyRule {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.Unmarshal(b, &role); err != nil {
		t.Fatal(err)
	}
	return role.Rules
}

// grant gives user rules through a ClusterRole and binding named name,
// removed when the test ends.
func grant(t *testing.T, name, user string, rules []rbacv1.PolicyRule) {
	t.Helper()
	cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	framework.Create(t, cr)
	framework.Create(t, crb)
	t.Cleanup(func() {
		_ = framework.E().Client.Delete(ctx, crb)
		_ = framework.E().Client.Delete(ctx, cr)
	})
}
