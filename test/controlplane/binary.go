package controlplane

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// BuildingEnv lists, space-separated, the binaries that `make test` is
// building in the background while the suites that do not need them run
// (test/run.sh). BuildFailedEnv names a file that exists once that build has
// failed.
const (
	BuildingEnv    = "BACKENDSLICE_BUILDING"
	BuildFailedEnv = "BACKENDSLICE_BUILD_FAILED"
)

// awaitBuild is how long Binary waits for a binary being built: longer than
// a cold build of the slowest one on a loaded machine.
const awaitBuild = 60 * time.Minute

// Binary returns the path of bin/name, which `make target` builds. When
// the binary is missing but test/run.sh is building it, Binary waits for
// it: a suite that needs it only runs once it is there, wherever the run
// script placed that suite.
func Binary(name, target string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(root, "bin", name)
	if !slices.Contains(strings.Fields(os.Getenv(BuildingEnv)), name) {
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("%s not found: run `make %s` first (it builds %s from Go modules once)", bin, target, name)
		}
		return bin, nil
	}
	for deadline := time.Now().Add(awaitBuild); ; time.Sleep(time.Second) {
		if _, err := os.Stat(bin); err == nil {
			return bin, nil
		}
		if failed := os.Getenv(BuildFailedEnv); failed != "" {
			if _, err := os.Stat(failed); err == nil {
				return "", fmt.Errorf("%s not found: the background build of `make %s` failed (its log is printed by `make test`)", bin, target)
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("%s not found after waiting %s for its background build (`make %s`)", bin, awaitBuild, target)
		}
	}
}
