package main

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/backendslice/backendslice/test/e2e/framework"
)

// TestImportLiveNamespace writes the objects of the fixtures into a real
// API server, imports the namespace through --kubeconfig, and checks that
// the ExternalBackends are the same, byte for byte, as those imported from
// the files, and that the API server (the CRD's schema and rules) accepts
// each of them.
func TestImportLiveNamespace(t *testing.T) {
	cp, c := apiServer(t, "payments")
	ctx := context.Background()
	// These hold what the API server refuses (an addressType that does
	// not exist, an address that is no IP), so they exist only as files.
	fileOnlyFixtures := []string{"unknown-type.yaml"}
	var args []string
	for _, file := range importFixtures(t) {
		if slices.Contains(fileOnlyFixtures, filepath.Base(file)) {
			continue
		}
		args = append(args, "-f", file)
		createFixture(ctx, t, c, file)
	}
	kubeconfig := framework.WriteKubeconfig(t, cp.Config)
	for _, extra := range [][]string{nil, {"--adopt"}} {
		fromFiles, _, err := runImportCmd(t, "", append(args, extra...)...)
		if err != nil {
			t.Fatal(err)
		}
		live, stderr, err := runImportCmd(t, "", append([]string{"--kubeconfig", kubeconfig, "-n", "payments"}, extra...)...)
		if err != nil {
			t.Fatalf("%v\n%s", err, stderr)
		}
		if n := strings.Count(live, "kind: ExternalBackend\n"); n < 15 {
			t.Errorf("%d ExternalBackends from the live namespace, want 15 or more:\n%s", n, live)
		}
		sameLines(t, live, fromFiles)
		for _, doc := range strings.Split(live, "---\n") {
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
				t.Fatal(err)
			}
			if err := c.Create(ctx, u, client.DryRunAll); err != nil {
				t.Errorf("the API server refuses ExternalBackend %s (%q): %v", u.GetName(), extra, err)
			}
		}
	}
}

// sameLines fails at the first line where live and files differ.
func sameLines(t *testing.T, live, files string) {
	t.Helper()
	liveLines, fileLines := strings.Split(live, "\n"), strings.Split(files, "\n")
	for i := range max(len(liveLines), len(fileLines)) {
		if i >= len(liveLines) || i >= len(fileLines) || liveLines[i] != fileLines[i] {
			t.Fatalf("the live namespace gives other ExternalBackends than the files, from line %d:\nlive:\n%s\nfiles:\n%s",
				i+1, strings.Join(liveLines[i:min(i+10, len(liveLines))], "\n"), strings.Join(fileLines[i:min(i+10, len(fileLines))], "\n"))
		}
	}
}

// createFixture creates the Services, EndpointSlices and Endpoints of a
// fixture file.
func createFixture(ctx context.Context, t *testing.T, c client.Client, file string) {
	t.Helper()
	objs, err := readManifests(nil, []string{file})
	if err != nil {
		t.Fatal(err)
	}
	var all []client.Object
	for i := range objs.Services {
		all = append(all, &objs.Services[i])
	}
	for i := range objs.Slices {
		all = append(all, &objs.Slices[i])
	}
	for i := range objs.Endpoints {
		all = append(all, &objs.Endpoints[i])
	}
	for _, o := range all {
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
	}
}
