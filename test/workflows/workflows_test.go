// Package workflows lints the repository's GitHub Actions workflows
// (.github/workflows) with actionlint, used as a library, which runs
// shellcheck on every run: script; and holds them to the project's rules:
// actions pinned by commit with the tag named beside it, CI running
// .ci/run, and the release workflow publishing, signing and attesting what
// `make release` builds. It is a module of its own, so that actionlint's
// dependencies stay out of the controller's go.mod; `make test`, `make
// vet` and `make lint` run it.
package workflows

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/rhysd/actionlint"
)

// root is the repository's root: the directory above this module that
// holds .github/workflows.
func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".github", "workflows")); err != nil {
		t.Fatalf("no .github/workflows in %s: %v", dir, err)
	}
	return dir
}

// newLinter is actionlint as its command runs it, with shellcheck, which
// must be installed (`make shellcheck`).
func newLinter(t *testing.T) (*actionlint.Linter, *actionlint.Project) {
	t.Helper()
	shellcheck, err := exec.LookPath("shellcheck")
	if err != nil {
		t.Fatalf("shellcheck is not installed (`make shellcheck` installs Debian's): actionlint runs it on each run: script: %v", err)
	}
	var log strings.Builder
	l, err := actionlint.NewLinter(&log, &actionlint.LinterOptions{Shellcheck: shellcheck})
	if err != nil {
		t.Fatal(err)
	}
	p, err := actionlint.NewProject(root(t))
	if err != nil {
		t.Fatal(err)
	}
	return l, p
}

// TestActionlint lints every workflow of the repository.
func TestActionlint(t *testing.T) {
	l, p := newLinter(t)
	errs, err := l.LintDir(p.WorkflowsDir(), p)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range errs {
		t.Errorf("%s:%d:%d: %s [%s]", filepath.Base(e.Filepath), e.Line, e.Column, e.Message, e.Kind)
	}
}

// TestActionlintFindsFaults shows that the lint bites: a workflow with an
// undefined context property, an expression injected into a script and an
// unquoted variable (shellcheck's SC2086) gets an error for each.
func TestActionlintFindsFaults(t *testing.T) {
	l, p := newLinter(t)
	broken := `name: broken
on: pull_request
jobs:
  j:
    runs-on: ubuntu-24.04
    steps:
      - run: echo "${{ github.event.pull_request.title }}"
      - run: echo "${{ github.no_such_property }}"
      - run: ls $HOME
`
	errs, err := l.Lint(filepath.Join(p.WorkflowsDir(), "broken.yaml"), []byte(broken), p)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range errs {
		got = append(got, e.Kind+": "+e.Message)
	}
	for _, want := range []string{"potentially untrusted", "no_such_property", "SC2086"} {
		if !slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, want) }) {
			t.Errorf("no error mentions %q: %q", want, got)
		}
	}
}

// workflow is one parsed workflow file and its lines.
type workflow struct {
	name  string
	ast   *actionlint.Workflow
	lines []string
}

// workflows parses every workflow of the repository.
func workflows(t *testing.T) map[string]workflow {
	t.Helper()
	dir := filepath.Join(root(t), ".github", "workflows")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]workflow{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		w, errs := actionlint.Parse(b)
		if len(errs) > 0 {
			t.Fatalf("%s: %v", e.Name(), errs[0])
		}
		out[e.Name()] = workflow{name: e.Name(), ast: w, lines: strings.Split(string(b), "\n")}
	}
	return out
}

// pinned is an action pinned by commit with its tag in a comment:
// owner/repo[/path]@<40 hex digits> # vX.Y.Z
var pinned = regexp.MustCompile(`uses: [A-Za-z0-9_.-]+/[A-Za-z0-9_./-]+@[0-9a-f]{40} # v[0-9]+\.[0-9]+\.[0-9]+$`)

// TestActionsPinnedByCommit: every action a step uses is pinned by a full
// commit SHA, with the release tag it was pinned at named in a comment (a
// tag can be moved; a commit cannot).
func TestActionsPinnedByCommit(t *testing.T) {
	var n int
	for name, w := range workflows(t) {
		for _, job := range w.ast.Jobs {
			for _, s := range job.Steps {
				a, ok := s.Exec.(*actionlint.ExecAction)
				if !ok || strings.HasPrefix(a.Uses.Value, "./") {
					continue
				}
				n++
				if line := strings.TrimSpace(w.lines[a.Uses.Pos.Line-1]); !pinned.MatchString(line) {
					t.Errorf("%s:%d: %q is not pinned by commit with its tag in a comment", name, a.Uses.Pos.Line, line)
				}
			}
		}
	}
	if n == 0 {
		t.Error("no step uses an action")
	}
}

// scripts are the run: scripts of a job, joined.
func scripts(job *actionlint.Job) string {
	var b strings.Builder
	for _, s := range job.Steps {
		if r, ok := s.Exec.(*actionlint.ExecRun); ok && r.Run != nil {
			b.WriteString(r.Run.Value + "\n")
		}
	}
	return b.String()
}

// actions are the actions the steps of a job use, without their versions.
func actions(job *actionlint.Job) []string {
	var out []string
	for _, s := range job.Steps {
		if a, ok := s.Exec.(*actionlint.ExecAction); ok {
			name, _, _ := strings.Cut(a.Uses.Value, "@")
			out = append(out, name)
		}
	}
	return out
}

// event is the workflow's trigger of that name, nil when there is none.
func event(w *actionlint.Workflow, name string) *actionlint.WebhookEvent {
	for _, e := range w.On {
		if h, ok := e.(*actionlint.WebhookEvent); ok && h.Hook.Value == name {
			return h
		}
	}
	return nil
}

// TestCIRunsTheProjectsCI: ci.yaml runs .ci/run on pushes to main, on pull
// requests, and when the release workflow calls it.
func TestCIRunsTheProjectsCI(t *testing.T) {
	w := workflows(t)["ci.yaml"]
	if w.ast == nil {
		t.Fatal("no ci.yaml")
	}
	for _, e := range []string{"push", "pull_request"} {
		if event(w.ast, e) == nil {
			t.Errorf("ci.yaml does not run on %s", e)
		}
	}
	if !slices.ContainsFunc(w.ast.On, func(e actionlint.Event) bool { return e.EventName() == "workflow_call" }) {
		t.Error("ci.yaml cannot be called by the release workflow (on: workflow_call)")
	}
	var runs bool
	for _, job := range w.ast.Jobs {
		runs = runs || strings.Contains(scripts(job), "bash .ci/run")
	}
	if !runs {
		t.Error("no job of ci.yaml runs .ci/run")
	}
}

// TestReleaseWorkflow: release.yaml runs on version tags, after CI has
// passed on the tag, builds with make release, pushes the image and the
// chart, signs them and the checksums keyless, attests the SBOMs and the
// provenance, and publishes a GitHub release, with the permissions these
// need granted to that job alone.
func TestReleaseWorkflow(t *testing.T) {
	w := workflows(t)["release.yaml"]
	if w.ast == nil {
		t.Fatal("no release.yaml")
	}
	push := event(w.ast, "push")
	if push == nil || push.Tags.IsEmpty() || push.Tags.Values[0].Value != "v*" || len(w.ast.On) != 1 {
		t.Errorf("release.yaml must run on pushed tags v* alone")
	}
	if p := w.ast.Permissions; p == nil || p.Scopes["contents"] == nil || p.Scopes["contents"].Value.Value != "read" || len(p.Scopes) != 1 {
		t.Errorf("release.yaml's default permissions must be contents: read alone")
	}
	ci, rel := w.ast.Jobs["ci"], w.ast.Jobs["release"]
	if ci == nil || ci.WorkflowCall == nil || ci.WorkflowCall.Uses.Value != "./.github/workflows/ci.yaml" {
		t.Fatal("release.yaml must run ci.yaml on the tag (a job ci that uses it)")
	}
	if rel == nil || len(rel.Needs) != 1 || rel.Needs[0].Value != "ci" {
		t.Fatal("release.yaml must have a job release that needs ci")
	}
	for scope, want := range map[string]string{"contents": "write", "packages": "write", "id-token": "write", "attestations": "write"} {
		if p := rel.Permissions; p == nil || p.Scopes[scope] == nil || p.Scopes[scope].Value.Value != want {
			t.Errorf("the release job lacks %s: %s", scope, want)
		}
	}
	run := scripts(rel)
	for _, want := range []string{
		"make release VERSION=",
		"crane push ",
		"helm push ",
		`cosign sign --yes "$IMAGE@`,
		`cosign sign --yes "$CHARTS/backendslice@`,
		"cosign sign-blob --yes --bundle",
		"cosign attest --yes --type cyclonedx",
		"gh release create",
	} {
		if !strings.Contains(run, want) {
			t.Errorf("the release job does not run %q", want)
		}
	}
	uses := actions(rel)
	for action, n := range map[string]int{"sigstore/cosign-installer": 1, "actions/attest-build-provenance": 3} {
		if got := countOf(uses, action); got != n {
			t.Errorf("the release job uses %s %d times, want %d", action, got, n)
		}
	}
}

func countOf(s []string, v string) int {
	var n int
	for _, x := range s {
		if x == v {
			n++
		}
	}
	return n
}
