package health

import (
	"os/exec"
	"runtime"
	"strings"
	"testing"
)

// TestVersionAndBuildInfo: the binary, linked as `make build` links it,
// prints the version it was given, the checkout's commit and the Go
// toolchain, and its running controller exports the same as
// backendslice_build_info.
func TestVersionAndBuildInfo(t *testing.T) {
	out, err := exec.Command(env.bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("backendslice version: %v\n%s", err, out)
	}
	printed := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		k, v, _ := strings.Cut(line, ": ")
		printed[k] = v
	}
	if printed["version"] != builtVersion || printed["commit"] != env.commit || !strings.HasPrefix(printed["go"], runtime.Version()+" ") {
		t.Errorf("backendslice version printed\n%s\nwant version %s, commit %s, go %s", out, builtVersion, env.commit, runtime.Version())
	}
	c := startBinary(t, "controller", nil)
	want := `backendslice_build_info{commit="` + env.commit + `",goversion="` + runtime.Version() + `",version="` + builtVersion + `"}`
	if v, ok := c.metric(want); !ok || v != "1" {
		body, _ := c.metric("backendslice_build_info")
		t.Errorf("metrics have no %s 1 (backendslice_build_info%s)", want, body)
	}
}
