package replica

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/backendslice/backendslice/test/controlplane"
)

// BuildCheckout builds the controller of this checkout into dir, and says
// what it was built from (the commit, and whether the checkout had changes
// not yet committed) for a report.
func BuildCheckout(dir string) (bin, built string, err error) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return "", "", err
	}
	describe := exec.Command("git", "describe", "--always", "--dirty")
	describe.Dir = root
	if v, err := describe.Output(); err == nil {
		commit, dirty := strings.CutSuffix(strings.TrimSpace(string(v)), "-dirty")
		built = "built from commit " + commit
		if dirty {
			built += " with changes not yet committed"
		}
	}
	bin = filepath.Join(dir, "backendslice")
	start := time.Now()
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/backendslice")
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", "", fmt.Errorf("building the controller (go build -o %s ./cmd/backendslice in %s): %w", bin, root, err)
	}
	fmt.Fprintf(os.Stderr, "built %s in %s\n", bin, time.Since(start).Round(100*time.Millisecond))
	return bin, built, nil
}
