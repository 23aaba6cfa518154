package releasetest

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"io"
	"log"
	"maps"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/cli"
	"helm.sh/helm/v3/pkg/registry"

	"github.com/backendslice/backendslice/internal/image"
	"github.com/backendslice/backendslice/internal/release"
	"github.com/backendslice/backendslice/test/controlplane"
	helmtest "github.com/backendslice/backendslice/test/helm"
)

func TestMain(m *testing.M) {
	// `helm push` writes the chart file's modification time into the
	// manifest in the local time zone; the release workflow runs it with
	// TZ=UTC, and so does this test (set before any goroutine reads it).
	time.Local = time.UTC
	os.Exit(m.Run())
}

// TestRelease builds the release twice, as `make release` does, and checks
// that the two are the same bytes and that everything in it is what a
// consumer needs: SHA256SUMS that `sha256sum -c` accepts; a chart Helm
// loads and renders, running the release's image; the chart's OCI layout
// byte for byte what `helm push` of the .tgz sends to a registry, which
// Helm pulls back; an image for each platform Platforms chooses (this
// machine's in `make test`, linux/amd64 and linux/arm64 in `make
// release-test`) holding the released binaries of those architectures; SBOMs listing exactly the
// modules `go version -m` reads from each binary, at the versions go.mod
// selects; and archives holding the layouts.
func TestRelease(t *testing.T) {
	ctx := context.Background()
	var builds [2]release.Result
	for i := range builds {
		start := time.Now()
		res, err := Build(ctx, t.TempDir(), Platforms())
		if err != nil {
			t.Fatal(err)
		}
		builds[i] = res
		t.Logf("build %d: %s in %s: chart %s, image %s", i+1, res.Dir, time.Since(start).Round(time.Second), res.Chart, res.Image.Digest)
	}
	res := builds[0]
	var total int64
	for _, f := range res.Files {
		total += f.Size
		t.Logf("  %-42s %9d bytes  %s", f.Name, f.Size, f.SHA256)
	}
	t.Logf("  %-42s %9d bytes", "total", total)

	t.Run("two builds are the same bytes", func(t *testing.T) {
		a, b := readFile(t, res.Dir, release.ChecksumsFile), readFile(t, builds[1].Dir, release.ChecksumsFile)
		if !bytes.Equal(a, b) || res.Chart != builds[1].Chart || res.Image.Digest != builds[1].Image.Digest {
			t.Errorf("the builds differ:\n%s\n%s\nchart %s %s, image %s %s", a, b, res.Chart, builds[1].Chart, res.Image.Digest, builds[1].Image.Digest)
		}
	})
	t.Run("SHA256SUMS", func(t *testing.T) { checkChecksums(t, res) })
	t.Run("the chart renders with its defaults and runs the release's image", func(t *testing.T) { checkChart(t, res) })
	// A registry on the loopback for helm push and crane push, which the
	// release workflow runs.
	srv := httptest.NewServer(ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	t.Run("the chart's OCI layout is what helm push sends", func(t *testing.T) { checkChartLayout(t, res, host) })
	t.Run("the image has the binary of each platform", func(t *testing.T) { checkImage(t, res) })
	t.Run("crane push of the image layout sends the image index", func(t *testing.T) { checkCranePush(t, res, host) })
	t.Run("the SBOMs list the modules each binary links", func(t *testing.T) {
		selected := selectedModules(t)
		for _, p := range Platforms() {
			t.Run(p.String(), func(t *testing.T) { checkSBOM(t, res, p, selected) })
		}
	})
	t.Run("the archives hold the layouts", func(t *testing.T) {
		names := release.Names{Version: res.Metadata.Version}
		for archive, dir := range map[string]string{names.ChartArchive(): release.ChartLayout, names.ImageArchive(): release.ImageLayout} {
			if err := ArchiveHolds(filepath.Join(res.Dir, archive), filepath.Join(res.Dir, dir)); err != nil {
				t.Error(err)
			}
		}
	})
}

func readFile(t *testing.T, dir, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkChecksums runs `sha256sum -c` on SHA256SUMS and checks that it lists
// every file of the release directory, which holds what Names names.
func checkChecksums(t *testing.T, res release.Result) {
	cmd := exec.Command("sha256sum", "--strict", "-c", release.ChecksumsFile)
	cmd.Dir = res.Dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("sha256sum -c: %v\n%s", err, out)
	}
	var listed []string
	sc := bufio.NewScanner(bytes.NewReader(readFile(t, res.Dir, release.ChecksumsFile)))
	for sc.Scan() {
		_, name, _ := strings.Cut(sc.Text(), "  ")
		listed = append(listed, name)
	}
	entries, err := os.ReadDir(res.Dir)
	if err != nil {
		t.Fatal(err)
	}
	var files, dirs []string
	for _, e := range entries {
		switch {
		case e.IsDir():
			dirs = append(dirs, e.Name())
		case e.Name() != release.ChecksumsFile:
			files = append(files, e.Name())
		}
	}
	n := release.Names{Version: res.Metadata.Version}
	want := []string{n.Chart(), n.ChartArchive(), n.ImageArchive()}
	for _, p := range Platforms() {
		want = append(want, n.Binary(p), n.SBOM(p))
	}
	slices.Sort(want)
	if !slices.Equal(listed, want) || !slices.Equal(files, want) {
		t.Errorf("SHA256SUMS lists %q, the directory holds %q: want %q", listed, files, want)
	}
	if !slices.Equal(dirs, []string{release.ChartLayout, release.ImageLayout}) {
		t.Errorf("directories %q, want the two layouts", dirs)
	}
}

// checkChart loads the packaged chart as `helm install <tgz>` does,
// renders it with its defaults, and compares the result with the chart in
// the repository: the same manifest, whose Deployment runs the image the
// release built.
func checkChart(t *testing.T, res release.Result) {
	ch, err := loader.Load(filepath.Join(res.Dir, release.Names{Version: res.Metadata.Version}.Chart()))
	if err != nil {
		t.Fatal(err)
	}
	if ch.Metadata.Version != res.Metadata.Version || ch.Metadata.AppVersion != res.Metadata.Version {
		t.Errorf("chart version %s appVersion %s, want %s", ch.Metadata.Version, ch.Metadata.AppVersion, res.Metadata.Version)
	}
	manifest, _, err := helmtest.Render(ch, nil)
	if err != nil {
		t.Fatal(err)
	}
	src, err := helmtest.Load()
	if err != nil {
		t.Fatal(err)
	}
	want, _, err := helmtest.Render(src, nil)
	if err != nil {
		t.Fatal(err)
	}
	if manifest != want {
		t.Errorf("the packaged chart renders otherwise than charts/backendslice")
	}
	objs, err := helmtest.Objects(manifest)
	if err != nil {
		t.Fatal(err)
	}
	var images []string
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		var d struct {
			Spec struct {
				Template struct {
					Spec struct {
						Containers []struct{ Image string } `json:"containers"`
					} `json:"spec"`
				} `json:"template"`
			} `json:"spec"`
		}
		js, err := o.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(js, &d); err != nil {
			t.Fatal(err)
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			images = append(images, c.Image)
		}
	}
	if !slices.Equal(images, []string{res.Image.Reference}) {
		t.Errorf("the chart's Deployment runs %q, want the release's image %s", images, res.Image.Reference)
	}
}

// checkChartLayout reads the chart's OCI layout: one manifest tagged with
// the version, Helm's config and content media types, the .tgz as its
// layer. Then it runs `helm push` of the .tgz (Helm's own code) into a
// registry on the loopback and checks the registry holds the layout's
// manifest, byte for byte, and that `helm pull` gives the chart back.
func checkChartLayout(t *testing.T, res release.Result, host string) {
	version := res.Metadata.Version
	tgzPath := filepath.Join(res.Dir, release.Names{Version: version}.Chart())
	tgz := readFile(t, res.Dir, filepath.Base(tgzPath))
	p, desc, err := Only(filepath.Join(res.Dir, release.ChartLayout))
	if err != nil {
		t.Fatal(err)
	}
	if desc.MediaType != types.OCIManifestSchema1 || desc.Annotations[image.AnnotationRefName] != version || desc.Digest.String() != res.Chart.String() {
		t.Errorf("index.json lists %s %s named %q, want an OCI manifest %s named %s", desc.MediaType, desc.Digest, desc.Annotations[image.AnnotationRefName], res.Chart, version)
	}
	blob := func(d v1.Hash) []byte {
		rc, err := p.Blob(d)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = rc.Close() }()
		b, err := io.ReadAll(rc)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	manifestBytes := blob(desc.Digest)
	var m ocispec.Manifest
	if err := json.Unmarshal(manifestBytes, &m); err != nil {
		t.Fatal(err)
	}
	if m.Config.MediaType != registry.ConfigMediaType || len(m.Layers) != 1 || m.Layers[0].MediaType != registry.ChartLayerMediaType {
		t.Errorf("manifest config %s, layers %v: want Helm's config and one chart content layer", m.Config.MediaType, m.Layers)
	}
	if len(m.Layers) == 1 && !bytes.Equal(blob(v1.Hash{Algorithm: "sha256", Hex: m.Layers[0].Digest.Encoded()}), tgz) {
		t.Errorf("the layer is not the released .tgz")
	}
	var meta chart.Metadata
	if err := json.Unmarshal(blob(v1.Hash{Algorithm: "sha256", Hex: m.Config.Digest.Encoded()}), &meta); err != nil || meta.Name != "backendslice" || meta.Version != version {
		t.Errorf("config %+v (%v): want the chart's metadata", meta, err)
	}

	// helm push and helm pull, as the CLI runs them.
	rc, err := registry.NewClient(registry.ClientOptPlainHTTP(), registry.ClientOptWriter(io.Discard),
		registry.ClientOptCredentialsFile(filepath.Join(t.TempDir(), "config.json")))
	if err != nil {
		t.Fatal(err)
	}
	cfg := &action.Configuration{RegistryClient: rc}
	push := action.NewPushWithOpts(action.WithPushConfig(cfg), action.WithPlainHTTP(true))
	push.Settings = cli.New()
	if _, err := push.Run(tgzPath, "oci://"+host+"/charts"); err != nil {
		t.Fatalf("helm push: %v", err)
	}
	ref := host + "/charts/backendslice:" + version
	pulled, err := rc.Pull(ref)
	if err != nil {
		t.Fatalf("helm pull %s: %v", ref, err)
	}
	if pulled.Manifest.Digest != res.Chart.String() || !bytes.Equal(pulled.Manifest.Data, manifestBytes) {
		t.Errorf("helm push sent manifest %s:\n%s\nthe layout holds %s:\n%s", pulled.Manifest.Digest, pulled.Manifest.Data, res.Chart, manifestBytes)
	}
	if !bytes.Equal(pulled.Chart.Data, tgz) {
		t.Errorf("helm pull gave another chart than the released .tgz")
	}
}

// checkImage reads the image layout: an index of linux/amd64 and
// linux/arm64, each holding the released binary of its platform, for that
// machine and static.
func checkImage(t *testing.T, res release.Result) {
	dir := filepath.Join(res.Dir, release.ImageLayout)
	idx, err := Index(dir)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := idx.Digest(); err != nil || d != res.Image.Digest {
		t.Errorf("the layout's index %s (%v), the build's %s", d, err, res.Image.Digest)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var platforms []string
	for _, d := range m.Manifests {
		if d.Platform != nil {
			platforms = append(platforms, d.Platform.String())
		}
	}
	slices.Sort(platforms)
	if want := PlatformNames(Platforms()); !slices.Equal(platforms, want) {
		t.Errorf("index platforms %q, want %q", platforms, want)
	}
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	for _, p := range Platforms() {
		bin, err := Binary(dir, p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(bin, readFile(t, res.Dir, release.Names{Version: res.Metadata.Version}.Binary(p))) {
			t.Errorf("%s: the image's binary is not the released one", p)
		}
		f, err := elf.NewFile(bytes.NewReader(bin))
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if f.Machine != machines[p.Architecture] || f.Class != elf.ELFCLASS64 {
			t.Errorf("%s: the binary is for %s %s", p, f.Machine, f.Class)
		}
		if slices.ContainsFunc(f.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_INTERP }) {
			t.Errorf("%s: the binary asks for a dynamic loader", p)
		}
	}
	// The binary of this machine's platform says which release it is.
	host := v1.Platform{OS: runtime.GOOS, Architecture: runtime.GOARCH}
	if !slices.ContainsFunc(Platforms(), host.Equals) {
		t.Logf("no binary of the release runs on %s", host)
		return
	}
	out, err := exec.Command(filepath.Join(res.Dir, release.Names{Version: res.Metadata.Version}.Binary(host)), "version").CombinedOutput()
	if err != nil {
		t.Fatalf("backendslice version: %v\n%s", err, out)
	}
	for _, want := range []string{"version: " + res.Metadata.Version + "\n", "commit: " + cmp.Or(res.Metadata.Revision, "unknown") + "\n"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("backendslice version does not say %q:\n%s", want, out)
		}
	}
}

// checkCranePush runs `crane push <layout> <ref>` as the release workflow
// does, with crane at the version go.mod pins, and checks that the
// registry got the image index the release built.
func checkCranePush(t *testing.T, res release.Result, host string) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	goList := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "github.com/google/go-containerregistry")
	goList.Dir = root
	version, err := goList.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	ref := host + "/backendslice/backendslice:" + res.Metadata.Version
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	crane := exec.CommandContext(ctx, "go", "run", "github.com/google/go-containerregistry/cmd/crane@"+strings.TrimSpace(string(version)),
		"push", "--insecure", filepath.Join(res.Dir, release.ImageLayout), ref)
	var stderr bytes.Buffer
	crane.Stderr = &stderr
	out, err := crane.Output()
	if err != nil {
		t.Fatalf("crane push: %v\n%s", err, stderr.String())
	}
	if got, want := strings.TrimSpace(string(out)), host+"/backendslice/backendslice@"+res.Image.Digest.String(); got != want {
		t.Errorf("crane push pushed %s, want %s", got, want)
	}
}

// module is a Go module at a version.
type module struct{ path, version string }

// selectedModules are the modules of the main module's build list, each
// at the version go.mod selects (`go list -m all`).
func selectedModules(t *testing.T) map[string]string {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Path}} {{.Version}}{{with .Replace}} {{.Path}} {{.Version}}{{end}}", "all")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -m all: %v", err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		switch len(f) {
		case 1: // the main module
		case 2:
			m[f[0]] = f[1]
		case 4: // replaced: what is linked is the replacement
			m[f[2]] = f[3]
		}
	}
	return m
}

// goVersionM is what `go version -m` reads from a binary: the Go version,
// and the modules it links (each replacement in place of what it
// replaces).
func goVersionM(t *testing.T, path string) (string, []module) {
	t.Helper()
	out, err := exec.Command("go", "version", "-m", path).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	_, goVersion, _ := strings.Cut(lines[0], ": ")
	var mods []module
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[0] == "dep":
			mods = append(mods, module{f[1], f[2]})
		case len(f) >= 3 && f[0] == "=>":
			mods[len(mods)-1] = module{f[1], f[2]}
		}
	}
	return goVersion, mods
}

// checkSBOM decodes the SBOM of platform p with the CycloneDX library and
// holds it to what `go version -m` reads from the released binary and to
// the versions go.mod selects.
func checkSBOM(t *testing.T, res release.Result, p v1.Platform, selected map[string]string) {
	names := release.Names{Version: res.Metadata.Version}
	var bom cdx.BOM
	if err := cdx.NewBOMDecoder(bytes.NewReader(readFile(t, res.Dir, names.SBOM(p))), cdx.BOMFileFormatJSON).Decode(&bom); err != nil {
		t.Fatal(err)
	}
	if bom.BOMFormat != cdx.BOMFormat || bom.SpecVersion != release.SBOMSpecVersion || bom.Metadata == nil || bom.Metadata.Component == nil || bom.Components == nil {
		t.Fatalf("not a CycloneDX %s SBOM with metadata and components", release.SBOMSpecVersion)
	}
	binPath := filepath.Join(res.Dir, names.Binary(p))
	sum := sha256.Sum256(readFile(t, res.Dir, names.Binary(p)))
	app := bom.Metadata.Component
	if app.Name != "backendslice" || app.Version != res.Metadata.Version || app.Hashes == nil ||
		!slices.Contains(*app.Hashes, cdx.Hash{Algorithm: cdx.HashAlgoSHA256, Value: hex.EncodeToString(sum[:])}) {
		t.Errorf("the SBOM describes %s %s %v, want backendslice %s with the binary's sha256", app.Name, app.Version, app.Hashes, res.Metadata.Version)
	}
	if app.Properties == nil || !slices.Contains(*app.Properties, cdx.Property{Name: "cdx:gomod:build:env:GOARCH", Value: p.Architecture}) {
		t.Errorf("the SBOM's properties %v do not say GOARCH=%s", app.Properties, p.Architecture)
	}
	if want := res.Metadata.Created.UTC().Format(time.RFC3339); bom.Metadata.Timestamp != want {
		t.Errorf("timestamp %s, want %s", bom.Metadata.Timestamp, want)
	}

	goVersion, linked := goVersionM(t, binPath)
	got := map[module]bool{}
	var stdlib string
	for _, c := range *bom.Components {
		if c.Name == release.StdlibName {
			stdlib = c.Version
			continue
		}
		got[module{c.Name, c.Version}] = true
		if want := "pkg:golang/" + c.Name + "@" + c.Version; c.PackageURL != want {
			t.Errorf("%s %s has purl %s, want %s", c.Name, c.Version, c.PackageURL, want)
		}
	}
	want := map[module]bool{}
	for _, m := range linked {
		want[m] = true
		if v, ok := selected[m.path]; !ok || v != m.version {
			t.Errorf("the binary links %s %s; go.mod selects %q", m.path, m.version, v)
		}
	}
	if len(want) < 50 || !maps.Equal(got, want) {
		t.Errorf("the SBOM lists %d modules, go version -m %d:\nonly in the SBOM %v\nonly in the binary %v", len(got), len(want), missing(got, want), missing(want, got))
	}
	if "go"+stdlib != goVersion {
		t.Errorf("the SBOM's standard library is %s; the binary was built by %s", stdlib, goVersion)
	}
	t.Logf("%s: %d modules and the standard library %s", p, len(got), stdlib)
}

// missing are the keys of a that b lacks.
func missing(a, b map[module]bool) []module {
	var out []module
	for k := range a {
		if !b[k] {
			out = append(out, k)
		}
	}
	return out
}
