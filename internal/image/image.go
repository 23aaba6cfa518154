// Package image builds the backendslice controller image without a container
// engine: it cross-compiles the controller binary, puts it on an empty base (no
// shell, no libc) in one layer with the files a static binary running as an
// unprivileged user needs, and writes a multi-platform image index as an OCI
// image layout. The build is reproducible: every timestamp is
// SOURCE_DATE_EPOCH (the Unix epoch by default), so two builds of the same
// source give the same digest.
//
// `make image` runs it through cmd/build-image.
package image

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sync/errgroup"
	"sigs.k8s.io/yaml"

	"github.com/backendslice/backendslice/internal/version"
)

// The image's fixed names. The Helm chart's default image
// (charts/backendslice/values.yaml image.repository, tag defaulting to the
// chart's appVersion) is Repository:appVersion, the reference a build tags.
const (
	// Repository is where the image is published.
	Repository = "ghcr.io/backendslice/backendslice"
	// Entrypoint is the controller binary's path in the image.
	Entrypoint = "/backendslice"
	// User is the unprivileged user and group the controller runs as: the
	// "nonroot" entry of the image's /etc/passwd and /etc/group, and the
	// chart's runAsUser and runAsGroup.
	User = "65532:65532"
	// ChartDir is the Helm chart's directory in the module.
	ChartDir = "charts/backendslice"
)

// nonroot is the numeric id of User.
const nonroot = 65532

// Cmd is the image's default command: the controller.
var Cmd = []string{"controller"}

// Platforms are the platforms the image is built for.
var Platforms = []v1.Platform{
	{OS: "linux", Architecture: "amd64"},
	{OS: "linux", Architecture: "arm64"},
}

// OCI annotation and label keys (github.com/opencontainers/image-spec,
// annotations.md).
const (
	LabelVersion     = "org.opencontainers.image.version"
	LabelSource      = "org.opencontainers.image.source"
	LabelRevision    = "org.opencontainers.image.revision"
	LabelTitle       = "org.opencontainers.image.title"
	LabelDescription = "org.opencontainers.image.description"
	// AnnotationRefName names the image index in the layout's index.json.
	AnnotationRefName = "org.opencontainers.image.ref.name"
	// annotationContainerdName is the name `ctr import` and `docker load`
	// give the image.
	annotationContainerdName = "io.containerd.image.name"
)

// Metadata describes the image: its version, where its source is, and when
// it was made.
type Metadata struct {
	// Version is the image's tag and its version label.
	Version string
	// Source is the URL of the source repository.
	Source string
	// Revision is the source's commit; empty leaves the label out.
	Revision string
	// Modified tells whether the checkout had changes not committed: the
	// binary records it (`backendslice version`), the labels do not.
	Modified bool
	// Description is the image's description label; empty leaves it out.
	Description string
	// Created is the time of every timestamp in the image.
	Created time.Time
}

// Reference is the image's name: Repository:Version.
func (m Metadata) Reference() string {
	return Repository + ":" + m.Version
}

// labels are the image config's labels.
func (m Metadata) labels() map[string]string {
	l := map[string]string{
		LabelTitle:   "backendslice",
		LabelVersion: m.Version,
		LabelSource:  m.Source,
	}
	if m.Revision != "" {
		l[LabelRevision] = m.Revision
	}
	if m.Description != "" {
		l[LabelDescription] = m.Description
	}
	return l
}

// Chart is what the image takes from the Helm chart's Chart.yaml.
type Chart struct {
	AppVersion  string   `json:"appVersion"`
	Description string   `json:"description"`
	Sources     []string `json:"sources"`
}

// ReadChart reads the Chart.yaml of the chart in dir.
func ReadChart(dir string) (Chart, error) {
	var c Chart
	b, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		return c, fmt.Errorf("reading the chart: %w", err)
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("parsing %s: %w", filepath.Join(dir, "Chart.yaml"), err)
	}
	if c.AppVersion == "" || len(c.Sources) == 0 {
		return c, fmt.Errorf("%s sets no appVersion or no sources", filepath.Join(dir, "Chart.yaml"))
	}
	return c, nil
}

// NewMetadata describes the image built from the module in moduleDir: the
// version is version, or the chart's appVersion when empty; the source is
// the chart's first source; the revision is git's HEAD, or empty outside a
// git checkout; the creation time is SOURCE_DATE_EPOCH, or the Unix epoch.
func NewMetadata(ctx context.Context, moduleDir, version string) (Metadata, error) {
	c, err := ReadChart(filepath.Join(moduleDir, ChartDir))
	if err != nil {
		return Metadata{}, err
	}
	created, err := SourceDateEpoch()
	if err != nil {
		return Metadata{}, err
	}
	if version == "" {
		version = c.AppVersion
	}
	return Metadata{
		Version:     version,
		Source:      c.Sources[0],
		Revision:    gitHead(ctx, moduleDir),
		Modified:    gitModified(ctx, moduleDir),
		Description: strings.TrimSpace(c.Description),
		Created:     created,
	}, nil
}

// SourceDateEpoch is the time SOURCE_DATE_EPOCH names (seconds since the
// Unix epoch), or the Unix epoch when it is unset.
func SourceDateEpoch() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q is not a number of seconds", s)
	}
	return time.Unix(n, 0).UTC(), nil
}

// gitHead is the commit checked out in dir, or "" when there is none.
func gitHead(ctx context.Context, dir string) string {
	out, err := exec.CommandContext(ctx, "git", "-C", dir, "rev-parse", "--verify", "-q", "HEAD").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// gitModified tells whether the checkout in dir has changes not committed
// (untracked files included, as Go's own VCS stamp counts them).
func gitModified(ctx context.Context, dir string) bool {
	out, err := exec.CommandContext(ctx, "git", "-C", dir, "status", "--porcelain").Output()
	return err == nil && len(bytes.TrimSpace(out)) > 0
}

// Binary is the controller binary compiled for one platform.
type Binary struct {
	Platform v1.Platform
	// Path is the binary's file.
	Path string
}

// Compile cross-compiles the controller (./cmd/backendslice of the module in
// moduleDir) for each platform into outDir, as it ships: static (no cgo),
// without debug information or local paths, recording md's version and
// revision (`backendslice version`, backendslice_build_info).
func Compile(ctx context.Context, moduleDir, outDir string, platforms []v1.Platform, md Metadata) ([]Binary, error) {
	bins := make([]Binary, 0, len(platforms))
	ldflags := "-ldflags=-s -w " + version.LDFlags(md.Version, md.Revision, md.Modified)
	for _, p := range platforms {
		out := filepath.Join(outDir, "backendslice-"+p.OS+"-"+p.Architecture)
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", ldflags, "-o", out, "./cmd/backendslice")
		cmd.Dir = moduleDir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture)
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build for %s: %w\n%s", p, err, b)
		}
		bins = append(bins, Binary{Platform: p, Path: out})
	}
	return bins, nil
}

// Image is one platform's image of an index.
type Image struct {
	Platform v1.Platform
	// Digest is the image manifest's digest.
	Digest v1.Hash
	// Size is the size of the image's blobs (manifest, config and layer).
	Size int64
}

// Index makes the image index of the binaries: one image a platform.
func Index(bins []Binary, md Metadata) (v1.ImageIndex, []Image, error) {
	if len(bins) == 0 {
		return nil, nil, errors.New("no binaries to make images of")
	}
	// One image a platform, made side by side: compressing the layer is
	// most of the work.
	imgs := make([]v1.Image, len(bins))
	images := make([]Image, len(bins))
	var g errgroup.Group
	for i, b := range bins {
		g.Go(func() error {
			img, err := platformImage(b, md)
			if err != nil {
				return fmt.Errorf("image for %s: %w", b.Platform, err)
			}
			if images[i], err = describe(img, b.Platform); err != nil {
				return fmt.Errorf("image for %s: %w", b.Platform, err)
			}
			imgs[i] = img
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, nil, err
	}
	adds := make([]mutate.IndexAddendum, len(bins))
	for i, b := range bins {
		p := b.Platform
		adds[i] = mutate.IndexAddendum{Add: imgs[i], Descriptor: v1.Descriptor{Platform: &p}}
	}
	idx := mutate.IndexMediaType(mutate.AppendManifests(empty.Index, adds...), types.OCIImageIndex)
	ann := md.labels()
	ann["org.opencontainers.image.created"] = md.Created.Format(time.RFC3339)
	annotated, ok := mutate.Annotations(idx, ann).(v1.ImageIndex)
	if !ok {
		return nil, nil, errors.New("annotating the index did not return an index")
	}
	return annotated, images, nil
}

// platformImage is the image of one binary: its one layer on an empty base.
func platformImage(b Binary, md Metadata) (v1.Image, error) {
	binary, err := os.ReadFile(b.Path)
	if err != nil {
		return nil, fmt.Errorf("reading the binary: %w", err)
	}
	layer, err := newLayer(binary, md.Created)
	if err != nil {
		return nil, err
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: md.Created},
			CreatedBy: "make image (cmd/build-image)",
			Comment:   "backendslice " + md.Version + " on an empty base",
		},
	})
	if err != nil {
		return nil, fmt.Errorf("adding the layer: %w", err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("reading the config: %w", err)
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture, cfg.Variant = b.Platform.OS, b.Platform.Architecture, b.Platform.Variant
	cfg.Created = v1.Time{Time: md.Created}
	cfg.Config = v1.Config{
		User:       User,
		Entrypoint: []string{Entrypoint},
		Cmd:        Cmd,
		WorkingDir: "/",
		Labels:     md.labels(),
	}
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, fmt.Errorf("setting the config: %w", err)
	}
	return img, nil
}

// describe is img's digest and size.
func describe(img v1.Image, p v1.Platform) (Image, error) {
	d, err := img.Digest()
	if err != nil {
		return Image{}, fmt.Errorf("digest: %w", err)
	}
	size, err := img.Size()
	if err != nil {
		return Image{}, fmt.Errorf("manifest size: %w", err)
	}
	m, err := img.Manifest()
	if err != nil {
		return Image{}, fmt.Errorf("manifest: %w", err)
	}
	size += m.Config.Size
	for _, l := range m.Layers {
		size += l.Size
	}
	return Image{Platform: p, Digest: d, Size: size}, nil
}

// Result is what Assemble wrote.
type Result struct {
	// Reference is the name the layout gives the index.
	Reference string
	// Digest is the image index's digest: the multi-platform image's.
	Digest v1.Hash
	// Images are the index's images, one a platform.
	Images []Image
}

// Assemble makes the image index of the binaries and writes it as an OCI
// image layout into layoutDir (replacing what was there), its index named
// md.Reference(); and, when archive is not empty, the layout as a tar file
// there too (an oci-archive, as `skopeo copy oci-archive:`, `podman load`
// and `docker load` read it).
func Assemble(bins []Binary, md Metadata, layoutDir, archive string) (Result, error) {
	idx, images, err := Index(bins, md)
	if err != nil {
		return Result{}, err
	}
	ref := md.Reference()
	if err := WriteLayout(layoutDir, idx, ref); err != nil {
		return Result{}, err
	}
	if archive != "" {
		if err := WriteArchive(layoutDir, archive, md.Created); err != nil {
			return Result{}, err
		}
	}
	d, err := idx.Digest()
	if err != nil {
		return Result{}, fmt.Errorf("index digest: %w", err)
	}
	return Result{Reference: ref, Digest: d, Images: images}, nil
}
