package main

import (
	"strings"
	"testing"
)

// TestShellCompletion: the completion scripts the README tells users to
// load are printed for each shell, and completing the binary's first word
// offers every subcommand, as the scripts ask it to (cobra's __complete).
func TestShellCompletion(t *testing.T) {
	for shell, want := range map[string]string{
		"bash": "# bash completion V2 for backendslice",
		"zsh":  "#compdef backendslice",
		"fish": "complete -c backendslice",
	} {
		var out strings.Builder
		cmd := rootCommand()
		cmd.SetArgs([]string{"completion", shell})
		cmd.SetOut(&out)
		if err := cmd.Execute(); err != nil {
			t.Fatalf("completion %s: %v", shell, err)
		}
		if !strings.Contains(out.String(), want) {
			t.Errorf("completion %s printed no %q:\n%.300s", shell, want, out.String())
		}
	}
	var out strings.Builder
	cmd := rootCommand()
	cmd.SetArgs([]string{"__complete", ""})
	cmd.SetOut(&out)
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"controller", "render", "validate", "import", "plugin-check", "version", "completion"} {
		if !strings.Contains(out.String(), "\n"+sub+"\t") && !strings.HasPrefix(out.String(), sub+"\t") {
			t.Errorf("completing the first word does not offer %s:\n%s", sub, out.String())
		}
	}
}
