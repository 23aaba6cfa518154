// Command build-release builds a backendslice release offline, without a
// container engine (`make release`): into <out>/<version>/ it writes the
// Helm chart (backendslice-<version>.tgz, and in chart/ the OCI layout
// `helm push` sends), the multi-platform controller image (image/, as
// `make image` builds it), the controller binaries for linux/amd64 and
// linux/arm64 with a CycloneDX SBOM each, the layouts as tar files, and
// SHA256SUMS. Two builds of the same commit give the same bytes
// (timestamps are SOURCE_DATE_EPOCH, or the Unix epoch).
//
//	go run ./cmd/build-release [-out bin/release] [-version v]
//
// docs/release.md says how a release is cut and published.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/backendslice/backendslice/internal/buildcmd"
	"github.com/backendslice/backendslice/internal/release"
)

func main() { buildcmd.Main("build-release", define) }

// define binds build-release's flags.
func define(fs *flag.FlagSet, m *buildcmd.Module) buildcmd.Action {
	out := fs.String("out", filepath.Join("bin", "release"), "directory the release directory (named by the version) is written into")
	return func(ctx context.Context, stdout io.Writer) error {
		return build(ctx, release.Options{ModuleDir: m.Dir, OutDir: *out, Version: m.Version}, stdout)
	}
}

// build writes the release opts names and lists its files.
func build(ctx context.Context, opts release.Options, stdout io.Writer) error {
	start := time.Now()
	res, err := release.Build(ctx, opts)
	if err != nil {
		return err
	}
	md := res.Metadata
	fmt.Fprintf(stdout, "release  %s (commit %s, modified %t, created %s)\n", md.Version, md.Revision, md.Modified, md.Created.Format(time.RFC3339))
	fmt.Fprintf(stdout, "dir      %s\n", res.Dir)
	fmt.Fprintf(stdout, "chart    %s  (%s/, helm push)\n", res.Chart, release.ChartLayout)
	fmt.Fprintf(stdout, "image    %s@%s  (%s/)\n", res.Image.Reference, res.Image.Digest, release.ImageLayout)
	for _, img := range res.Image.Images {
		fmt.Fprintf(stdout, "  %-12s %s\n", img.Platform, img.Digest)
	}
	width := len("total")
	var total int64
	for _, f := range res.Files {
		width = max(width, len(f.Name))
		total += f.Size
	}
	for _, f := range res.Files {
		fmt.Fprintf(stdout, "  %-*s %10s  %s\n", width, f.Name, size(f.Size), f.SHA256)
	}
	fmt.Fprintf(stdout, "  %-*s %10s  (the layouts %s/ and %s/ hold the archives' files)\n", width, "total", size(total), release.ChartLayout, release.ImageLayout)
	fmt.Fprintf(stdout, "built in %s\n", time.Since(start).Round(time.Second))
	return nil
}

// size is n bytes in KiB or MiB.
func size(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}
