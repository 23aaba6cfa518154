// Package release builds a backendslice release without a container engine
// or a network (`make release`, through cmd/build-release): the Helm chart
// packaged as `helm package` does and as the OCI artifact `helm push`
// makes of it, the multi-platform controller image (internal/image), the
// controller binaries, a CycloneDX SBOM of each binary's modules read from
// its build information, and a SHA256SUMS file. Every timestamp is
// SOURCE_DATE_EPOCH (the Unix epoch by default), so that two builds of the
// same source give the same bytes, hence the same digests to sign.
package release

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/opencontainers/go-digest"
	"helm.sh/helm/v3/pkg/chart"

	"github.com/backendslice/backendslice/internal/image"
)

// The release directory's layouts: OCI image layouts, for the tools that
// push them (`crane push --index`, `oras cp --from-oci-layout`).
const (
	// ChartLayout holds the chart as `helm push` sends it, tagged with its
	// version.
	ChartLayout = "chart"
	// ImageLayout holds the multi-platform image, named image.Reference.
	ImageLayout = "image"
)

// Names of the release's files (SHA256SUMS lists them all).
type Names struct{ Version string }

// Chart is the packaged chart, the name chartutil.Save gives it.
func (n Names) Chart() string { return "backendslice-" + n.Version + ".tgz" }

// ChartArchive is the chart's OCI layout as a tar file.
func (n Names) ChartArchive() string { return "backendslice-chart-" + n.Version + ".oci.tar" }

// ImageArchive is the image's OCI layout as a tar file (an oci-archive).
func (n Names) ImageArchive() string { return "backendslice-image-" + n.Version + ".oci.tar" }

// Binary is the controller binary for p.
func (n Names) Binary(p v1.Platform) string {
	return "backendslice-" + n.Version + "-" + p.OS + "-" + p.Architecture
}

// SBOM is the CycloneDX SBOM of the binary for p.
func (n Names) SBOM(p v1.Platform) string { return n.Binary(p) + ".cdx.json" }

// Options say what to build and where.
type Options struct {
	// ModuleDir is the root of the backendslice module.
	ModuleDir string
	// OutDir is where the release directory, named by the version, goes.
	OutDir string
	// Version is the release; empty is the chart's appVersion. The chart's
	// version and appVersion must both be it.
	Version string
	// Platforms are the image's and binaries' platforms; nil is
	// image.Platforms.
	Platforms []v1.Platform
}

// File is one file of the release that SHA256SUMS lists.
type File struct {
	Checksum
	Size int64
}

// Result is what Build made.
type Result struct {
	// Dir is the release directory: OutDir/<version>.
	Dir string
	// Metadata describes the build (version, revision, time).
	Metadata image.Metadata
	// Chart is the pushed chart's manifest digest.
	Chart digest.Digest
	// Image is the image index and its images.
	Image image.Result
	// Files are the files SHA256SUMS lists, sorted by name.
	Files []File
}

// Build builds the release of the module in opts.ModuleDir into
// opts.OutDir/<version>, replacing what was there.
func Build(ctx context.Context, opts Options) (Result, error) {
	md, err := image.NewMetadata(ctx, opts.ModuleDir, opts.Version)
	if err != nil {
		return Result{}, err
	}
	ch, err := LoadChart(filepath.Join(opts.ModuleDir, image.ChartDir), md.Version)
	if err != nil {
		return Result{}, err
	}
	platforms := opts.Platforms
	if platforms == nil {
		platforms = image.Platforms
	}
	if err := os.MkdirAll(opts.OutDir, 0o755); err != nil {
		return Result{}, fmt.Errorf("creating %s: %w", opts.OutDir, err)
	}
	// Built next to the release directory and renamed over it, so that it
	// is either the old release or the new one, never half of each.
	work, err := os.MkdirTemp(opts.OutDir, "."+md.Version+"-")
	if err != nil {
		return Result{}, fmt.Errorf("creating a build directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(work) }()
	dir := filepath.Join(work, "release")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return Result{}, fmt.Errorf("creating a build directory: %w", err)
	}

	bins, err := image.Compile(ctx, opts.ModuleDir, work, platforms, md)
	if err != nil {
		return Result{}, err
	}
	names := Names{Version: md.Version}
	res := Result{Dir: filepath.Join(opts.OutDir, md.Version), Metadata: md}
	if res.Chart, err = writeChart(ch, dir, names, md); err != nil {
		return Result{}, err
	}
	if res.Image, err = image.Assemble(bins, md, filepath.Join(dir, ImageLayout), filepath.Join(dir, names.ImageArchive())); err != nil {
		return Result{}, err
	}
	for _, b := range bins {
		if err := writeBinary(b, dir, names, md); err != nil {
			return Result{}, err
		}
	}
	if res.Files, err = writeChecksums(dir); err != nil {
		return Result{}, err
	}

	if err := os.RemoveAll(res.Dir); err != nil {
		return Result{}, fmt.Errorf("removing the old release: %w", err)
	}
	if err := os.Rename(dir, res.Dir); err != nil {
		return Result{}, fmt.Errorf("moving the release into place: %w", err)
	}
	return res, nil
}

// writeChart packages the chart into dir, with its OCI layout and that
// layout's archive, and returns the pushed chart's manifest digest.
func writeChart(ch *chart.Chart, dir string, names Names, md image.Metadata) (digest.Digest, error) {
	path, err := PackageChart(ch, dir, md.Created)
	if err != nil {
		return "", err
	}
	if filepath.Base(path) != names.Chart() {
		return "", fmt.Errorf("the chart was packaged as %s, want %s", filepath.Base(path), names.Chart())
	}
	tgz, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	art, err := NewChartArtifact(tgz, md.Created)
	if err != nil {
		return "", err
	}
	layoutDir := filepath.Join(dir, ChartLayout)
	if err := art.WriteLayout(layoutDir); err != nil {
		return "", err
	}
	if err := image.WriteArchive(layoutDir, filepath.Join(dir, names.ChartArchive()), md.Created); err != nil {
		return "", err
	}
	return art.Digest(), nil
}

// writeBinary puts the binary b and its SBOM into dir.
func writeBinary(b image.Binary, dir string, names Names, md image.Metadata) error {
	data, err := os.ReadFile(b.Path)
	if err != nil {
		return fmt.Errorf("reading the binary for %s: %w", b.Platform, err)
	}
	if err := os.WriteFile(filepath.Join(dir, names.Binary(b.Platform)), data, 0o755); err != nil {
		return err
	}
	bom, err := SBOM(data, Subject{Name: "backendslice", Version: md.Version, Source: md.Source, Created: md.Created})
	if err != nil {
		return fmt.Errorf("SBOM of the binary for %s: %w", b.Platform, err)
	}
	js, err := EncodeSBOM(bom)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, names.SBOM(b.Platform)), js, 0o644)
}

// writeChecksums writes the checksums of every file at the top of dir (the
// layouts' directories are content-addressed: their archives are listed)
// into its SHA256SUMS, and returns them.
func writeChecksums(dir string) ([]File, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []File
	var sums []Checksum
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			return nil, err
		}
		sum, err := FileChecksum(dir, e.Name())
		if err != nil {
			return nil, err
		}
		sums = append(sums, sum)
		files = append(files, File{Checksum: sum, Size: info.Size()})
	}
	if err := os.WriteFile(filepath.Join(dir, ChecksumsFile), FormatChecksums(sums), fs.FileMode(0o644)); err != nil {
		return nil, err
	}
	return files, nil
}
