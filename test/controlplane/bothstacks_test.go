package controlplane_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/backendslice/backendslice/test/controlplane"
)

// TestBothStacks runs test/bothstacks.sh, go test's -exec program in `make
// test`, over a stand-in test binary that records the stack each run asks
// for and fails on the stack the case says: an end-to-end suite's
// directory runs on both stacks, whatever the first run's result, and
// fails if either fails; any other directory runs once, as go test runs it.
func TestBothStacks(t *testing.T) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(root, "test", "bothstacks.sh")
	cases := []struct {
		name     string
		listed   bool
		failOn   string
		wantRuns []string
		wantExit int
	}{
		{name: "a suite passing on both", listed: true, wantRuns: []string{"dual", "single"}},
		{name: "a suite failing dual-stack still runs single-stack", listed: true, failOn: "dual", wantRuns: []string{"dual", "single"}, wantExit: 3},
		{name: "a suite failing single-stack", listed: true, failOn: "single", wantRuns: []string{"dual", "single"}, wantExit: 3},
		{name: "another package runs once", wantRuns: []string{"unset"}},
		{name: "another package's failure is go test's to see", failOn: "unset", wantRuns: []string{"unset"}, wantExit: 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, err := filepath.EvalSymlinks(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			record := filepath.Join(dir, "runs")
			// The stand-in binary: it records its stack (and its
			// argument, to show the flags reach each run) and exits 3
			// on the stack to fail on.
			stack := "${" + controlplane.StackEnv + ":-unset}"
			binary := `echo "` + stack + ` $1" >>"$RECORD"; [ "` + stack + `" != "$FAIL_ON" ] || exit 3`
			cmd := exec.Command("bash", script, "sh", "-c", binary, "sh", "-test.count=1")
			cmd.Dir = dir
			listed := "/elsewhere"
			if c.listed {
				listed = "/elsewhere\n" + dir
			}
			cmd.Env = append(os.Environ(), "BACKENDSLICE_BOTH_STACKS="+listed, controlplane.StackEnv+"=", "RECORD="+record, "FAIL_ON="+c.failOn)
			out, err := cmd.CombinedOutput()
			exit := 0
			if exitErr := (*exec.ExitError)(nil); errors.As(err, &exitErr) {
				exit = exitErr.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if exit != c.wantExit {
				t.Errorf("exit %d, want %d; output:\n%s", exit, c.wantExit, out)
			}
			b, err := os.ReadFile(record)
			if err != nil {
				t.Fatal(err)
			}
			var runs []string
			for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				stack, arg, _ := strings.Cut(line, " ")
				if arg != "-test.count=1" {
					t.Errorf("the %s run got argument %q, want -test.count=1", stack, arg)
				}
				runs = append(runs, stack)
			}
			if !slices.Equal(runs, c.wantRuns) {
				t.Errorf("runs %v, want %v; output:\n%s", runs, c.wantRuns, out)
			}
		})
	}
}
