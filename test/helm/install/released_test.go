package install

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"

	"github.com/backendslice/backendslice/internal/release"
	helmtest "github.com/backendslice/backendslice/test/helm"
	"github.com/backendslice/backendslice/test/kustomizetest"
	"github.com/backendslice/backendslice/test/releasetest"
)

// releasedName and releasedNamespace are the Helm release TestReleasedChart
// installs: apart from TestRelease's, whose CRDs it takes over.
const (
	releasedName      = "released"
	releasedNamespace = "backendslice-released"
)

// TestReleasedChart builds the release as `make release` does (for this
// machine's platform), installs its chart from the .tgz with its defaults
// as `helm install backendslice-<version>.tgz` does, and runs the
// controller binary taken out of the release's image as the installed
// Deployment runs it, under the chart's ServiceAccount and RBAC: the
// Deployment names the release's image, and the binary answers its
// probes, leads, makes a backend Ready, reads Secrets in its namespace
// alone, is refused nothing and stops on SIGTERM. The release then
// uninstalls.
func TestReleasedChart(t *testing.T) {
	host := v1.Platform{OS: runtime.GOOS, Architecture: runtime.GOARCH}
	res, err := releasetest.Build(ctx, t.TempDir(), []v1.Platform{host})
	if err != nil {
		t.Fatal(err)
	}
	names := release.Names{Version: res.Metadata.Version}
	ch, err := loader.Load(filepath.Join(res.Dir, names.Chart()))
	if err != nil {
		t.Fatal(err)
	}
	bin, err := releasetest.Binary(filepath.Join(res.Dir, release.ImageLayout), host)
	if err != nil {
		t.Fatal(err)
	}
	binPath := filepath.Join(t.TempDir(), "backendslice")
	if err := os.WriteFile(binPath, bin, 0o755); err != nil {
		t.Fatal(err)
	}

	cfg := helmConfig(t, releasedNamespace)
	inst := action.NewInstall(cfg)
	inst.ReleaseName, inst.Namespace, inst.CreateNamespace = releasedName, releasedNamespace, true
	// The CRDs are there already (the control plane starts with them, and
	// releases uninstalled before keep them): the release adopts them.
	inst.TakeOwnership = true
	rel, err := inst.Run(ch, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := action.NewUninstall(cfg).Run(releasedName); err != nil {
			t.Errorf("helm uninstall %s: %v", releasedName, err)
		}
	})
	checkAllExist(t, rel.Manifest)
	objs, err := helmtest.Objects(rel.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	d, err := kustomizetest.Deployment(objs)
	if err != nil {
		t.Fatal(err)
	}
	var images []string
	for _, c := range d.Spec.Template.Spec.Containers {
		images = append(images, c.Image)
	}
	if !slices.Equal(images, []string{res.Image.Reference}) {
		t.Errorf("the installed Deployment runs %q, want the release's image %s", images, res.Image.Reference)
	}
	runDeployment(t, binPath, objs)
}
