package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/pem"
	"fmt"
	"io"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// CACertificates is where the image's trusted roots are: the first file Go's
// crypto/x509 reads on Linux, and what distroless images have there.
const CACertificates = "/etc/ssl/certs/ca-certificates.crt"

// The user database: root, nobody, and nonroot, the user the controller runs
// as, as in distroless images.
const (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group = "root:x:0:\n" +
		"nobody:x:65534:\n" +
		"nonroot:x:65532:\n"
)

// entry is one file or directory of the layer.
type entry struct {
	name string // without a leading slash; directories end in "/"
	mode int64
	uid  int
	data []byte // nil for a directory
}

// newLayer is the image's one layer: the controller binary, the user
// database, the trusted roots (the controller talks TLS to AWS and Consul),
// nonroot's home and /tmp. Every timestamp is created. The binary belongs
// to root: the user it runs as cannot replace it, even on a writable root
// filesystem.
func newLayer(binary []byte, created time.Time) (v1.Layer, error) {
	entries := []entry{
		{name: Entrypoint[1:], mode: 0o755, data: binary},
		{name: "etc/", mode: 0o755},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "etc/ssl/", mode: 0o755},
		{name: "etc/ssl/certs/", mode: 0o755},
		{name: CACertificates[1:], mode: 0o644, data: caBundle()},
		{name: "home/", mode: 0o755},
		{name: "home/nonroot/", mode: 0o700, uid: nonroot},
		{name: "tmp/", mode: 0o1777},
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{
			Name:     e.name,
			Mode:     e.mode,
			Uid:      e.uid,
			Gid:      e.uid,
			ModTime:  created,
			Typeflag: tar.TypeDir,
		}
		if e.data != nil {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("layer: %s: %w", e.name, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, fmt.Errorf("layer: %s: %w", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(buf.Bytes())), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.DefaultCompression), tarball.WithCompressedCaching)
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	return layer, nil
}

// caBundle is the PEM bundle of the roots Mozilla's NSS trusts for TLS
// servers, as pinned in go.mod (golang.org/x/crypto/x509roots/fallback).
// Roots whose trust has a constraint that PEM cannot carry (distrusted
// after a date) are left out.
func caBundle() []byte {
	var b bytes.Buffer
	for r := range bundle.Roots() {
		if r.Constraint != nil {
			continue
		}
		// Writing to a bytes.Buffer does not fail.
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate})
	}
	return b.Bytes()
}
