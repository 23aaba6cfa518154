// Package version says which build of backendslice is running: the release
// version, the commit it was built from, and the Go toolchain. `backendslice
// version` prints it and the controller exports it as
// backendslice_build_info, so that what runs in a cluster can be traced back
// to its source.
package version

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
)

// Package is this package's import path, which -ldflags -X names.
const Package = "github.com/backendslice/backendslice/internal/version"

// These are set at link time by `make build` and `make image`
// (-ldflags "-X <Package>.version=..."), the one way a release version and
// the commit of a build without VCS stamping (-buildvcs=false, a git
// worktree, a source tarball) reach the binary: -X only sets package-level
// string variables, so these three are the exception to "no globals". Read
// them through Get.
var (
	version  string
	commit   string
	modified string
)

// Unknown is shown for what the build does not record.
const Unknown = "unknown"

// Info describes one build.
type Info struct {
	// Version is the release version -ldflags set (the chart's appVersion
	// for `make build` and `make image`), else the module's version when
	// built with `go install module@version`, else Unknown.
	Version string
	// Commit is the git commit the binary was built from: Go's VCS stamp
	// (vcs.revision) when there is one, else the one -ldflags set, else
	// Unknown.
	Commit string
	// Modified tells whether the checkout had changes not committed; Known
	// is false when the build does not record it.
	Modified, Known bool
	// GoVersion is the Go toolchain that built it, and Platform its
	// GOOS/GOARCH.
	GoVersion, Platform string
}

// Get is this binary's build.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return FromBuild(bi, Linked{Version: version, Commit: commit, Modified: modified})
}

// Linked are the values -ldflags set (empty when not set).
type Linked struct{ Version, Commit, Modified string }

// FromBuild is the build bi (nil when the binary records none) and the
// values -ldflags set describe. Go's VCS stamp wins over -ldflags for the
// commit: it is what the compiler saw, while -ldflags says what the
// Makefile was told.
func FromBuild(bi *debug.BuildInfo, l Linked) Info {
	info := Info{Version: l.Version, Commit: l.Commit, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if m, err := strconv.ParseBool(l.Modified); err == nil {
		info.Modified, info.Known = m, true
	}
	if bi != nil {
		info.GoVersion = bi.GoVersion
		if v := bi.Main.Version; info.Version == "" && v != "" && v != "(devel)" {
			info.Version = v
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				info.Commit = s.Value
			case "vcs.modified":
				info.Modified, info.Known = s.Value == "true", true
			}
		}
	}
	if info.Version == "" {
		info.Version = Unknown
	}
	if info.Commit == "" {
		info.Commit = Unknown
	}
	return info
}

// String is what `backendslice version` prints: one line a fact.
func (i Info) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "version: %s\n", i.Version)
	fmt.Fprintf(&b, "commit: %s\n", i.Commit)
	switch {
	case !i.Known:
		fmt.Fprintf(&b, "modified: %s\n", Unknown)
	default:
		fmt.Fprintf(&b, "modified: %t\n", i.Modified)
	}
	fmt.Fprintf(&b, "go: %s %s\n", i.GoVersion, i.Platform)
	return b.String()
}

// infoJSON is Info as `backendslice version -o json` prints it.
type infoJSON struct {
	Version string `json:"version"`
	Commit  string `json:"commit"`
	// Modified is null when the build does not record it.
	Modified  *bool  `json:"modified"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// MarshalJSON writes the build as one object: version, commit, modified
// (null when unknown), goVersion and platform.
func (i Info) MarshalJSON() ([]byte, error) {
	out := infoJSON{Version: i.Version, Commit: i.Commit, GoVersion: i.GoVersion, Platform: i.Platform}
	if i.Known {
		out.Modified = &i.Modified
	}
	return json.Marshal(out)
}

// LDFlags are the -X flags (for -ldflags) that record version, commit and
// whether the checkout was modified, as `make build` passes them; the image
// build and the tests build with the same.
func LDFlags(version, commit string, modified bool) string {
	return fmt.Sprintf("-X %s.version=%s -X %s.commit=%s -X %s.modified=%t", Package, version, Package, commit, Package, modified)
}
