package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"

	"github.com/backendslice/backendslice/internal/image"
	"github.com/backendslice/backendslice/test/controlplane"
)

// chartDir is the repository's chart.
func chartDir(t *testing.T) string {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, image.ChartDir)
}

// TestLoadChartVersion: a release whose version is not the chart's version
// and appVersion is refused, naming Chart.yaml and what to set.
func TestLoadChartVersion(t *testing.T) {
	dir := chartDir(t)
	c, err := image.ReadChart(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LoadChart(dir, c.AppVersion); err != nil {
		t.Fatalf("the chart's own appVersion: %v", err)
	}
	_, err = LoadChart(dir, "9.9.9")
	if err == nil {
		t.Fatal("release 9.9.9 of a chart that says " + c.AppVersion + " was accepted")
	}
	for _, want := range []string{"Chart.yaml", `version "` + c.AppVersion + `"`, `set both to "9.9.9"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %s", err, want)
		}
	}
}

// TestPackageChart: the packaged chart is the chart (Helm's loader reads the
// same files back), every entry and the file itself carry the given time,
// and Helm's gzip header is kept.
func TestPackageChart(t *testing.T) {
	dir := chartDir(t)
	c, err := image.ReadChart(dir)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := LoadChart(dir, c.AppVersion)
	if err != nil {
		t.Fatal(err)
	}
	created := time.Unix(1700000000, 0).UTC()
	out := t.TempDir()
	path, err := PackageChart(ch, out, created)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(out, Names{Version: c.AppVersion}.Chart()); path != want {
		t.Errorf("packaged as %s, want %s", path, want)
	}
	if entries, _ := os.ReadDir(out); len(entries) != 1 {
		t.Errorf("%d entries in the output directory, want the chart alone", len(entries))
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !info.ModTime().Equal(created) {
		t.Errorf("file time %s, want %s (helm push stamps the manifest with it)", info.ModTime(), created)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if zr.Comment != "Helm" {
		t.Errorf("gzip comment %q, want Helm's", zr.Comment)
	}
	tr := tar.NewReader(zr)
	var n int
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
		if !h.ModTime.Equal(created) || !strings.HasPrefix(h.Name, "backendslice/") {
			t.Errorf("entry %s time %s, want %s under backendslice/", h.Name, h.ModTime, created)
		}
	}

	got, err := loader.LoadArchive(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if n != len(chartFiles(got))+1 { // and Chart.yaml
		t.Errorf("%d entries for %d chart files and Chart.yaml", n, len(chartFiles(got)))
	}
	if g, w := chartFiles(got), chartFiles(ch); !equalFiles(g, w) {
		t.Errorf("the packaged chart's files differ from the chart's")
	}
	if !reflect.DeepEqual(got.Metadata, ch.Metadata) {
		t.Errorf("packaged chart metadata %+v, want %+v", got.Metadata, ch.Metadata)
	}
}

// chartFiles are a chart's files by name: templates, values, schema and
// the rest, but Chart.yaml (chartutil.Save writes the metadata anew).
func chartFiles(ch *chart.Chart) map[string][]byte {
	m := map[string][]byte{"values.schema.json": ch.Schema}
	for _, fs := range [][]*chart.File{ch.Templates, ch.Files, ch.Raw} {
		for _, f := range fs {
			m[f.Name] = f.Data
		}
	}
	delete(m, "Chart.yaml")
	return m
}

func equalFiles(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}

// TestChartAnnotations: the manifest annotations Helm derives from chart
// metadata; the chart's own may not replace the title or version.
func TestChartAnnotations(t *testing.T) {
	created := time.Unix(0, 0)
	cases := []struct {
		name string
		meta chart.Metadata
		want map[string]string
	}{
		{
			name: "the backendslice chart's fields",
			meta: chart.Metadata{Name: "backendslice", Version: "0.2.0", Description: "d", Sources: []string{"https://a", "https://b"}},
			want: map[string]string{
				ocispec.AnnotationTitle: "backendslice", ocispec.AnnotationVersion: "0.2.0", ocispec.AnnotationDescription: "d",
				ocispec.AnnotationSource: "https://a", ocispec.AnnotationCreated: "1970-01-01T00:00:00Z",
			},
		},
		{
			name: "home, maintainers and annotations",
			meta: chart.Metadata{
				Name: "c", Version: "1.0.0", Description: "  ", Home: "https://home",
				Maintainers: []*chart.Maintainer{{Name: "A", Email: "a@example.com"}, {Name: "B"}},
				Annotations: map[string]string{ocispec.AnnotationTitle: "other", ocispec.AnnotationVersion: "9", ocispec.AnnotationURL: "https://mine", "x": "y"},
			},
			want: map[string]string{
				ocispec.AnnotationTitle: "c", ocispec.AnnotationVersion: "1.0.0", ocispec.AnnotationURL: "https://mine",
				ocispec.AnnotationAuthors: "A (a@example.com), B", ocispec.AnnotationCreated: "1970-01-01T00:00:00Z", "x": "y",
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := chartAnnotations(&c.meta, created)
			if len(got) != len(c.want) {
				t.Errorf("got %v, want %v", got, c.want)
			}
			for k, v := range c.want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q", k, got[k], v)
				}
			}
		})
	}
}

// TestSBOM reads this test binary's build information into an SBOM: the
// application with its digest and platform, the standard library, and one
// component per linked module (replacements listed as what was linked),
// each a dependency of the application; the same binary gives the same
// serial number, another binary another.
func TestSBOM(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("the test binary has no build information")
	}
	s := Subject{Name: "backendslice", Version: "0.2.0", Source: "https://github.com/backendslice/backendslice", Created: time.Unix(1700000000, 0)}
	bom, err := SBOM(bin, s)
	if err != nil {
		t.Fatal(err)
	}
	js, err := EncodeSBOM(bom)
	if err != nil {
		t.Fatal(err)
	}
	var got cdx.BOM
	if err := cdx.NewBOMDecoder(bytes.NewReader(js), cdx.BOMFileFormatJSON).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if got.SpecVersion != cdx.SpecVersion1_6 || got.Metadata == nil || got.Metadata.Component == nil || got.Components == nil || got.Dependencies == nil {
		t.Fatalf("the SBOM lacks its version, metadata, components or dependencies:\n%s", js)
	}
	if got.Metadata.Timestamp != "2023-11-14T22:13:20Z" {
		t.Errorf("timestamp %s, want the subject's time", got.Metadata.Timestamp)
	}
	app := got.Metadata.Component
	sum := sha256.Sum256(bin)
	if app.Name != "backendslice" || app.Version != "0.2.0" || app.PackageURL != "pkg:golang/"+bi.Main.Path+"@v0.2.0" ||
		app.Hashes == nil || (*app.Hashes)[0] != (cdx.Hash{Algorithm: cdx.HashAlgoSHA256, Value: hex.EncodeToString(sum[:])}) {
		t.Errorf("application component %+v", app)
	}
	if app.Properties == nil || !slices.Contains(*app.Properties, cdx.Property{Name: propGOARCH, Value: buildSetting(bi, "GOARCH")}) {
		t.Errorf("application properties %v lack GOARCH=%s", app.Properties, buildSetting(bi, "GOARCH"))
	}

	want := []string{"pkg:golang/stdlib@" + strings.TrimPrefix(bi.GoVersion, "go")}
	for _, m := range bi.Deps {
		if m.Replace != nil {
			m = m.Replace
		}
		want = append(want, "pkg:golang/"+m.Path+"@"+m.Version)
	}
	var purls []string
	for _, c := range *got.Components {
		purls = append(purls, c.PackageURL)
		if c.BOMRef != c.PackageURL || c.Type != cdx.ComponentTypeLibrary {
			t.Errorf("component %s: bom-ref %s type %s", c.PackageURL, c.BOMRef, c.Type)
		}
	}
	if !slices.Equal(purls, want) {
		t.Errorf("components\n%q\nwant\n%q", purls, want)
	}
	deps := *got.Dependencies
	if len(deps) != 1 || deps[0].Ref != app.BOMRef || deps[0].Dependencies == nil || !slices.Equal(*deps[0].Dependencies, want) {
		t.Errorf("dependencies %+v: want the application depending on every component", deps)
	}

	again, err := SBOM(bin, s)
	if err != nil {
		t.Fatal(err)
	}
	other, err := SBOM(append(slices.Clone(bin), 0), s)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(bom.SerialNumber, "urn:uuid:") || again.SerialNumber != bom.SerialNumber || other.SerialNumber == bom.SerialNumber {
		t.Errorf("serial numbers %s, %s (same binary), %s (another): want one per binary", bom.SerialNumber, again.SerialNumber, other.SerialNumber)
	}
	if _, err := SBOM([]byte("not a binary"), s); err == nil {
		t.Error("an SBOM of something that is not a Go binary")
	}
}

// buildSetting is a build setting of bi.
func buildSetting(bi *debug.BuildInfo, key string) string {
	for _, s := range bi.Settings {
		if s.Key == key {
			return s.Value
		}
	}
	return ""
}

func TestGoPURL(t *testing.T) {
	for _, c := range []struct{ path, version, want string }{
		{"github.com/CycloneDX/cyclonedx-go", "v0.12.0", "pkg:golang/github.com/CycloneDX/cyclonedx-go@v0.12.0"},
		{"k8s.io/utils", "v0.0.0-20260626114624-be93311217bd", "pkg:golang/k8s.io/utils@v0.0.0-20260626114624-be93311217bd"},
		{"github.com/evanphx/json-patch", "v5.9.11+incompatible", "pkg:golang/github.com/evanphx/json-patch@v5.9.11+incompatible"},
		{"stdlib", "1.26.8", "pkg:golang/stdlib@1.26.8"},
	} {
		if got := goPURL(c.path, c.version); got != c.want {
			t.Errorf("goPURL(%s, %s) = %s, want %s", c.path, c.version, got, c.want)
		}
	}
}

// TestChecksums: the file FormatChecksums writes is one `sha256sum -c`
// accepts, and one it refuses once a file changes.
func TestChecksums(t *testing.T) {
	dir := t.TempDir()
	var sums []Checksum
	for _, name := range []string{"b.tgz", "a-linux-amd64", "c.cdx.json"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("content of "+name), 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := FileChecksum(dir, name)
		if err != nil {
			t.Fatal(err)
		}
		sums = append(sums, s)
	}
	data := FormatChecksums(sums)
	if lines := strings.Split(strings.TrimSpace(string(data)), "\n"); len(lines) != 3 || !strings.HasSuffix(lines[0], "  a-linux-amd64") {
		t.Errorf("checksums not one line a file sorted by name:\n%s", data)
	}
	if err := os.WriteFile(filepath.Join(dir, ChecksumsFile), data, 0o644); err != nil {
		t.Fatal(err)
	}
	sha256sum := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "sha256sum", "--strict", "-c", ChecksumsFile)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		t.Logf("sha256sum -c:\n%s", out)
		return err
	}
	if err := sha256sum(); err != nil {
		t.Errorf("sha256sum -c refuses the file: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "b.tgz"), []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := sha256sum(); err == nil {
		t.Error("sha256sum -c accepts a changed file")
	}
}
