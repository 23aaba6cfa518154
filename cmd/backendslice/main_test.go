package main

import (
	"encoding/json"
	"io"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/backendslice/backendslice/internal/version"
)

// TestShippedBinaryCarriesNoTestCode checks the packages the backendslice
// binary (the one in the image) is built from: none of this repository's
// test packages, and no envtest. The demo, which needs both, is its own
// binary.
func TestShippedBinaryCarriesNoTestCode(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	pkgs := strings.Fields(string(out))
	if len(pkgs) < 100 || !slices.Contains(pkgs, "github.com/backendslice/backendslice/controllers") {
		t.Fatalf("go list -deps listed %d packages, without the controller: %q", len(pkgs), out)
	}
	for _, p := range pkgs {
		if strings.HasPrefix(p, "github.com/backendslice/backendslice/test/") || strings.Contains(p, "/envtest") ||
			strings.HasSuffix(p, "test") && strings.HasPrefix(p, "github.com/backendslice/") {
			t.Errorf("the shipped binary is built from test package %s", p)
		}
	}
}

// TestInternalServesOnly checks that wiring points down only: cmd/
// builds, controllers/ import libraries, and no library (internal/,
// providers/, probe/, api/) depends on controllers/ or cmd/.
func TestInternalServesOnly(t *testing.T) {
	const module = "github.com/backendslice/backendslice/"
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}{{range .Deps}} {{.}}{{end}}",
		module+"internal/...", module+"providers/...", module+"probe/...", module+"api/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	libraries := 0
	for _, line := range lines {
		pkg, deps, _ := strings.Cut(line, " ")
		if !strings.HasPrefix(pkg, module) || strings.HasPrefix(pkg, module+"controllers") || strings.HasPrefix(pkg, module+"cmd/") {
			continue
		}
		libraries++
		for _, d := range strings.Fields(deps) {
			if strings.HasPrefix(d, module+"controllers") || strings.HasPrefix(d, module+"cmd/") {
				t.Errorf("library %s depends on %s: libraries serve, controllers and cmd use them", pkg, d)
			}
		}
	}
	if libraries < 20 {
		t.Fatalf("go list named %d libraries of the module, too few: %q", libraries, out)
	}
}

// TestControllerFlagsRejected checks that bad flags stop the controller
// before it starts, with a message naming the flag.
func TestControllerFlagsRejected(t *testing.T) {
	cases := map[string]struct {
		args []string
		want string
	}{
		"no workers":              {[]string{"--concurrent=0"}, "--concurrent=0: must be at least 1"},
		"no requests":             {[]string{"--kube-api-qps=0"}, "--kube-api-qps=0 --kube-api-burst=100: both must be positive"},
		"slice size":              {[]string{"--max-endpoints-per-slice=0"}, "--max-endpoints-per-slice=0: must be between 1 and 1000"},
		"negative drain":          {[]string{"--default-drain-period=-1s"}, "--default-drain-period=-1s: must not be negative"},
		"negative quiet":          {[]string{"--coalesce-quiet=-1s"}, "--coalesce-quiet=-1s: must not be negative"},
		"max shorter than quiet":  {[]string{"--coalesce-quiet=2s", "--coalesce-max=1s"}, "--coalesce-max=1s: must be at least --coalesce-quiet=2s"},
		"denied CIDR":             {[]string{"--denied-cidrs=10.0.0.1"}, `--denied-cidrs: "10.0.0.1" is not a CIDR`},
		"slice floor above max":   {[]string{"--min-endpoints-per-slice=200"}, "--min-endpoints-per-slice=200: must be between 0 and --max-endpoints-per-slice=100"},
		"share above workers":     {[]string{"--namespace-share=5"}, "--namespace-share=5: must be between 0 (one less than --concurrent) and --concurrent=4"},
		"negative endpoint limit": {[]string{"--max-endpoints-per-backend=-1"}, "--max-endpoints-per-backend=-1: must be 0 (no limit) or more"},
		"negative slice limit":    {[]string{"--max-slices-per-backend=-1"}, "--max-slices-per-backend=-1: must be 0 (no limit) or more"},
		"too few slices for the endpoints": {[]string{"--max-slices-per-backend=29"},
			"--max-slices-per-backend=29: must be 0 (no limit) or at least 30, the slices that --max-endpoints-per-backend=10000 endpoints of each of the three address families take at 1000 a slice"},
		"stuck within a reconcile": {[]string{"--reconcile-timeout=30s", "--stuck-reconcile-timeout=40s"},
			"--stuck-reconcile-timeout=40s: must be 0 (off) or longer than 40s, the longest a reconcile that honours its deadlines takes"},
		"negative stuck bound": {[]string{"--stuck-reconcile-timeout=-1s"}, "--stuck-reconcile-timeout=-1s: must be 0 (off)"},
		"stuck within a provider check": {[]string{"--provider-check-interval=5m", "--provider-check-timeout=1m", "--stuck-reconcile-timeout=50s"},
			"--stuck-reconcile-timeout=50s: must be 0 (off) or longer than 1m10s"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			cmd := controllerCommand()
			cmd.SetArgs(c.args)
			cmd.SetOut(io.Discard)
			cmd.SetErr(io.Discard)
			err := cmd.Execute()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}

// TestVersionCommand: `backendslice version` prints this build's facts, the
// Go toolchain among them, and takes no arguments.
func TestVersionCommand(t *testing.T) {
	var out strings.Builder
	cmd := rootCommand()
	cmd.SetArgs([]string{"version"})
	cmd.SetOut(&out)
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	want := version.Get().String()
	if out.String() != want || !strings.Contains(want, "go: "+runtime.Version()+" ") {
		t.Errorf("printed\n%s\nwant\n%s(with go: %s)", out.String(), want, runtime.Version())
	}
	for _, args := range [][]string{{"version", "-o", "json"}, {"version", "--output=json"}} {
		out.Reset()
		cmd = rootCommand()
		cmd.SetArgs(args)
		cmd.SetOut(&out)
		if err := cmd.Execute(); err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		if err := json.Unmarshal([]byte(out.String()), &got); err != nil {
			t.Fatalf("%q printed no JSON object: %v\n%s", args, err, out.String())
		}
		v := version.Get()
		for key, want := range map[string]any{"version": v.Version, "commit": v.Commit, "goVersion": runtime.Version(), "platform": v.Platform} {
			if got[key] != want {
				t.Errorf("%q: %s is %v, want %v", args, key, got[key], want)
			}
		}
		if m, ok := got["modified"]; !ok || (v.Known && m != v.Modified) || (!v.Known && m != nil) {
			t.Errorf("%q: modified is %v (present %t), want %v (null when unknown)", args, m, ok, v.Modified)
		}
	}
	cmd = rootCommand()
	cmd.SetArgs([]string{"version", "-o", "yaml"})
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "want text or json") {
		t.Errorf("-o yaml: %v, want an error naming text and json", err)
	}
	cmd = rootCommand()
	cmd.SetArgs([]string{"version", "extra"})
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	if err := cmd.Execute(); err == nil {
		t.Error("version accepted an argument")
	}
}

// TestMakeBuildRecordsTheVersion: `make build` links the binary with the
// flags internal/version.LDFlags describes (the ones `make image` uses):
// the version asked for, the checkout's commit and whether it was
// modified.
func TestMakeBuildRecordsTheVersion(t *testing.T) {
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD: %v", err)
	}
	status, err := exec.Command("git", "status", "--porcelain").Output()
	if err != nil {
		t.Fatalf("git status: %v", err)
	}
	mk := exec.Command("make", "-s", "-n", "build", "VERSION=9.9.9-test")
	mk.Dir = "../.."
	out, err := mk.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n build: %v\n%s", err, out)
	}
	flags := version.LDFlags("9.9.9-test", strings.TrimSpace(string(head)), len(strings.TrimSpace(string(status))) > 0)
	first, _, _ := strings.Cut(string(out), "\n")
	if !strings.Contains(first, "-ldflags '"+flags+"'") || !strings.HasSuffix(first, " ./cmd/backendslice") {
		t.Errorf("make build runs\n\t%s\nwant -ldflags '%s' for ./cmd/backendslice", first, flags)
	}
}
