package release

import (
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"fmt"
	"net/url"
	"runtime/debug"
	"strings"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
	"github.com/google/uuid"
)

// SBOMSpecVersion is the CycloneDX version the SBOMs are written in: 1.6,
// the newest that scanners and `cosign attest --type cyclonedx` commonly
// read.
const SBOMSpecVersion = cdx.SpecVersion1_6

// Properties of the CycloneDX gomod taxonomy
// (github.com/CycloneDX/cyclonedx-property-taxonomy, cdx/gomod.md): the
// build constraints the binary was compiled with.
const (
	propGOOS       = "cdx:gomod:build:env:GOOS"
	propGOARCH     = "cdx:gomod:build:env:GOARCH"
	propCGOEnabled = "cdx:gomod:build:env:CGO_ENABLED"
)

// StdlibName is the component the Go standard library and runtime linked
// into a binary are listed as, with the Go version for its version, as
// vulnerability databases (OSV's Go ecosystem) name it.
const StdlibName = "stdlib"

// Subject is the binary an SBOM describes.
type Subject struct {
	// Name and Version name the application: the binary and the release.
	Name, Version string
	// Source is the URL of the source repository.
	Source string
	// Created is the SBOM's timestamp.
	Created time.Time
}

// SBOM is the CycloneDX bill of materials of the Go binary whose bytes are
// bin: the application, and as its dependencies every module the binary
// links and the Go standard library, read from the build information the Go
// linker embeds (what `go version -m` prints). A module replaced in go.mod
// is listed as its replacement, the code that was linked. Two calls with
// the same binary and subject give the same document: the serial number is
// derived from the binary's digest.
func SBOM(bin []byte, s Subject) (*cdx.BOM, error) {
	bi, err := buildinfo.Read(bytes.NewReader(bin))
	if err != nil {
		return nil, fmt.Errorf("reading the binary's build information: %w", err)
	}
	sum := sha256.Sum256(bin)
	mainRef := goPURL(bi.Main.Path, goVersion(s.Version))
	app := cdx.Component{
		BOMRef:     mainRef,
		Type:       cdx.ComponentTypeApplication,
		Name:       s.Name,
		Version:    s.Version,
		PackageURL: mainRef,
		Hashes:     &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: hex.EncodeToString(sum[:])}},
		Properties: buildProperties(bi),
	}
	if s.Source != "" {
		app.ExternalReferences = &[]cdx.ExternalReference{{Type: cdx.ERTypeVCS, URL: s.Source}}
	}

	goVer := strings.TrimPrefix(bi.GoVersion, "go")
	components := []cdx.Component{{
		BOMRef:      goPURL(StdlibName, goVer),
		Type:        cdx.ComponentTypeLibrary,
		Name:        StdlibName,
		Version:     goVer,
		Description: "The Go standard library and runtime (" + bi.GoVersion + ")",
		Scope:       cdx.ScopeRequired,
		PackageURL:  goPURL(StdlibName, goVer),
	}}
	for _, m := range bi.Deps {
		if m.Replace != nil {
			m = m.Replace
		}
		ref := goPURL(m.Path, m.Version)
		components = append(components, cdx.Component{
			BOMRef:     ref,
			Type:       cdx.ComponentTypeLibrary,
			Name:       m.Path,
			Version:    m.Version,
			Scope:      cdx.ScopeRequired,
			PackageURL: ref,
		})
	}
	refs := make([]string, len(components))
	for i, c := range components {
		refs[i] = c.BOMRef
	}

	bom := cdx.NewBOM()
	bom.SerialNumber = uuid.NewSHA1(uuid.NameSpaceOID, sum[:]).URN()
	bom.Metadata = &cdx.Metadata{
		Timestamp: s.Created.UTC().Format(time.RFC3339),
		Tools: &cdx.ToolsChoice{Components: &[]cdx.Component{{
			Type: cdx.ComponentTypeApplication,
			Name: "backendslice make release (internal/release, github.com/CycloneDX/cyclonedx-go)",
		}}},
		Component: &app,
	}
	bom.Components = &components
	bom.Dependencies = &[]cdx.Dependency{{Ref: mainRef, Dependencies: &refs}}
	return bom, nil
}

// EncodeSBOM is bom as indented CycloneDX JSON of SBOMSpecVersion.
func EncodeSBOM(bom *cdx.BOM) ([]byte, error) {
	var b bytes.Buffer
	if err := cdx.NewBOMEncoder(&b, cdx.BOMFileFormatJSON).SetPretty(true).EncodeVersion(bom, SBOMSpecVersion); err != nil {
		return nil, fmt.Errorf("encoding the SBOM: %w", err)
	}
	return b.Bytes(), nil
}

// buildProperties are the build constraints bi records, as gomod taxonomy
// properties.
func buildProperties(bi *debug.BuildInfo) *[]cdx.Property {
	names := map[string]string{"GOOS": propGOOS, "GOARCH": propGOARCH, "CGO_ENABLED": propCGOEnabled}
	var props []cdx.Property
	for _, s := range bi.Settings {
		if name, ok := names[s.Key]; ok {
			props = append(props, cdx.Property{Name: name, Value: s.Value})
		}
	}
	return &props
}

// goPURL is the package URL of a Go module (package-url's golang type):
// pkg:golang/<module path>@<version>, each path segment escaped.
func goPURL(path, version string) string {
	segs := strings.Split(path, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return "pkg:golang/" + strings.Join(segs, "/") + "@" + url.PathEscape(version)
}

// goVersion is a release version as a Go module version: v-prefixed.
func goVersion(v string) string {
	if strings.HasPrefix(v, "v") {
		return v
	}
	return "v" + v
}
