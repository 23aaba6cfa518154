package image_test

import (
	"archive/tar"
	"bytes"
	"cmp"
	"context"
	"crypto/x509"
	"debug/elf"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/backendslice/backendslice/internal/image"
	"github.com/backendslice/backendslice/test/controlplane"
	helmtest "github.com/backendslice/backendslice/test/helm"
	"github.com/backendslice/backendslice/test/releasetest"
)

// source is the repository the image's source label names.
const source = "https://github.com/backendslice/backendslice"

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// TestChartDefaultIsTheBuiltImage checks that the Helm chart, installed with
// its defaults, runs the image `make image` tags: values.yaml names the
// repository the builder tags and leaves the tag to the chart's appVersion,
// and the rendered Deployment's image is the builder's reference.
func TestChartDefaultIsTheBuiltImage(t *testing.T) {
	root := repoRoot(t)
	md, err := image.NewMetadata(context.Background(), root, "")
	if err != nil {
		t.Fatal(err)
	}
	chart, err := image.ReadChart(filepath.Join(root, image.ChartDir))
	if err != nil {
		t.Fatal(err)
	}
	if want := image.Repository + ":" + chart.AppVersion; md.Reference() != want {
		t.Errorf("builder tags %s, want %s", md.Reference(), want)
	}
	if md.Source != source || !slices.Contains(chart.Sources, source) {
		t.Errorf("source label %q, chart sources %q: want %s", md.Source, chart.Sources, source)
	}

	var values struct {
		Image struct {
			Repository string `json:"repository"`
			Tag        string `json:"tag"`
			Digest     string `json:"digest"`
		} `json:"image"`
	}
	b, err := os.ReadFile(filepath.Join(root, image.ChartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &values); err != nil {
		t.Fatal(err)
	}
	if v := values.Image; v.Repository != image.Repository || (v.Tag != "" && v.Tag != md.Version) || v.Digest != "" {
		t.Errorf("values.yaml image %+v: want repository %s, tag empty (the appVersion) or %s, no digest", v, image.Repository, md.Version)
	}

	// What the chart's templates (backendslice.image) make of the defaults.
	ch, err := helmtest.Load()
	if err != nil {
		t.Fatal(err)
	}
	manifest, _, err := helmtest.Render(ch, nil)
	if err != nil {
		t.Fatal(err)
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
		containers, _, err := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range containers {
			m, ok := c.(map[string]any)
			if !ok {
				t.Fatalf("container %v is not an object", c)
			}
			img, _, _ := unstructured.NestedString(m, "image")
			images = append(images, img)
		}
	}
	if len(images) != 1 || images[0] != md.Reference() {
		t.Errorf("the chart's default Deployment runs %q, want [%s]", images, md.Reference())
	}
}

func TestSourceDateEpoch(t *testing.T) {
	for _, tc := range []struct {
		env     string
		want    time.Time
		wantErr bool
	}{
		{env: "", want: time.Unix(0, 0)},
		{env: "1700000000", want: time.Unix(1700000000, 0)},
		{env: "yesterday", wantErr: true},
		{env: "-1", wantErr: true},
	} {
		t.Setenv("SOURCE_DATE_EPOCH", tc.env)
		got, err := image.SourceDateEpoch()
		if (err != nil) != tc.wantErr || !got.Equal(tc.want) {
			t.Errorf("SOURCE_DATE_EPOCH=%q: %v, %v; want %v, error %v", tc.env, got, err, tc.want, tc.wantErr)
		}
	}
}

// file is one entry of an image's layer.
type file struct {
	hdr  *tar.Header
	data []byte
}

// wantFiles is the whole content of the layer: no shell, no /bin, no libc.
var wantFiles = []string{
	"backendslice",
	"etc/", "etc/group", "etc/passwd", "etc/ssl/", "etc/ssl/certs/", "etc/ssl/certs/ca-certificates.crt",
	"home/", "home/nonroot/",
	"tmp/",
}

var elfMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// TestImage builds the image for the platforms releasetest.Platforms
// chooses (this machine's in `make test`, both in `make release-test`; the
// binaries once), reads
// the OCI layout back, checks every image's config and files, runs the
// linux/amd64 binary taken out of its layer, and builds it a second time
// to check the digest does not change.
func TestImage(t *testing.T) {
	root := repoRoot(t)
	ctx := context.Background()
	tmp := t.TempDir()

	md, err := image.NewMetadata(ctx, root, "")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	bins, err := image.Compile(ctx, root, tmp, releasetest.Platforms(), md)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("compiled %d platforms in %s", len(bins), time.Since(start).Round(time.Second))
	dir, archive := filepath.Join(tmp, "image"), filepath.Join(tmp, "image.tar")
	start = time.Now()
	res, err := image.Assemble(bins, md, dir, archive)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("assembled %s %s in %s", res.Reference, res.Digest, time.Since(start).Round(time.Second))
	for _, img := range res.Images {
		t.Logf("  %s %s %.1f MiB", img.Platform, img.Digest, float64(img.Size)/(1<<20))
	}

	idx := readLayout(t, dir, res)
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if im.MediaType != types.OCIImageIndex {
		t.Errorf("index media type %s, want %s", im.MediaType, types.OCIImageIndex)
	}
	var platforms []string
	for _, desc := range im.Manifests {
		if desc.Platform == nil {
			t.Fatalf("manifest %s has no platform", desc.Digest)
		}
		platforms = append(platforms, desc.Platform.String())
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(desc.Platform.String(), func(t *testing.T) {
			checkImage(t, img, *desc.Platform, md)
		})
	}
	slices.Sort(platforms)
	if want := releasetest.PlatformNames(releasetest.Platforms()); !slices.Equal(platforms, want) {
		t.Errorf("index platforms %q, want %q", platforms, want)
	}
	checkArchive(t, archive, dir, len(bins))

	// The same binaries and metadata give the same bytes, hence digest.
	again, err := image.Assemble(bins, md, filepath.Join(tmp, "again"), "")
	if err != nil {
		t.Fatal(err)
	}
	if again.Digest != res.Digest {
		t.Errorf("second build digest %s, first %s: the build is not reproducible", again.Digest, res.Digest)
	}
}

// readLayout reads the OCI layout in dir and returns the image index its
// index.json names res.Reference.
func readLayout(t *testing.T, dir string, res image.Result) v1.ImageIndex {
	t.Helper()
	_, desc, err := releasetest.Only(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := desc.Annotations[image.AnnotationRefName]; got != res.Reference {
		t.Errorf("index.json names the image %q, want %q", got, res.Reference)
	}
	if desc.Digest != res.Digest || desc.MediaType != types.OCIImageIndex {
		t.Errorf("index.json lists %s %s, want the image index %s", desc.MediaType, desc.Digest, res.Digest)
	}
	idx, err := releasetest.Index(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Index(idx); err != nil {
		t.Errorf("the image index is not valid: %v", err)
	}
	return idx
}

func checkImage(t *testing.T, img v1.Image, p v1.Platform, md image.Metadata) {
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != p.OS || cf.Architecture != p.Architecture {
		t.Errorf("config platform %s/%s, want %s", cf.OS, cf.Architecture, p)
	}
	c := cf.Config
	if c.User != "65532:65532" || !slices.Equal(c.Entrypoint, []string{"/backendslice"}) ||
		!slices.Equal(c.Cmd, []string{"controller"}) || c.WorkingDir != "/" {
		t.Errorf("config User %q Entrypoint %q Cmd %q WorkingDir %q, want 65532:65532 [/backendslice] [controller] /",
			c.User, c.Entrypoint, c.Cmd, c.WorkingDir)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.version":  md.Version,
		"org.opencontainers.image.source":   source,
		"org.opencontainers.image.revision": md.Revision,
	} {
		if got := c.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}
	if !cf.Created.Equal(md.Created) {
		t.Errorf("created %s, want %s", cf.Created, md.Created)
	}

	files := layerFiles(t, img)
	var names []string
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	if !slices.Equal(names, wantFiles) {
		t.Errorf("layer files %q, want %q", names, wantFiles)
	}
	for name := range files {
		if name == "bin/" || strings.HasPrefix(name, "bin/") || strings.HasPrefix(name, "usr/") || filepath.Base(name) == "sh" {
			t.Errorf("the layer has %s: want no shell and no /bin", name)
		}
	}
	for name, f := range files {
		if !f.hdr.ModTime.Equal(md.Created) {
			t.Errorf("%s: mtime %s, want %s", name, f.hdr.ModTime, md.Created)
		}
	}
	if f := files["etc/passwd"]; f == nil || !strings.Contains(string(f.data), "\nnonroot:x:65532:65532:") ||
		!strings.HasPrefix(string(f.data), "root:x:0:0:") {
		t.Errorf("/etc/passwd has no root or no nonroot (65532) entry")
	}
	if f := files["etc/group"]; f == nil || !strings.Contains(string(f.data), "\nnonroot:x:65532:") {
		t.Errorf("/etc/group has no nonroot (65532) entry")
	}
	if f := files["tmp/"]; f == nil || f.hdr.Typeflag != tar.TypeDir || f.hdr.Mode != 0o1777 {
		t.Errorf("/tmp is not a directory with mode 1777")
	}
	if f := files["etc/ssl/certs/ca-certificates.crt"]; f == nil || !x509.NewCertPool().AppendCertsFromPEM(f.data) ||
		bytes.Count(f.data, []byte("BEGIN CERTIFICATE")) < 100 {
		t.Errorf("/etc/ssl/certs/ca-certificates.crt is not a bundle of roots")
	}

	bin := files["backendslice"]
	if bin == nil {
		t.Fatal("no /backendslice")
	}
	if bin.hdr.Typeflag != tar.TypeReg || bin.hdr.Mode != 0o755 || bin.hdr.Uid != 0 {
		t.Errorf("/backendslice type %c mode %o uid %d, want a file, 0755, owned by root", bin.hdr.Typeflag, bin.hdr.Mode, bin.hdr.Uid)
	}
	ef, err := elf.NewFile(bytes.NewReader(bin.data))
	if err != nil {
		t.Fatalf("/backendslice is not ELF: %v", err)
	}
	if ef.Machine != elfMachine[p.Architecture] {
		t.Errorf("/backendslice is for %s, want %s", ef.Machine, elfMachine[p.Architecture])
	}
	for _, prog := range ef.Progs {
		if prog.Type == elf.PT_INTERP {
			t.Errorf("/backendslice asks for a dynamic loader: want a static binary")
		}
	}
	if p.Architecture == "amd64" {
		runBinary(t, bin.data, md)
	}
}

// layerFiles reads the image's one layer.
func layerFiles(t *testing.T, img v1.Image) map[string]*file {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("%d layers, want 1", len(layers))
	}
	if mt, err := layers[0].MediaType(); err != nil || mt != types.OCILayer {
		t.Errorf("layer media type %s (%v), want %s", mt, err, types.OCILayer)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	files := map[string]*file{}
	err = releasetest.WalkTar(rc, func(h *tar.Header, r io.Reader) error {
		data, err := io.ReadAll(r)
		if files[h.Name] != nil {
			t.Errorf("%s is twice in the layer", h.Name)
		}
		files[h.Name] = &file{hdr: h, data: data}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// runBinary runs the controller binary taken out of the image with --help,
// `controller --help` and `version`, which must name the image's version and
// revision.
func runBinary(t *testing.T, data []byte, md image.Metadata) {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Logf("not running the linux/amd64 binary on %s/%s", runtime.GOOS, runtime.GOARCH)
		return
	}
	path := filepath.Join(t.TempDir(), "backendslice")
	if err := os.WriteFile(path, data, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{args: []string{"--help"}, want: []string{"controller", "render"}},
		{args: []string{"controller", "--help"}, want: []string{"--metrics-bind-address", "--health-probe-bind-address", "--leader-elect", "--kubeconfig"}},
		{args: []string{"version"}, want: []string{"version: " + md.Version + "\n", "commit: " + cmp.Or(md.Revision, "unknown") + "\n", "go: go1."}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		out, err := exec.CommandContext(ctx, path, tc.args...).CombinedOutput()
		cancel()
		if err != nil {
			t.Errorf("backendslice %s: %v\n%s", strings.Join(tc.args, " "), err, out)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(string(out), w) {
				t.Errorf("backendslice %s does not mention %s:\n%s", strings.Join(tc.args, " "), w, out)
			}
		}
	}
}

// checkArchive checks that the tar file holds the layout in dir: in
// blobs/sha256 the index, and for each of the images a manifest, a config
// and a layer.
func checkArchive(t *testing.T, archive, dir string, images int) {
	t.Helper()
	if err := releasetest.ArchiveHolds(archive, dir); err != nil {
		t.Error(err)
	}
	blobs, err := os.ReadDir(filepath.Join(dir, "blobs", "sha256"))
	if want := 1 + images*3; err != nil || len(blobs) != want {
		t.Errorf("the layout has %d blobs (%v), want %d", len(blobs), err, want)
	}
}
