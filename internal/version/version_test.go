package version

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// TestFromBuild: Go's VCS stamp wins for the commit, -ldflags gives the
// version (the module's version otherwise), and whatever the build does
// not record reads as unknown.
func TestFromBuild(t *testing.T) {
	stamped := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "e5effa3c30a5cabac8a1e254ca820f64a69ad419"}, {Key: "vcs.modified", Value: "true"},
	}}
	unstamped := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}
	installed := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.2.0"}}
	cases := []struct {
		name   string
		bi     *debug.BuildInfo
		linked Linked
		want   Info
	}{
		{"make build in a git checkout", stamped, Linked{Version: "0.2.0", Commit: "0000000", Modified: "false"},
			Info{Version: "0.2.0", Commit: "e5effa3c30a5cabac8a1e254ca820f64a69ad419", Modified: true, Known: true, GoVersion: "go1.26.8"}},
		{"make build without VCS stamping", unstamped, Linked{Version: "0.2.0", Commit: "abc123", Modified: "false"},
			Info{Version: "0.2.0", Commit: "abc123", Known: true, GoVersion: "go1.26.8"}},
		{"go install module@version", installed, Linked{},
			Info{Version: "v0.2.0", Commit: Unknown, GoVersion: "go1.26.8"}},
		{"plain go build", unstamped, Linked{},
			Info{Version: Unknown, Commit: Unknown, GoVersion: "go1.26.8"}},
		{"no build info", nil, Linked{Version: "0.2.0"},
			Info{Version: "0.2.0", Commit: Unknown, GoVersion: runtime.Version()}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := FromBuild(c.bi, c.linked)
			c.want.Platform = runtime.GOOS + "/" + runtime.GOARCH
			if got != c.want {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

// TestString: one fact a line, and "unknown" where the build is silent.
func TestString(t *testing.T) {
	got := Info{Version: "0.2.0", Commit: "abc", GoVersion: "go1.26.8", Platform: "linux/amd64"}.String()
	want := "version: 0.2.0\ncommit: abc\nmodified: unknown\ngo: go1.26.8 linux/amd64\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if got := (Info{Modified: true, Known: true}).String(); !strings.Contains(got, "modified: true\n") {
		t.Errorf("a modified build prints\n%s", got)
	}
}

// TestLDFlags: the flags name this package's variables, which is what
// -X needs to set them.
func TestLDFlags(t *testing.T) {
	got := LDFlags("0.2.0", "abc", true)
	want := "-X " + Package + ".version=0.2.0 -X " + Package + ".commit=abc -X " + Package + ".modified=true"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if Package != packagePath() {
		t.Errorf("Package is %q; the package is %q", Package, packagePath())
	}
}

// packagePath is this package's import path, from a function's symbol.
func packagePath() string {
	pc, _, _, _ := runtime.Caller(0)
	name := runtime.FuncForPC(pc).Name()
	return name[:strings.LastIndex(name, ".")]
}
