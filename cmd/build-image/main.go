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
	"os/signal"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/backendslice/backendslice/internal/image"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "build-image:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("build-image", flag.ContinueOnError)
	dir := fs.String("dir", ".", "root of the backendslice module")
	out := fs.String("out", filepath.Join("bin", "image"), "OCI image layout directory to write (replaced)")
	archive := fs.String("tarball", "", "also write the layout as this tar file (an oci-archive)")
	version := fs.String("version", "", "image tag and version label (default: the chart's appVersion)")
	platforms := fs.String("platforms", formatPlatforms(image.Platforms), "comma-separated platforms to build")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	plats, err := parsePlatforms(*platforms)
	if err != nil {
		return err
	}
	md, err := image.NewMetadata(ctx, *dir, *version)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "build-image-")
	if err != nil {
		return fmt.Errorf("creating a build directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	bins, err := image.Compile(ctx, *dir, tmp, plats, md)
	if err != nil {
		return err
	}
	res, err := image.Assemble(bins, md, *out, *archive)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "image    %s\n", res.Reference)
	fmt.Fprintf(stdout, "digest   %s\n", res.Digest)
	fmt.Fprintf(stdout, "layout   %s (OCI image layout)\n", *out)
	if *archive != "" {
		fmt.Fprintf(stdout, "tarball  %s (oci-archive)\n", *archive)
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
