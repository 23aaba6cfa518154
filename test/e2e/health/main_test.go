// Package health runs the controller as a process against a real
// kube-apiserver and checks what its probes and its build say: /readyz
// fails until the informer caches have synced and a standby stays Ready;
// the optional stuck-reconcile check fails /healthz on a leader whose
// worker ignores its deadline, and not on one whose source never answers;
// the AWS and Consul clients honour HTTPS_PROXY and HTTP_PROXY; and
// `backendslice version` and backendslice_build_info name the build.
//
// Most tests run the backendslice binary, built here with the version flags
// `make build` passes. The stuck-worker test runs this test binary again as
// the controller (the same wiring, controllers.NewManager) with a provider
// that ignores its deadline: no provider of the shipped binary does, which
// is why the check exists for the one that someday will.
package health

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/backendslice/backendslice/internal/version"
	"github.com/backendslice/backendslice/test/controlplane"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// builtVersion is the version the test binary is linked with.
const builtVersion = "0.0.0-health"

// env is what the tests share.
var env struct {
	// bin is the backendslice binary, built from this checkout.
	bin string
	// commit is the checkout's HEAD, which the binary records.
	commit string
	// kubeconfig reaches the API server as an administrator.
	kubeconfig string
}

func TestMain(m *testing.M) {
	if cfg := os.Getenv(childEnv); cfg != "" {
		os.Exit(runChild(cfg))
	}
	os.Exit(run(m))
}

// run builds the binary, starts the control plane and runs the tests.
func run(m *testing.M) int {
	tmp, err := os.MkdirTemp("", "backendslice-health-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	if err := build(tmp); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return framework.Run(m, framework.Options{ControlPlaneOnly: true, Started: func(e *framework.Env) error {
		kc, err := e.ControlPlane().Kubeconfig("backendslice-health")
		if err != nil {
			return err
		}
		env.kubeconfig = filepath.Join(tmp, "kubeconfig")
		return os.WriteFile(env.kubeconfig, kc, 0o600)
	}})
}

// build links ./cmd/backendslice as `make build` does (the version flags of
// internal/version.LDFlags), with builtVersion, so that the tests check the
// code of this checkout and what it records.
func build(dir string) error {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return err
	}
	git := func(args ...string) (string, error) {
		out, err := exec.Command("git", append([]string{"-C", root}, args...)...).Output()
		return strings.TrimSpace(string(out)), err
	}
	if env.commit, err = git("rev-parse", "HEAD"); err != nil {
		return fmt.Errorf("git rev-parse HEAD: %w", err)
	}
	status, err := git("status", "--porcelain")
	if err != nil {
		return fmt.Errorf("git status: %w", err)
	}
	env.bin = filepath.Join(dir, "backendslice")
	cmd := exec.Command("go", "build", "-ldflags", version.LDFlags(builtVersion, env.commit, status != ""), "-o", env.bin, "./cmd/backendslice")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building the controller: %w\n%s", err, out)
	}
	return nil
}

// childEnv carries the child controller's settings (childConfig, as JSON).
const childEnv = "BACKENDSLICE_HEALTH_CHILD"

// childConfig is what a child controller runs with.
type childConfig struct {
	Kubeconfig, LeaseNamespace string
	MetricsAddr, HealthAddr    string
	// Resolver is the DNS server of the dns provider.
	Resolver string
}

// childArgs is the environment that makes this test binary run a child
// controller with c.
func childArgs(t *testing.T, c childConfig) []string {
	t.Helper()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return []string{childEnv + "=" + string(b)}
}
