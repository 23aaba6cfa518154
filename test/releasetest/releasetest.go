// Package releasetest builds a backendslice release of this checkout as
// `make release` does (internal/release), into a test's directory, and
// reads the controller binary back out of its image. Its own tests build
// the release twice and check everything in it offline, as a consumer
// would use it; test/helm/install installs its chart on a real API server
// and runs the binary from its image.
package releasetest

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"path"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/backendslice/backendslice/internal/image"
	"github.com/backendslice/backendslice/internal/release"
	"github.com/backendslice/backendslice/test/controlplane"
)

// Build builds the release of this checkout (its chart's version) for
// platforms (nil: every platform a release has) into outDir.
func Build(ctx context.Context, outDir string, platforms []v1.Platform) (release.Result, error) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return release.Result{}, err
	}
	return release.Build(ctx, release.Options{ModuleDir: root, OutDir: outDir, Platforms: platforms})
}

// Index is the multi-platform image in the OCI layout at dir: the one
// image index its index.json lists.
func Index(dir string) (v1.ImageIndex, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, err
	}
	top, err := p.ImageIndex()
	if err != nil {
		return nil, err
	}
	m, err := top.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(m.Manifests) != 1 {
		return nil, fmt.Errorf("%s/index.json lists %d manifests, want the image index alone", dir, len(m.Manifests))
	}
	return top.ImageIndex(m.Manifests[0].Digest)
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
		data, err := fileOf(tar.NewReader(rc), want)
		_ = rc.Close()
		if err != nil || data != nil {
			return data, err
		}
	}
	return nil, fmt.Errorf("no %s in the image", image.Entrypoint)
}

// fileOf is the content of the regular file name in tr, nil when there is
// none.
func fileOf(tr *tar.Reader, name string) ([]byte, error) {
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg && path.Clean(h.Name) == name {
			return io.ReadAll(tr)
		}
	}
}
