package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/backendslice/backendslice/test/plugintest"
)

// TestPluginCheck runs `backendslice plugin-check` against both example
// plugins, each a process of its own: every check passes, and the last
// line counts them. A plugin answering otherwise than its cases say fails,
// naming the property and the endpoint.
func TestPluginCheck(t *testing.T) {
	bin, err := plugintest.BuildHostsfile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	plugins := []struct {
		name  string
		argv  []string
		cases string
	}{
		{"hostsfile", []string{bin, "-listen", "127.0.0.1:0", "-file", plugintest.Example("hostsfile", "testdata", "hosts.yaml")},
			plugintest.Example("hostsfile", "testdata", "plugin-check.yaml")},
		{"inventory-python", plugintest.Python("--listen", "127.0.0.1:0", "--file", plugintest.Example("inventory-python", "testdata", "inventory.json")),
			plugintest.Example("inventory-python", "testdata", "plugin-check.yaml")},
	}
	for _, pl := range plugins {
		t.Run(pl.name, func(t *testing.T) {
			p, err := plugintest.Start("http", pl.argv...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Kill)
			out, err := runCommand("plugin-check", "--url", p.URL, "--cases", pl.cases)
			if err != nil {
				t.Fatalf("plugin-check: %v\n%s", err, out)
			}
			if !strings.HasSuffix(out, "13 passed, 0 failed\n") || strings.Contains(out, "FAIL") {
				t.Errorf("plugin-check printed:\n%s", out)
			}
			for _, prop := range []string{"PASS Info", "PASS Resolve", "PASS Missing", "PASS Errors", "PASS Cancelled", "PASS Concurrent", "PASS Push",
				"PASS Contract", "PASS Consent"} {
				if !strings.Contains(out, prop) {
					t.Errorf("plugin-check did not print %q:\n%s", prop, out)
				}
			}

			// With a token: a wrong one is refused 401 Unauthorized on
			// both operations (Token, the 14th check).
			tokenFile := filepath.Join(t.TempDir(), "token")
			if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			flag := "-token-file"
			if pl.name == "inventory-python" {
				flag = "--token-file"
			}
			guarded, err := plugintest.Start("http", append(slices.Clone(pl.argv), flag, tokenFile)...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(guarded.Kill)
			out, err = runCommand("plugin-check", "--url", guarded.URL, "--cases", pl.cases, "--token-file", tokenFile)
			if err != nil || !strings.HasSuffix(out, "14 passed, 0 failed\n") || !strings.Contains(out, "PASS Token") {
				t.Errorf("plugin-check with a token: %v\n%s", err, out)
			}

			// Cases that the plugin does not meet: an endpoint it does not answer.
			cases, err := os.ReadFile(pl.cases)
			if err != nil {
				t.Fatal(err)
			}
			wrong := filepath.Join(t.TempDir(), "wrong.yaml")
			if err := os.WriteFile(wrong, bytes.Replace(cases, []byte("address: 192.0.2.31,"), []byte("address: 192.0.2.99,"), 1), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(wrong, bytes.Replace(mustRead(t, wrong), []byte("address: 192.0.2.11,"), []byte("address: 192.0.2.99,"), 1), 0o600); err != nil {
				t.Fatal(err)
			}
			out, err = runCommand("plugin-check", "--url", p.URL, "--cases", wrong)
			if err == nil || !strings.Contains(out, "FAIL Resolve") || !strings.Contains(out, "missing: {Address:192.0.2.99") ||
				!strings.Contains(out, "failed\n") || strings.HasSuffix(out, " 0 failed\n") {
				t.Errorf("plugin-check with a wrong case: %v\n%s", err, out)
			}
		})
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// runCommand runs the backendslice command with args and returns what it printed.
func runCommand(args ...string) (string, error) {
	root := rootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

// TestPluginCheckFailsBrokenAnswers: a plugin process answering 200 with
// a body that lacks a required field fails plugin-check, the failure
// naming the field.
func TestPluginCheckFailsBrokenAnswers(t *testing.T) {
	bin, err := plugintest.BuildVerbatim(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, body, says string }{
		{"empty object", `{}`, `plugin answer has no "endpoints" field`},
		{"no serving", `{"endpoints":[{"address":"192.0.2.10"}]}`, `plugin answer's endpoints[0] has no "serving" field`},
	} {
		t.Run(c.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "answers.json")
			answers, _ := json.Marshal(map[string]any{"resolve": map[string]any{"status": 200, "body": c.body}})
			if err := os.WriteFile(file, answers, 0o600); err != nil {
				t.Fatal(err)
			}
			p, err := plugintest.Start("http", bin, "-file", file)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Kill)
			out, err := runCommand("plugin-check", "--url", p.URL, "--cases", plugintest.Example("hostsfile", "testdata", "plugin-check.yaml"))
			if err == nil || !strings.Contains(out, "FAIL Resolve") || !strings.Contains(out, c.says) {
				t.Errorf("plugin-check of a plugin answering %s: %v\n%s", c.body, err, out)
			}
		})
	}
}
