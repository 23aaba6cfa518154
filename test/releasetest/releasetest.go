// Package releasetest builds a backendslice release of this checkout as
// `make release` does (internal/release), into a test's directory, and
// reads the controller binary back out of its image. Its own tests build
// the release twice and check everything in it offline, as a consumer
// would use it; test/helm/install installs its chart on a real API server
// and runs the binary from its image.
package releasetest

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/backendslice/backendslice/internal/image"
	"github.com/backendslice/backendslice/internal/release"
	"github.com/backendslice/backendslice/test/controlplane"
)

// PlatformsEnv chooses the platforms the image and release tests build:
// "all" (`make release-test`, which the release workflow runs before
// `make release`) for every one of image.Platforms; otherwise this
// machine's only, so that `make test` compiles the binary for one
// architecture, not for each.
const PlatformsEnv = "BACKENDSLICE_RELEASE_PLATFORMS"

// Platforms are the platforms PlatformsEnv chooses: this machine's is the
// linux platform of its architecture, or the first of image.Platforms when
// no image is built for it.
func Platforms() []v1.Platform {
	if os.Getenv(PlatformsEnv) == "all" {
		return image.Platforms
	}
	host := v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
	if slices.ContainsFunc(image.Platforms, host.Equals) {
		return []v1.Platform{host}
	}
	return image.Platforms[:1]
}

// PlatformNames are the platforms' names (linux/amd64), sorted.
func PlatformNames(platforms []v1.Platform) []string {
	names := make([]string, 0, len(platforms))
	for _, p := range platforms {
		names = append(names, p.String())
	}
	slices.Sort(names)
	return names
}

// Build builds the release of this checkout (its chart's version) for
// platforms (nil: every platform a release has) into outDir.
func Build(ctx context.Context, outDir string, platforms []v1.Platform) (release.Result, error) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return release.Result{}, err
	}
	return release.Build(ctx, release.Options{ModuleDir: root, OutDir: outDir, Platforms: platforms})
}

// Only is the OCI layout at dir and the one descriptor its index.json
// lists, as the layouts of a release and of `make image` have.
func Only(dir string) (layout.Path, v1.Descriptor, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return "", v1.Descriptor{}, err
	}
	top, err := p.ImageIndex()
	if err != nil {
		return "", v1.Descriptor{}, err
	}
	m, err := top.IndexManifest()
	if err != nil {
		return "", v1.Descriptor{}, err
	}
	if len(m.Manifests) != 1 {
		return "", v1.Descriptor{}, fmt.Errorf("%s/index.json lists %d manifests, want 1", dir, len(m.Manifests))
	}
	return p, m.Manifests[0], nil
}

// Index is the multi-platform image in the OCI layout at dir: the one
// image index its index.json lists.
func Index(dir string) (v1.ImageIndex, error) {
	p, desc, err := Only(dir)
	if err != nil {
		return nil, err
	}
	top, err := p.ImageIndex()
	if err != nil {
		return nil, err
	}
	return top.ImageIndex(desc.Digest)
}

// Binary is the controller binary in the image for platform p of the
// multi-platform image in the OCI layout at dir: the file the image's
// entrypoint names.
func Binary(dir string, p v1.Platform) ([]byte, error) {
	idx, err := Index(dir)
	if err != nil {
		return nil, err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range m.Manifests {
		if d.Platform == nil || !d.Platform.Equals(p) {
			continue
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			return nil, err
		}
		return entrypoint(img)
	}
	return nil, fmt.Errorf("the image in %s has no image for %s", dir, p)
}

// entrypoint reads the file image.Entrypoint out of img's layers.
func entrypoint(img v1.Image) ([]byte, error) {
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	want := path.Clean(image.Entrypoint)[1:]
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			return nil, err
		}
		var data []byte
		err = WalkTar(rc, func(h *tar.Header, r io.Reader) error {
			if h.Typeflag != tar.TypeReg || path.Clean(h.Name) != want {
				return nil
			}
			b, err := io.ReadAll(r)
			if err != nil {
				return err
			}
			data = b
			return errStop
		})
		_ = rc.Close()
		switch {
		case errors.Is(err, errStop):
			return data, nil
		case err != nil:
			return nil, err
		}
	}
	return nil, fmt.Errorf("no %s in the image", image.Entrypoint)
}

// errStop ends a WalkTar early.
var errStop = errors.New("stop")

// WalkTar calls fn with each entry of the tar stream r, in order, and a
// reader of its content; it stops at the first error fn returns and
// returns it.
func WalkTar(r io.Reader, fn func(h *tar.Header, content io.Reader) error) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := fn(h, tr); err != nil {
			return err
		}
	}
}

// ArchiveHolds checks that the tar file archive holds the files of the
// directory dir, and only those, with the same contents.
func ArchiveHolds(archive, dir string) error {
	want := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		want[filepath.ToSlash(rel)], err = os.ReadFile(p)
		return err
	})
	if err != nil {
		return err
	}
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	got := map[string][]byte{}
	err = WalkTar(f, func(h *tar.Header, r io.Reader) error {
		if h.Typeflag == tar.TypeReg {
			got[h.Name], err = io.ReadAll(r)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("reading %s: %w", archive, err)
	}
	if !maps.EqualFunc(got, want, bytes.Equal) {
		return fmt.Errorf("%s holds %d files, %s %d, or their contents differ", filepath.Base(archive), len(got), dir, len(want))
	}
	return nil
}
