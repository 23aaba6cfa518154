package install

import (
	"errors"
	"slices"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/e2e/framework"
	helmtest "github.com/backendslice/backendslice/test/helm"
)

// crdName is the ExternalBackend CRD's name.
const crdName = "externalbackends.backendslice.io"

// providerCRDName is the BackendProvider CRD's name.
const providerCRDName = "backendproviders.backendslice.io"

// leaseName is the leader election lease the controller takes.
const leaseName = "backendslice-controller.backendslice.io"

// upgradeColumn is the printer column the upgraded chart's CRD adds.
const upgradeColumn = "Upgraded"

// TestRelease installs the chart with its defaults into the API server,
// runs the controller under the chart's ServiceAccount, in the release
// namespace as the chart's Deployment does, through every scenario, shows
// that identity reading Secrets in the release namespace alone and refused
// everything else, upgrades the release with a changed CRD and uninstalls
// it, keeping the CRDs.
func TestRelease(t *testing.T) {
	ch, err := helmtest.Load()
	if err != nil {
		t.Fatal(err)
	}
	ns := helmtest.Namespace
	cfg := helmConfig(t, ns)
	var manifest string
	if !t.Run("install", func(t *testing.T) {
		inst := action.NewInstall(cfg)
		inst.ReleaseName, inst.Namespace, inst.CreateNamespace = helmtest.ReleaseName, ns, true
		// The test control plane starts with the CRD applied, as a cluster
		// where it was applied by hand: the release adopts it.
		inst.TakeOwnership = true
		rel, err := inst.Run(ch, nil)
		if err != nil {
			t.Fatal(err)
		}
		manifest = rel.Manifest
		checkAllExist(t, manifest)
		for _, name := range []string{crdName, providerCRDName} {
			crd := getCRDNamed(t, name)
			if a := crd.GetAnnotations(); a["helm.sh/resource-policy"] != "keep" || a["meta.helm.sh/release-name"] != helmtest.ReleaseName {
				t.Errorf("CRD %s annotations %v: want it kept on uninstall and owned by the release", name, a)
			}
		}
	}) {
		t.FailNow()
	}
	id := identity{namespace: ns, name: helmtest.ReleaseName}
	t.Run("the controller passes every scenario as the chart ServiceAccount", func(t *testing.T) {
		cluster, namespaced := rulesOf(t, manifest)
		waitGranted(t, id, ns, cluster, namespaced)
		p := startController(t, id, ns)
		runScenarios(t, ns)
		lease := &coordinationv1.Lease{}
		if err := framework.E().Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: leaseName}, lease); err != nil || lease.Spec.HolderIdentity == nil {
			t.Errorf("leader election lease: %v, holder %v", err, lease.Spec.HolderIdentity)
		}
		framework.Eventually(t, framework.Timeout, "the leader election event", func() error {
			if len(leaderElectionEvents(t, ns)) == 0 {
				return errors.New("none yet")
			}
			return nil
		})
		if got := p.refusals(); len(got) > 0 {
			t.Errorf("the API server refused the chart's ServiceAccount %v", got)
		}
	})
	t.Run("the chart ServiceAccount is refused everything else", func(t *testing.T) {
		checkRefused(t, id)
	})
	t.Run("the chart ServiceAccount reads Secrets in its namespace alone", func(t *testing.T) {
		checkSecretAccess(t, id)
	})
	t.Run("upgrade updates the CRD", func(t *testing.T) {
		up := action.NewUpgrade(cfg)
		up.Namespace = ns
		if _, err := up.Run(helmtest.ReleaseName, withUpgradedCRD(t, ch), nil); err != nil {
			t.Fatal(err)
		}
		versions, _, _ := unstructured.NestedSlice(getCRD(t).Object, "spec", "versions")
		if !hasColumn(versions, upgradeColumn) {
			t.Errorf("the CRD lacks the %s column the upgraded chart adds", upgradeColumn)
		}
	})
	t.Run("uninstall keeps the CRDs with the ExternalBackends and BackendProviders", func(t *testing.T) {
		ns := framework.Namespace(t)
		bp := createProvider(t, ns, "static", v1alpha1.BackendProviderSpec{
			Static: &v1alpha1.StaticProvider{}, Namespaces: v1alpha1.NamespaceSelection{Names: []string{ns}}, AllowedCIDRs: documentationRanges,
		})
		xb := startBackend(t, ns, namingProvider(bp.Name))
		res, err := action.NewUninstall(cfg).Run(helmtest.ReleaseName)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("uninstall: %s", res.Info)
		getCRD(t)
		getCRDNamed(t, providerCRDName)
		framework.Get(t, xb)
		if err := framework.E().Client.Get(ctx, client.ObjectKeyFromObject(bp), &v1alpha1.BackendProvider{}); err != nil {
			t.Errorf("BackendProvider %s after uninstall: %v", bp.Name, err)
		}
		objs, err := helmtest.Objects(manifest)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if o.GetKind() == "CustomResourceDefinition" {
				continue
			}
			if err := framework.E().Client.Get(ctx, client.ObjectKeyFromObject(o), o.DeepCopy()); !apierrors.IsNotFound(err) {
				t.Errorf("%s %s after uninstall: %v, want it gone", o.GetKind(), o.GetName(), err)
			}
		}
	})
}

// checkAllExist checks that every object of the manifest is in the API server.
func checkAllExist(t *testing.T, manifest string) {
	t.Helper()
	objs, err := helmtest.Objects(manifest)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		live := o.DeepCopy()
		if err := framework.E().Client.Get(ctx, client.ObjectKeyFromObject(o), live); err != nil {
			t.Errorf("%s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	t.Logf("%d objects installed", len(objs))
}

// getCRD reads the ExternalBackend CRD.
func getCRD(t *testing.T) *unstructured.Unstructured {
	t.Helper()
	return getCRDNamed(t, crdName)
}

// getCRDNamed reads a CRD.
func getCRDNamed(t *testing.T, name string) *unstructured.Unstructured {
	t.Helper()
	crd := &unstructured.Unstructured{}
	crd.SetAPIVersion("apiextensions.k8s.io/v1")
	crd.SetKind("CustomResourceDefinition")
	if err := framework.E().Client.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
		t.Fatalf("reading the CRD %s: %v", name, err)
	}
	return crd
}

// withUpgradedCRD is the chart as a later version with a changed CRD: a
// printer column more.
func withUpgradedCRD(t *testing.T, ch *chart.Chart) *chart.Chart {
	t.Helper()
	up := *ch
	meta := *ch.Metadata
	meta.Version = "0.1.1-upgrade-test"
	up.Metadata = &meta
	up.Files = nil
	changed := false
	for _, f := range ch.Files {
		if f.Name == "files/crds/"+v1alpha1.GroupVersion.Group+"_externalbackends.yaml" {
			f = &chart.File{Name: f.Name, Data: addColumn(t, f.Data)}
			changed = true
		}
		up.Files = append(up.Files, f)
	}
	if !changed {
		t.Fatal("the chart has no files/crds/ file for ExternalBackends")
	}
	return &up
}

// addColumn adds upgradeColumn to every version of a CRD manifest.
func addColumn(t *testing.T, data []byte) []byte {
	t.Helper()
	crd := map[string]any{}
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatal(err)
	}
	versions, _, err := unstructured.NestedSlice(crd, "spec", "versions")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range versions {
		v, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("CRD version %v is not an object", v)
		}
		cols, _ := v["additionalPrinterColumns"].([]any)
		v["additionalPrinterColumns"] = append(cols, map[string]any{
			"name": upgradeColumn, "type": "string", "jsonPath": ".metadata.uid", "priority": int64(1),
		})
	}
	if err := unstructured.SetNestedSlice(crd, versions, "spec", "versions"); err != nil {
		t.Fatal(err)
	}
	out, err := yaml.Marshal(crd)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// hasColumn tells whether every CRD version has the printer column.
func hasColumn(versions []any, name string) bool {
	if len(versions) == 0 {
		return false
	}
	for _, v := range versions {
		version, _ := v.(map[string]any)
		cols, _, _ := unstructured.NestedSlice(version, "additionalPrinterColumns")
		if !slices.ContainsFunc(cols, func(c any) bool {
			col, _ := c.(map[string]any)
			return col["name"] == name
		}) {
			return false
		}
	}
	return true
}

// checkRefused shows that id can neither read Secrets but by listing them
// in its namespace (checkSecretAccess), nor write ExternalBackends,
// BackendProviders or anything but what the controller writes, nor touch
// cluster-scoped objects: each attempt is refused.
func checkRefused(t *testing.T, id identity) {
	ns := id.namespace
	xb := startBackend(t, framework.Namespace(t))
	as := id.client(t)
	otherNS := metav1.ObjectMeta{Namespace: xb.Namespace, Name: "x"}
	crd := getCRD(t)
	deploy := &appsv1.Deployment{}
	if err := framework.E().Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: helmtest.ReleaseName}, deploy); err != nil {
		t.Fatal(err)
	}
	specPatch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"suspend":true}}`))
	for _, c := range []struct {
		what string
		do   func() error
	}{
		// Its cache lists and watches the Secrets of its namespace; it
		// never gets one, so get is not granted.
		{"get a Secret in its namespace", func() error {
			return as.Get(ctx, client.ObjectKey{Namespace: ns, Name: "sh.helm.release.v1." + helmtest.ReleaseName + ".v1"}, &corev1.Secret{})
		}},
		{"get a Secret in another namespace", func() error {
			return as.Get(ctx, client.ObjectKey{Namespace: xb.Namespace, Name: "x"}, &corev1.Secret{})
		}},
		{"list Secrets in another namespace", func() error { return as.List(ctx, &corev1.SecretList{}, client.InNamespace(xb.Namespace)) }},
		{"list Secrets in every namespace", func() error { return as.List(ctx, &corev1.SecretList{}) }},
		{"create a Secret", func() error { return as.Create(ctx, &corev1.Secret{ObjectMeta: otherNS}) }},
		{"create a Secret in its namespace", func() error {
			return as.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "x"}})
		}},
		{"delete a Secret in its namespace", func() error {
			return as.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sh.helm.release.v1." + helmtest.ReleaseName + ".v1"}})
		}},
		{"create a BackendProvider", func() error {
			return as.Create(ctx, &v1alpha1.BackendProvider{ObjectMeta: metav1.ObjectMeta{Name: "refused"}, Spec: v1alpha1.BackendProviderSpec{
				Static: &v1alpha1.StaticProvider{}, Namespaces: v1alpha1.NamespaceSelection{Names: []string{xb.Namespace}}, AllowedCIDRs: []string{"0.0.0.0/0"},
			}})
		}},
		{"label a Namespace (admitting it to a provider)", func() error {
			return as.Patch(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: xb.Namespace}},
				client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"payments"}}}`)))
		}},
		{"create an ExternalBackend", func() error {
			return as.Create(ctx, &v1alpha1.ExternalBackend{ObjectMeta: otherNS, Spec: xb.Spec})
		}},
		{"update an ExternalBackend's spec", func() error {
			cur := framework.Get(t, xb)
			cur.Spec.Suspend = true
			return as.Update(ctx, cur)
		}},
		{"patch an ExternalBackend's spec", func() error { return as.Patch(ctx, xb.DeepCopy(), specPatch) }},
		{"delete an ExternalBackend", func() error { return as.Delete(ctx, xb.DeepCopy()) }},
		{"create a Pod", func() error {
			return as.Create(ctx, &corev1.Pod{ObjectMeta: otherNS, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "x", Image: "x"}}}})
		}},
		{"create a ConfigMap", func() error { return as.Create(ctx, &corev1.ConfigMap{ObjectMeta: otherNS}) }},
		{"list ConfigMaps", func() error { return as.List(ctx, &corev1.ConfigMapList{}) }},
		{"update its own Deployment", func() error { return as.Update(ctx, deploy.DeepCopy()) }},
		{"read a Lease other than its own", func() error {
			return as.Get(ctx, client.ObjectKey{Namespace: ns, Name: "someone-else"}, &coordinationv1.Lease{})
		}},
		{"create a Namespace", func() error {
			return as.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "refused"}})
		}},
		{"bind itself to cluster-admin", func() error {
			return as.Create(ctx, &rbacv1.ClusterRoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: "refused"},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
				Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: id.name}},
			})
		}},
		{"update the CRD", func() error { return as.Update(ctx, crd.DeepCopy()) }},
		// It lists and watches Nodes (their addresses are denied to
		// endpoints), nothing more.
		{"get a Node", func() error { return as.Get(ctx, client.ObjectKey{Name: "x"}, &corev1.Node{}) }},
		{"update a Node", func() error { return as.Update(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "x"}}) }},
		{"list PersistentVolumes", func() error { return as.List(ctx, &corev1.PersistentVolumeList{}) }},
	} {
		if err := c.do(); !apierrors.IsForbidden(err) {
			t.Errorf("%s: got %v, want Forbidden", c.what, err)
		}
	}
}

// TestProductionValuesAccepted renders the chart with the production-like
// values and has the API server validate each object with a server-side
// dry-run apply. The ServiceMonitor and the PrometheusRule are left out:
// the test API server has no prometheus-operator CRDs (test/promrules
// checks the rules with Prometheus's own parser).
func TestProductionValuesAccepted(t *testing.T) {
	vals, err := helmtest.ReadValues("../testdata/values-production.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs := renderObjects(t, vals)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: helmtest.Namespace}}
	if err := framework.E().Client.Create(ctx, ns); client.IgnoreAlreadyExists(err) != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetKind() == "ServiceMonitor" || o.GetKind() == "PrometheusRule" {
			continue
		}
		err := framework.E().Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(o),
			client.FieldOwner("helm-test"), client.ForceOwnership, client.DryRunAll)
		if err != nil {
			t.Errorf("%s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
}
