package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/controllers"
	"github.com/backendslice/backendslice/test/controlplane"
)

var update = flag.Bool("update", false, "rewrite the golden files of the render tests from what render prints")

// render runs `backendslice render` with args and returns what it printed.
func render(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd := renderCommand()
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

// golden compares got with testdata/render/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	goldenFile(t, filepath.Join("testdata", "render", name), got)
}

// goldenFile compares got with path, or rewrites it with -update.
func goldenFile(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update to create it)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("output differs from %s (run go test -run %s -update if the change is intended):\n%s", path, t.Name(), got)
	}
}

// apiServer starts a real API server for the test, with namespaces
// created, and returns a client of it; it stops when the test ends.
func apiServer(t *testing.T, namespaces ...string) (*controlplane.ControlPlane, client.Client) {
	t.Helper()
	scheme, err := controllers.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	return controlplane.ForTest(t, scheme, namespaces...)
}

// TestRenderSamples renders each sample, the static sources a snapshot is
// not needed for.
func TestRenderSamples(t *testing.T) {
	samples, err := filepath.Glob(filepath.Join("..", "..", "config", "samples", "*.yaml"))
	if err != nil || len(samples) == 0 {
		t.Fatalf("no samples: %v", err)
	}
	for _, sample := range samples {
		name := strings.TrimSuffix(filepath.Base(sample), ".yaml")
		t.Run(name, func(t *testing.T) {
			got, err := render(t, "-f", sample, "-n", "payments")
			if err != nil {
				t.Fatalf("%v\n%s", err, got)
			}
			golden(t, "sample-"+name+".golden", got)
		})
	}
}

// TestRenderAWSSamples renders the ElastiCache and MemoryDB samples, the
// caches' nodes answered by a snapshot: one Service and slice a backend,
// each node at its own port, zone and hostname.
func TestRenderAWSSamples(t *testing.T) {
	got, err := render(t, "-f", "../../config/samples/aws/", "--snapshot", "testdata/render/aws-samples-snapshot.yaml")
	if err != nil {
		t.Fatalf("%v\n%s", err, got)
	}
	golden(t, "sample-aws.golden", got)
}

// TestRenderSnapshot renders backends whose dns and awsRDS sources are
// answered by a snapshot, from a file that also holds another kind.
func TestRenderSnapshot(t *testing.T) {
	got, err := render(t, "-f", "testdata/render/backends.yaml", "--snapshot", "testdata/render/snapshot.yaml", "-n", "payments")
	if err != nil {
		t.Fatalf("%v\n%s", err, got)
	}
	golden(t, "backends.golden", got)
}

// TestRenderFolderAndStdin reads the same manifests as a folder and from
// stdin as from the file.
func TestRenderFolderAndStdin(t *testing.T) {
	want, err := render(t, "-f", "../../config/samples/headless-ldap.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	data, err := os.ReadFile("../../config/samples/headless-ldap.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ldap.yml"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := render(t, "-f", dir); err != nil || got != want {
		t.Errorf("from a folder: %v\n%s", err, got)
	}
	var out bytes.Buffer
	cmd := renderCommand()
	cmd.SetArgs([]string{"-f", "-"})
	cmd.SetIn(bytes.NewReader(data))
	cmd.SetOut(&out)
	if err := cmd.Execute(); err != nil || out.String() != want {
		t.Errorf("from stdin: %v\n%s", err, out.String())
	}
}

// TestRenderErrors checks that what the controller could not write, or
// render cannot know, fails with a message that names the culprit.
func TestRenderErrors(t *testing.T) {
	dir := t.TempDir()
	write := fileWriter(t, dir)
	const head = "apiVersion: backendslice.io/v1alpha1\nkind: ExternalBackend\n"
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{
			name: "dns source without a snapshot",
			args: []string{"-f", "testdata/render/backends.yaml"},
			want: []string{"ExternalBackend catalog/search: source vendor", "--snapshot", `"catalog/search"`},
		},
		{
			name: "snapshot without the source",
			args: []string{"-f", "testdata/render/backends.yaml", "--snapshot", write("partial.yaml", "catalog/search:\n  other: []\n")},
			want: []string{"ExternalBackend catalog/search: source vendor", `source "vendor"`},
		},
		{
			name: "invalid Service name",
			args: []string{"-f", write("invalid.yaml", head+"metadata: {name: 1password}\nspec:\n  service: {ports: [{name: https, port: 443}]}\n  sources: [{name: s, static: {endpoints: [{address: 192.0.2.1}]}}]\n")},
			want: []string{"ExternalBackend default/1password", "spec.service.name"},
		},
		{
			name: "unknown field",
			args: []string{"-f", write("typo.yaml", head+"metadata: {name: db}\nspec:\n  service: {ports: [{name: pg, port: 5432, targetport: 1}]}\n  sources: [{name: s, static: {endpoints: [{address: 192.0.2.1}]}}]\n")},
			want: []string{"typo.yaml:1", "the API server would refuse it", `unknown field "spec.service.ports[0].targetport"`},
		},
		{
			name: "unknown version",
			args: []string{"-f", write("v2.yaml", "apiVersion: backendslice.io/v2\nkind: ExternalBackend\nmetadata: {name: db}\n")},
			want: []string{"backendslice.io/v2", "serves versions [v1alpha1]"},
		},
		{
			// Render once printed this backend; the API server refuses it.
			name: "a CEL rule refuses it",
			args: []string{"-f", write("long-drain.yaml", "# a comment\n"+head+"metadata: {name: db}\nspec:\n  drainPeriod: 2h\n  service: {ports: [{name: pg, port: 5432}]}\n  sources: [{name: s, static: {endpoints: [{address: 192.0.2.1}]}}]\n")},
			want: []string{"long-drain.yaml:2", "the API server would refuse it", `spec.drainPeriod: Invalid value: "2h": spec.drainPeriod: 2h is longer than the maximum of 1h; use 1h or less`},
		},
		{
			name: "bad denied CIDR",
			args: []string{"-f", "../../config/samples/headless-ldap.yaml", "--denied-cidrs", "10.0.0.0/33"},
			want: []string{"--denied-cidrs"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := render(t, tc.args...)
			if err == nil {
				t.Fatalf("render succeeded:\n%s", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestRenderDefaultsMatchTheAPIServer holds render's reading of manifests
// to the API server's: the controller sees objects with the CRD's defaults
// applied by the API server, render applies them through validate's
// admission, and the two must agree for every manifest the golden files
// come from.
func TestRenderDefaultsMatchTheAPIServer(t *testing.T) {
	_, c := apiServer(t, "payments", "catalog")
	ctx := context.Background()
	var files []string
	for _, pattern := range []string{"*.yaml", "aws/*.yaml"} {
		found, err := filepath.Glob(filepath.Join("..", "..", "config", "samples", pattern))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, found...)
	}
	for _, file := range append(files, "testdata/render/backends.yaml") {
		rendered, err := readBackends(ctx, nil, file, "payments")
		if err != nil {
			t.Fatal(err)
		}
		raw := rawBackends(t, file)
		if len(raw) != len(rendered) {
			t.Fatalf("%s: render read %d ExternalBackends, the file holds %d", file, len(rendered), len(raw))
		}
		for i, u := range raw {
			if u.GetNamespace() == "" {
				u.SetNamespace("payments")
			}
			if err := c.Create(ctx, u, client.DryRunAll); err != nil {
				t.Fatalf("%s: API server refused %s: %v", file, u.GetName(), err)
			}
			stored := &v1alpha1.ExternalBackend{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, stored); err != nil {
				t.Fatal(err)
			}
			if !apiequality.Semantic.DeepEqual(stored.Spec, rendered[i].Spec) {
				t.Errorf("%s: %s: the API server stores spec\n%+v\nrender reads\n%+v", file, u.GetName(), stored.Spec, rendered[i].Spec)
			}
		}
	}
}

// rawBackends reads the ExternalBackends of file as written, without defaults.
func rawBackends(t *testing.T, file string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	for _, doc := range strings.Split(string(data), "\n---\n") {
		js, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(js); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if u.GetKind() == "ExternalBackend" {
			out = append(out, u)
		}
	}
	return out
}

// TestRenderDefaultsANullField: a field written as null gets the CRD's
// default, as the API server gives it. Render once read addressTypes: null
// as no family and dropped every address the controller publishes.
func TestRenderDefaultsANullField(t *testing.T) {
	path := filepath.Join(t.TempDir(), "null.yaml")
	data := "apiVersion: backendslice.io/v1alpha1\nkind: ExternalBackend\nmetadata: {name: db}\nspec:\n  addressTypes: null\n" +
		"  service: {ports: [{name: pg, port: 5432}]}\n  sources: [{name: s, static: {endpoints: [{address: 192.0.2.1}, {address: \"2001:db8::1\"}]}}]\n"
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := render(t, "-f", path)
	if err != nil || strings.Contains(out, "# dropped") || !strings.Contains(out, "addressType: IPv4") || !strings.Contains(out, "addressType: IPv6") {
		t.Errorf("render: %v\n%s", err, out)
	}
}

// fileWriter returns a function that writes content to a file of dir and
// returns its path, failing t when it cannot.
func fileWriter(t *testing.T, dir string) func(name, content string) string {
	return func(name, content string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
}
