package install

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/e2e/framework"
	helmtest "github.com/backendslice/backendslice/test/helm"
)

// The scenarios of tenancy: sources that publish through a BackendProvider,
// admitted by namespace name or labels, providers that read Secrets of the
// controller's namespace, and the Pod ranges read from the Nodes.

// scenarioLabel marks the objects a scenario creates outside its namespace
// (cluster-scoped BackendProviders and Nodes, Secrets in the controller's
// namespace) with the scenario's namespace, so that its checks find them.
const scenarioLabel = "backendslice.test/scenario"

// tenantLabel is the namespace label admittedByLabel's provider selects.
const tenantLabel = "backendslice.test/tenant"

// documentationRanges are the networks the scenarios' addresses are in.
var documentationRanges = []string{"192.0.2.0/24", "2001:db8::/32"}

// The Pod range of podRange's Node, and the address of its backend in it.
const (
	podRangeCIDR    = "198.51.100.0/28"
	podRangeAddress = "198.51.100.5"
)

// throughProvider publishes the backend through a static BackendProvider
// that admits its namespace by name: admission reads the provider, and the
// provider's status says it is Ready.
var throughProvider = scenario{
	name: "through-a-provider",
	start: func(t *testing.T, ns, _ string) *v1alpha1.ExternalBackend {
		bp := createProvider(t, ns, "static", v1alpha1.BackendProviderSpec{
			Static:       &v1alpha1.StaticProvider{},
			Namespaces:   v1alpha1.NamespaceSelection{Names: []string{ns}},
			AllowedCIDRs: documentationRanges,
		})
		return startBackend(t, ns, namingProvider(bp.Name))
	},
	done: func(t *testing.T, xb *v1alpha1.ExternalBackend) {
		framework.WaitReady(t, xb)
		framework.WaitAddresses(t, xb.Namespace, backendName, ipv4a, ipv4b, ipv6)
		waitProvider(t, providerName(xb.Namespace, "static"), metav1.ConditionTrue, v1alpha1.ReasonProviderReady, "static")
	},
}

// admittedByLabel publishes through a provider that admits namespaces by
// label; when the namespace loses the label, the source is refused and
// what it published is withdrawn.
var admittedByLabel = scenario{
	name: "admitted-by-label",
	start: func(t *testing.T, ns, _ string) *v1alpha1.ExternalBackend {
		labelNamespace(t, ns, ns)
		bp := createProvider(t, ns, "by-label", v1alpha1.BackendProviderSpec{
			Static: &v1alpha1.StaticProvider{},
			Namespaces: v1alpha1.NamespaceSelection{Selector: &metav1.LabelSelector{
				MatchLabels: map[string]string{tenantLabel: ns},
			}},
			AllowedCIDRs: documentationRanges,
		})
		return startBackend(t, ns, namingProvider(bp.Name))
	},
	done: func(t *testing.T, xb *v1alpha1.ExternalBackend) {
		framework.WaitReady(t, xb)
		framework.WaitAddresses(t, xb.Namespace, backendName, ipv4a, ipv4b, ipv6)
		labelNamespace(t, xb.Namespace, "")
		framework.WaitCondition(t, xb, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonProviderNotAdmitted)
		framework.WaitAddresses(t, xb.Namespace, backendName)
	},
}

// providerSecret is a Consul provider whose ACL token is a Secret of the
// controller's namespace: its status says Ready while the Secret is there,
// and SecretNotFound once it is deleted. The backend (a static one, naming
// no provider) shows whether the controller reconciles at all; no source
// uses the provider, so no Consul agent is needed.
var providerSecret = scenario{
	name: "provider-secret",
	start: func(t *testing.T, ns, controllerNS string) *v1alpha1.ExternalBackend {
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: controllerNS, Name: ns + "-consul-token", Labels: map[string]string{scenarioLabel: ns}},
			Data:       map[string][]byte{"token": []byte("scenario-acl-token")},
		}
		framework.Create(t, secret)
		t.Cleanup(func() { deleteObject(t, secret) })
		createProvider(t, ns, "consul", v1alpha1.BackendProviderSpec{
			Consul: &v1alpha1.ConsulProvider{
				Address:        "127.0.0.1:8500",
				TokenSecretRef: &v1alpha1.SecretKeyReference{Name: secret.Name, Key: "token"},
			},
			Namespaces: v1alpha1.NamespaceSelection{Names: []string{ns}},
		})
		return startBackend(t, ns)
	},
	done: func(t *testing.T, xb *v1alpha1.ExternalBackend) {
		framework.WaitReady(t, xb)
		name := providerName(xb.Namespace, "consul")
		waitProvider(t, name, metav1.ConditionTrue, v1alpha1.ReasonProviderReady, "consul")
		var secrets corev1.SecretList
		if err := framework.E().Client.List(ctx, &secrets, client.MatchingLabels{scenarioLabel: xb.Namespace}); err != nil {
			t.Fatal(err)
		}
		if len(secrets.Items) != 1 {
			t.Fatalf("%d Secrets of the scenario, want 1", len(secrets.Items))
		}
		deleteObject(t, &secrets.Items[0])
		waitProvider(t, name, metav1.ConditionFalse, v1alpha1.ReasonSecretNotFound, "consul")
	},
}

// podRange has a Node whose Pod range holds one of the backend's
// addresses: the controller, which denies the Nodes' Pod ranges, leaves it
// out and says so in status.dropped.
var podRange = scenario{
	name: "pod-range",
	start: func(t *testing.T, ns, _ string) *v1alpha1.ExternalBackend {
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{scenarioLabel: ns}},
			Spec:       corev1.NodeSpec{PodCIDR: podRangeCIDR, PodCIDRs: []string{podRangeCIDR}},
		}
		framework.Create(t, node)
		t.Cleanup(func() { deleteObject(t, node) })
		return startBackend(t, ns, func(xb *v1alpha1.ExternalBackend) {
			eps := &xb.Spec.Sources[0].Static.Endpoints
			*eps = append(*eps, v1alpha1.StaticEndpoint{Address: podRangeAddress, Zone: "zone-b", Hostname: "db-2"})
		})
	},
	done: func(t *testing.T, xb *v1alpha1.ExternalBackend) {
		framework.WaitAddresses(t, xb.Namespace, backendName, ipv4a, ipv4b, ipv6)
		framework.Eventually(t, framework.Timeout, podRangeAddress+" listed as dropped", func() error {
			cur := framework.Get(t, xb)
			if !slices.ContainsFunc(cur.Status.Dropped, func(d v1alpha1.DroppedAddress) bool { return d.Address == podRangeAddress }) {
				return fmt.Errorf("status.dropped is %v", cur.Status.Dropped)
			}
			return nil
		})
	},
}

// providerName is the name of the BackendProvider of a kind that the
// scenario in namespace ns creates.
func providerName(ns, kind string) string { return ns + "-" + kind }

// createProvider creates a BackendProvider for the scenario in ns, and
// deletes it when the test ends.
func createProvider(t *testing.T, ns, kind string, spec v1alpha1.BackendProviderSpec) *v1alpha1.BackendProvider {
	t.Helper()
	bp := &v1alpha1.BackendProvider{
		ObjectMeta: metav1.ObjectMeta{Name: providerName(ns, kind), Labels: map[string]string{scenarioLabel: ns}},
		Spec:       spec,
	}
	framework.Create(t, bp)
	t.Cleanup(func() { deleteObject(t, bp) })
	return bp
}

// namingProvider makes the backend's source name the BackendProvider.
func namingProvider(name string) func(*v1alpha1.ExternalBackend) {
	return func(xb *v1alpha1.ExternalBackend) {
		xb.Spec.Sources[0].ProviderRef = &v1alpha1.ProviderReference{Name: name}
	}
}

// labelNamespace sets tenantLabel on namespace ns to value; "" removes it.
func labelNamespace(t *testing.T, ns, value string) {
	t.Helper()
	label := "null"
	if value != "" {
		label = fmt.Sprintf("%q", value)
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, tenantLabel, label)
	n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	if err := framework.E().Client.Patch(ctx, n, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatalf("labelling namespace %s: %v", ns, err)
	}
}

// deleteObject deletes o, which may already be gone.
func deleteObject(t *testing.T, o client.Object) {
	t.Helper()
	if err := framework.E().Client.Delete(ctx, o); client.IgnoreNotFound(err) != nil {
		t.Errorf("deleting %s: %v", o.GetName(), err)
	}
}

// waitProvider waits until the BackendProvider's status reports kind, and
// Ready with status and reason, for its current generation.
func waitProvider(t *testing.T, name string, status metav1.ConditionStatus, reason, kind string) {
	t.Helper()
	framework.Eventually(t, framework.Timeout, fmt.Sprintf("BackendProvider %s Ready=%s/%s", name, status, reason), func() error {
		bp := &v1alpha1.BackendProvider{}
		if err := framework.E().Client.Get(ctx, client.ObjectKey{Name: name}, bp); err != nil {
			return err
		}
		c := meta.FindStatusCondition(bp.Status.Conditions, v1alpha1.ConditionReady)
		switch {
		case c == nil:
			return errors.New("no Ready condition yet")
		case c.Status != status || c.Reason != reason || c.ObservedGeneration != bp.Generation || bp.Status.Kind != kind:
			return fmt.Errorf("kind %q, Ready %s/%s for generation %d of %d: %s", bp.Status.Kind, c.Status, c.Reason, c.ObservedGeneration, bp.Generation, c.Message)
		}
		return nil
	})
}

// providersOf are the BackendProviders the scenario in namespace ns created.
func providersOf(t *testing.T, ns string) []v1alpha1.BackendProvider {
	t.Helper()
	var list v1alpha1.BackendProviderList
	if err := framework.E().Client.List(ctx, &list, client.MatchingLabels{scenarioLabel: ns}); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) == 0 {
		t.Fatalf("the scenario in %s created no BackendProvider", ns)
	}
	return list.Items
}

// checkNoProviderStatus fails the test if a provider of the scenario has a status.
func checkNoProviderStatus(t *testing.T, ns string) {
	t.Helper()
	for _, bp := range providersOf(t, ns) {
		if bp.Status.Kind != "" || len(bp.Status.Conditions) > 0 {
			t.Errorf("BackendProvider %s has status %+v; the controller should not have written it", bp.Name, bp.Status)
		}
	}
}

// neverReconciledNorReported shows neither the backend nor the scenario's
// providers touched: a controller whose informers cannot start reconciles
// neither.
func neverReconciledNorReported(t *testing.T, r *refusedRun) {
	t.Helper()
	neverReconciled(t, r)
	checkNoProviderStatus(t, r.xb.Namespace)
}

// providerStatusNotWritten shows the backend published through its
// provider, but the provider without status: `kubectl get bp` shows
// the platform team nothing of whether it can be used.
func providerStatusNotWritten(t *testing.T, r *refusedRun) {
	t.Helper()
	framework.WaitReady(t, r.xb)
	framework.WaitAddresses(t, r.xb.Namespace, backendName, ipv4a, ipv4b, ipv6)
	checkNoProviderStatus(t, r.xb.Namespace)
}

// TestReadmeProvidersAccepted has the API server validate, with a
// server-side dry run, the BackendProviders the chart's README shows.
func TestReadmeProvidersAccepted(t *testing.T) {
	dir, err := helmtest.ChartDir()
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var providers []*unstructured.Unstructured
	for _, block := range yamlBlocks(string(readme)) {
		for _, doc := range strings.Split(block, "\n---\n") {
			o := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(doc), &o.Object); err != nil {
				t.Fatalf("README block %q: %v", doc, err)
			}
			if o.GetKind() == "BackendProvider" {
				providers = append(providers, o)
			}
		}
	}
	if len(providers) < 2 {
		t.Fatalf("the README shows %d BackendProviders, want the consul and the static one", len(providers))
	}
	for _, o := range providers {
		if err := framework.E().Client.Create(ctx, o, client.DryRunAll); err != nil {
			t.Errorf("README BackendProvider %s: %v", o.GetName(), err)
		}
	}
}

// yamlBlocks are the ```yaml code blocks of a Markdown text.
func yamlBlocks(md string) []string {
	var out []string
	for _, part := range strings.Split(md, "```yaml\n")[1:] {
		block, _, _ := strings.Cut(part, "```")
		out = append(out, block)
	}
	return out
}
