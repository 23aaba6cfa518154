package release

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ChecksumsFile is the name of the release's checksums file.
const ChecksumsFile = "SHA256SUMS"

// Checksum is one line of a checksums file.
type Checksum struct {
	// Name is the file's name in the release directory.
	Name string
	// SHA256 is its digest, in lower-case hex.
	SHA256 string
}

// FormatChecksums is the checksums file of sums, sorted by name, in the
// format `sha256sum` writes and `sha256sum -c` reads (text mode: two
// spaces between the digest and the name).
func FormatChecksums(sums []Checksum) []byte {
	sorted := slices.Clone(sums)
	slices.SortFunc(sorted, func(a, b Checksum) int { return strings.Compare(a.Name, b.Name) })
	var b bytes.Buffer
	for _, s := range sorted {
		fmt.Fprintf(&b, "%s  %s\n", s.SHA256, s.Name)
	}
	return b.Bytes()
}

// FileChecksum is the checksum of the file name in dir.
func FileChecksum(dir, name string) (Checksum, error) {
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		return Checksum{}, err
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return Checksum{}, fmt.Errorf("reading %s: %w", name, err)
	}
	return Checksum{Name: name, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}
