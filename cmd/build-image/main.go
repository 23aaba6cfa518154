// Command build-image builds the backendslice controller image without a
// container engine (`make image`): it cross-compiles the controller for
// linux/amd64 and linux/arm64, puts each binary on an empty base, and writes
// the multi-platform image as an OCI image layout, named
// ghcr.io/backendslice/backendslice:<the chart's appVersion>. Two builds of
// the same source give the same digest (timestamps are SOURCE_DATE_EPOCH, or
// the Unix epoch).
//
//	go run ./cmd/build-image [-out bin/image] [-tarball file.tar] [-version v] [-platforms linux/amd64,...]
//
// Push it with, for example, `crane push bin/image <ref>` or
// `skopeo copy --all oci:bin/image docker://<ref>`.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/backendslice/backendslice/internal/buildcmd"
	"github.com/backendslice/backendslice/internal/image"
)

func main() { buildcmd.Main("build-image", define) }

// define binds build-image's flags.
func define(fs *flag.FlagSet, m *buildcmd.Module) buildcmd.Action {
	out := fs.String("out", filepath.Join("bin", "image"), "OCI image layout directory to write (replaced)")
	archive := fs.String("tarball", "", "also write the layout as this tar file (an oci-archive)")
	platforms := fs.String("platforms", formatPlatforms(image.Platforms), "comma-separated platforms to build")
	return func(ctx context.Context, stdout io.Writer) error {
		plats, err := parsePlatforms(*platforms)
		if err != nil {
			return err
		}
		return build(ctx, *m, *out, *archive, plats, stdout)
	}
}

// build writes the image of m for plats.
func build(ctx context.Context, m buildcmd.Module, out, archive string, plats []v1.Platform, stdout io.Writer) error {
	md, err := image.NewMetadata(ctx, m.Dir, m.Version)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "build-image-")
	if err != nil {
		return fmt.Errorf("creating a build directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	bins, err := image.Compile(ctx, m.Dir, tmp, plats, md)
	if err != nil {
		return err
	}
	res, err := image.Assemble(bins, md, out, archive)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "image    %s\n", res.Reference)
	fmt.Fprintf(stdout, "digest   %s\n", res.Digest)
	fmt.Fprintf(stdout, "layout   %s (OCI image layout)\n", out)
	if archive != "" {
		fmt.Fprintf(stdout, "tarball  %s (oci-archive)\n", archive)
	}
	for _, img := range res.Images {
		fmt.Fprintf(stdout, "  %-12s %s  %.1f MiB\n", img.Platform, img.Digest, float64(img.Size)/(1<<20))
	}
	return nil
}

// formatPlatforms is the -platforms value of ps.
func formatPlatforms(ps []v1.Platform) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

// parsePlatforms parses a -platforms value.
func parsePlatforms(s string) ([]v1.Platform, error) {
	var ps []v1.Platform
	for _, f := range strings.Split(s, ",") {
		p, err := v1.ParsePlatform(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("-platforms: %w", err)
		}
		ps = append(ps, *p)
	}
	return ps, nil
}
