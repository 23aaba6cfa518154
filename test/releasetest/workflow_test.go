package releasetest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/backendslice/backendslice/internal/image"
	"github.com/backendslice/backendslice/internal/release"
	"github.com/backendslice/backendslice/test/controlplane"
)

// TestWorkflowNamesTheRelease checks that the release workflow
// (.github/workflows/release.yaml, linted in test/workflows) names what
// make release writes: the release directory, the layouts' index.json,
// the chart, each platform's SBOM and SHA256SUMS; and that it pushes the
// image to the repository the chart's default image names (ghcr.io/ and
// the GitHub repository of the chart's source).
func TestWorkflowNamesTheRelease(t *testing.T) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, ".github", "workflows", "release.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	wf := string(b)
	n := release.Names{Version: "$VERSION"}
	want := []string{
		"dir=bin/release/${version}",
		`"$DIR/` + release.ImageLayout + `/index.json"`,
		`"$DIR/` + release.ChartLayout + `/index.json"`,
		`"$DIR/` + release.ImageLayout + `/blobs/sha256/`,
		`"$DIR/` + n.Chart() + `"`,
		`"$DIR/` + release.ChecksumsFile + `"`,
		"make release VERSION=",
	}
	for _, p := range image.Platforms {
		want = append(want, `"$DIR/`+n.SBOM(p)+`"`)
	}
	for _, w := range want {
		if !strings.Contains(wf, w) {
			t.Errorf("release.yaml does not name %s", w)
		}
	}
	md, err := image.NewMetadata(context.Background(), root, "")
	if err != nil {
		t.Fatal(err)
	}
	repo, ok := strings.CutPrefix(md.Source, "https://github.com/")
	if !ok || image.Repository != "ghcr.io/"+repo || !strings.Contains(wf, "IMAGE: ghcr.io/${{ github.repository }}\n") {
		t.Errorf("release.yaml pushes to ghcr.io/<the GitHub repository>; the chart's default image is %s and its source %s", image.Repository, md.Source)
	}
}
