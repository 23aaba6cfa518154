package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runValidateCommand runs `backendslice validate` with args and stdin, and
// returns what it printed.
func runValidateCommand(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd := validateCommand()
	cmd.SetArgs(args)
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

// TestValidateSamples is the new user's first run: the samples pass, the
// namespace's labels given, with no finding at all; the folder is read
// recursively, so config/samples/aws (its BackendProvider and three
// ExternalBackends) is checked with the others.
func TestValidateSamples(t *testing.T) {
	out, err := runValidateCommand(t, "", "-f", "../../config/samples/", "--namespace-labels", "default=backendslice.io/samples=allowed")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if want := "8 object(s) checked: 0 error(s), 0 warning(s), 0 note(s)\n"; out != want {
		t.Errorf("output %q, want %q", out, want)
	}
	// The AWS samples' provider admits their namespace by name: tenancy is
	// checked without labels.
	out, err = runValidateCommand(t, "", "../../config/samples/aws/")
	if want := "4 object(s) checked: 0 error(s), 0 warning(s), 0 note(s)\n"; err != nil || out != want {
		t.Errorf("the AWS samples: %v, output %q, want %q", err, out, want)
	}
	// Without the labels, tenancy is not checked, which passes too.
	out, err = runValidateCommand(t, "", "../../config/samples/")
	if err != nil || !strings.Contains(out, "3 note(s)") || !strings.Contains(out, "tenancy not checked") {
		t.Errorf("without labels: %v\n%s", err, out)
	}
}

// TestValidateExitStatus: errors fail, warnings fail only with --strict,
// files come as -f, as arguments (a pre-commit hook's) or on stdin.
func TestValidateExitStatus(t *testing.T) {
	dir := t.TempDir()
	write := fileWriter(t, dir)
	const head = "apiVersion: backendslice.io/v1alpha1\nkind: ExternalBackend\nmetadata: {name: db}\nspec:\n  service: {ports: [{name: pg, port: 5432}]}\n"
	refused := write("refused.yaml", head+"  sources: [{name: s, static: {endpoints: [{address: '::ffff:192.0.2.7'}]}}]\n")
	dropped := write("dropped.yaml", head+"  sources: [{name: s, static: {endpoints: [{address: 192.0.2.7}, {address: 100.100.100.200}]}}]\n")
	flags := []string{"--allow-sources-without-provider"}

	out, err := runValidateCommand(t, "", append(flags, refused)...)
	if !errors.Is(err, errFailed) || !strings.Contains(out, `refused.yaml:1: error: ExternalBackend default/db: spec.sources[0].static.endpoints[0].address (line 6): Invalid value: "::ffff:192.0.2.7": spec.sources[].static.endpoints[].address: an IPv4-mapped IPv6 address is not accepted; write 192.0.2.7 instead [admission]`) {
		t.Errorf("refused: %v\n%s", err, out)
	}
	out, err = runValidateCommand(t, "", append(flags, "-f", dropped)...)
	if err != nil || !strings.Contains(out, "warning: ExternalBackend default/db: spec.sources[0].static.endpoints[1].address (line 6): the controller would drop 100.100.100.200") {
		t.Errorf("dropped: %v\n%s", err, out)
	}
	if _, err = runValidateCommand(t, "", append(flags, "--strict", dropped)...); !errors.Is(err, errFailed) {
		t.Errorf("dropped with --strict: %v, want it failed", err)
	}
	out, err = runValidateCommand(t, head+"  sources: [{name: s, static: {endpoints: [{address: 192.0.2.7}]}}]\n", append(flags, "-o", "json", "-")...)
	if err != nil || !strings.Contains(out, `"checked": 1`) || !strings.Contains(out, `"findings": []`) {
		t.Errorf("stdin as JSON: %v\n%s", err, out)
	}
	for _, args := range [][]string{{}, {"-o", "yaml", dropped}, {"--namespace-labels", "payments", dropped}, {"--service-cidrs", "10.96.0.0", dropped}} {
		if _, err := runValidateCommand(t, "", args...); err == nil || errors.Is(err, errFailed) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}

func TestParseNamespaceLabels(t *testing.T) {
	got, err := parseNamespaceLabels([]string{"payments=team=payments,env=prod", "bare="})
	if err != nil || len(got) != 2 || got["payments"]["env"] != "prod" || got["payments"]["team"] != "payments" || len(got["bare"]) != 0 {
		t.Errorf("parseNamespaceLabels = %v, %v", got, err)
	}
	if _, err := parseNamespaceLabels([]string{"payments=team"}); err == nil {
		t.Error("a label without a value passed")
	}
}

// TestValidateGitHubOutputCannotBeInjected replays the pull request that
// printed a workflow command through the summary of kinds passed over,
// and a file whose name starts one (a dangling link: the error names it):
// the only lines the runner could take for commands are validate's own.
func TestValidateGitHubOutputCannotBeInjected(t *testing.T) {
	dir := t.TempDir()
	write := fileWriter(t, dir)
	kind := write("kind.yaml", "apiVersion: v1\nkind: \"ConfigMap\\n::stop-commands::zz\"\nmetadata: {name: x}\n"+
		"---\napiVersion: v1\nkind: \"Secret\\r##[add-mask]x\"\nmetadata: {name: y}\n")
	link := filepath.Join(dir, "x\n::stop-commands::zz.yaml")
	if err := os.Symlink(filepath.Join(dir, "missing"), link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, file string
		// commands are the lines starting with "::" validate means.
		commands []string
	}{
		{"a kind holding a command", kind, nil},
		{"a file name holding a command", link, []string{"::error title=backendslice validate::"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := runValidateCommand(t, "", "-o", "github", c.file)
			if c.commands != nil && !errors.Is(err, errFailed) {
				t.Errorf("validate: %v, want it failed", err)
			}
			lines := strings.FieldsFunc(out, func(r rune) bool { return r == '\n' || r == '\r' })
			var commands []string
			for _, l := range lines {
				l = strings.TrimLeft(l, " \t")
				if strings.HasPrefix(l, "::") {
					commands = append(commands, l)
				}
				if strings.Contains(l, "##[") {
					t.Errorf("line %q can start a command", l)
				}
			}
			if len(commands) != len(c.commands) {
				t.Fatalf("commands %q, want %q; output:\n%s", commands, c.commands, out)
			}
			for i, prefix := range c.commands {
				if !strings.HasPrefix(commands[i], prefix) {
					t.Errorf("command %q, want it to start %q", commands[i], prefix)
				}
			}
		})
	}
}
