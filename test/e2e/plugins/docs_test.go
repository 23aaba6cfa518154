package plugins_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/backendslice/backendslice/test/e2e/framework"
	"github.com/backendslice/backendslice/test/plugintest"
)

// TestDocsProviderAccepted has the API server validate, with a
// server-side dry run, the BackendProvider docs/plugins.md shows.
func TestDocsProviderAccepted(t *testing.T) {
	t.Parallel()
	root, err := plugintest.Root()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "plugins.md"))
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, block := range strings.Split(string(doc), "```yaml\n")[1:] {
		o := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(block[:strings.Index(block, "```")]), &o.Object); err != nil {
			t.Fatalf("a yaml block of docs/plugins.md: %v", err)
		}
		if o.GetKind() != "BackendProvider" {
			continue
		}
		found++
		if err := framework.E().Client.Create(ctx, o, client.DryRunAll); err != nil {
			t.Errorf("docs/plugins.md's BackendProvider %s: %v", o.GetName(), err)
		}
	}
	if found == 0 {
		t.Error("docs/plugins.md shows no BackendProvider")
	}
}
