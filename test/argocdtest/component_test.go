package argocdtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/backendslice/backendslice/test/controlplane"
	"github.com/backendslice/backendslice/test/kustomizetest"
)

// argocdCM is argocd-cm as Argo CD's install.yaml ships it: no namespace
// (the kustomization that installs Argo CD sets it), Argo CD's labels, and
// a key of the user's own.
const argocdCM = `apiVersion: v1
kind: ConfigMap
metadata:
  name: argocd-cm
  labels:
    app.kubernetes.io/name: argocd-cm
    app.kubernetes.io/part-of: argocd
data:
  url: https://argocd.example.com
`

// TestComponentInstallsTheChecks builds, with the kustomize library, an
// Argo CD install kustomization that adds config/argocd as a component,
// and checks the argocd-cm it renders: still one ConfigMap of that name (no
// hash suffix), in the namespace the kustomization sets, with its labels
// and its own keys, and the two health checks byte for byte the files the
// other tests run; then runs the checks it holds over every fixture.
func TestComponentInstallsTheChecks(t *testing.T) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		// namespace is the kustomization's namespace: field, if any; the
		// docs' kustomization sets argocd.
		namespace string
		fromDocs  bool
	}{
		{"the kustomization docs/gitops.md shows", "argocd", true},
		{"no namespace", "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			// kustomize takes a component's path relative to the kustomization only.
			component, err := filepath.Rel(dir, filepath.Join(root, "config", "argocd"))
			if err != nil {
				t.Fatal(err)
			}
			kustomization := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
			if c.namespace != "" {
				kustomization += "namespace: " + c.namespace + "\n"
			}
			kustomization += "resources:\n  - argocd-cm.yaml\ncomponents:\n  - " + component + "\n"
			if c.fromDocs {
				kustomization = docsKustomization(t, root, component)
			}
			for name, content := range map[string]string{"kustomization.yaml": kustomization, "argocd-cm.yaml": argocdCM} {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			objs, err := kustomizetest.Build(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(objs) != 1 || objs[0].GetKind() != "ConfigMap" || objs[0].GetName() != "argocd-cm" || objs[0].GetNamespace() != c.namespace {
				t.Fatalf("rendered %s, want the one ConfigMap %s/argocd-cm", names(objs), c.namespace)
			}
			cm := objs[0]
			if cm.GetLabels()["app.kubernetes.io/part-of"] != "argocd" {
				t.Errorf("argocd-cm's labels %v: Argo CD's are gone", cm.GetLabels())
			}
			data, _, err := unstructured.NestedStringMap(cm.Object, "data")
			if err != nil {
				t.Fatal(err)
			}
			if data["url"] != "https://argocd.example.com" || len(data) != 3 {
				t.Errorf("argocd-cm's keys %v: want url kept and the two checks added", keys(data))
			}
			checks, err := ChecksOf(data)
			if err != nil {
				t.Fatal(err)
			}
			for kind, script := range Shipped {
				if checks[kind] != script {
					t.Errorf("argocd-cm's %s differs from the check the tests run (%d bytes, want %d)", ConfigMapKey(kind), len(checks[kind]), len(script))
				}
			}
			for _, f := range fixtures {
				got, err := checks.HealthOf(load(t, f.file))
				if err != nil {
					t.Fatalf("%s: %v", f.file, err)
				}
				if got.Status != f.health || !strings.Contains(got.Message, f.message) {
					t.Errorf("%s: argocd-cm's check says %s %q, want %s with a message containing %q", f.file, got.Status, got.Message, f.health, f.message)
				}
			}
		})
	}
}

// docsKustomization is the kustomization docs/gitops.md shows, with
// Argo CD's install.yaml replaced by argocd-cm.yaml and the component
// taken from this checkout (at component) instead of GitHub.
func docsKustomization(t *testing.T, root, component string) string {
	t.Helper()
	const first = "# kustomization.yaml of your Argo CD install"
	const install, remote = "https://raw.githubusercontent.com/argoproj/argo-cd/", "https://github.com/backendslice/backendslice//config/argocd?ref="
	doc, err := os.ReadFile(filepath.Join(root, "docs", "gitops.md"))
	if err != nil {
		t.Fatal(err)
	}
	start := strings.Index(string(doc), first)
	if start < 0 {
		t.Fatalf("docs/gitops.md has no block starting %q", first)
	}
	block, _, _ := strings.Cut(string(doc[start:]), "```")
	replaced := 0
	var lines []string
	for _, l := range strings.Split(block, "\n") {
		if i := strings.Index(l, install); i >= 0 {
			l, replaced = l[:i]+"argocd-cm.yaml", replaced+1
		}
		if i := strings.Index(l, remote); i >= 0 {
			l, replaced = l[:i]+component, replaced+1
		}
		lines = append(lines, l)
	}
	if replaced != 2 {
		t.Fatalf("docs/gitops.md's kustomization names neither Argo CD's install.yaml nor %s once each:\n%s", remote, block)
	}
	return strings.Join(lines, "\n")
}

// TestFixturesCoverEveryStatus: the fixtures the rendered checks run over
// hold a Healthy, a Progressing and a Degraded object of each kind.
func TestFixturesCoverEveryStatus(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range fixtures {
		seen[load(t, f.file).GetKind()+" "+f.health] = true
	}
	for kind := range Shipped {
		for _, health := range []string{"Healthy", "Progressing", "Degraded"} {
			if !seen[kind+" "+health] {
				t.Errorf("no fixture of a %s that is %s", kind, health)
			}
		}
	}
}

// names are objects' kinds, namespaces and names, for messages.
func names(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.GetKind()+" "+o.GetNamespace()+"/"+o.GetName())
	}
	return out
}

// keys are a map's keys, for messages.
func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
