package validate

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode"
)

// hostileStrings try to start workflow commands of their own from inside a
// printed value: a new line (LF, CR, CRLF) that starts one, blanks before
// it (the runner trims them), the older "##[" form (taken anywhere in a
// line), escapes written in advance, and the separators of a command's
// properties.
var hostileStrings = []string{
	"ConfigMap\n::stop-commands::zz",
	"x\r::add-mask::secret",
	"x\r\n  \t::error::fake",
	"\t::warning file=a.yaml,line=1::fake",
	"##[error]fake",
	"a ##[set-output name=x;]y",
	"50%0A::notice::written escaped",
	"a:b,c=d::e%3A",
	"",
}

// githubCommand is a workflow command as the Actions runner parses a line:
// "::NAME PROPERTIES::DATA" after leading blanks, properties split at ","
// and decoded, the data decoded.
type githubCommand struct {
	name       string
	properties map[string]string
	data       string
}

// parseGitHubLine is the command line holds, as the runner reads it, or
// false when the runner takes it for plain output.
func parseGitHubLine(line string) (githubCommand, bool) {
	line = strings.TrimLeftFunc(line, unicode.IsSpace)
	if !strings.HasPrefix(line, "::") {
		return githubCommand{}, false
	}
	head, data, ok := strings.Cut(line[2:], "::")
	if !ok {
		return githubCommand{}, false
	}
	name, props, _ := strings.Cut(head, " ")
	c := githubCommand{name: name, properties: map[string]string{},
		data: strings.NewReplacer("%0D", "\r", "%0A", "\n", "%25", "%").Replace(data)}
	unescape := strings.NewReplacer("%0D", "\r", "%0A", "\n", "%3A", ":", "%2C", ",", "%25", "%")
	for _, p := range strings.Split(props, ",") {
		if k, v, ok := strings.Cut(p, "="); ok {
			c.properties[k] = unescape.Replace(v)
		}
	}
	return c, true
}

// outputLines splits output where the runner ends a line: CR, LF or CRLF.
func outputLines(out string) []string {
	return strings.FieldsFunc(strings.ReplaceAll(out, "\r\n", "\n"), func(r rune) bool { return r == '\n' || r == '\r' })
}

// TestGitHubOutputEscapesEverything feeds each hostile string through every
// printed field of a report (file, kind, namespace, name, field, check,
// rule, message, the kinds passed over) and the error line: the runner
// finds exactly the commands validate means, one per finding, each
// decoding back to the values it was given, and no other line it would
// take for a command.
func TestGitHubOutputEscapesEverything(t *testing.T) {
	for _, h := range hostileStrings {
		t.Run(fmt.Sprintf("%q", h), func(t *testing.T) {
			var findings []Finding
			for i, sev := range []Severity{Error, Warning, Note} {
				findings = append(findings, Finding{File: h, Line: 1, FieldLine: i + 2, Kind: h, Namespace: h, Name: h,
					Field: h, Severity: sev, Check: h, Rule: h, Message: h})
			}
			rep := Report{Findings: findings, Checked: 3, Skipped: map[string]int{h: 2, "v1 ConfigMap": 1}}
			var out bytes.Buffer
			if err := WriteGitHub(&out, rep); err != nil {
				t.Fatal(err)
			}
			lines := outputLines(out.String())
			if len(lines) != len(findings)+1 {
				t.Errorf("%d lines, want %d (a finding a line and the summary):\n%s", len(lines), len(findings)+1, out.String())
			}
			var commands []githubCommand
			for _, l := range lines {
				if c, ok := parseGitHubLine(l); ok {
					commands = append(commands, c)
				} else if strings.Contains(l, "##[") {
					t.Errorf("line %q holds ##[, which the runner takes for a command", l)
				}
			}
			if len(commands) != len(findings) {
				t.Fatalf("the runner finds %d commands, want %d:\n%s", len(commands), len(findings), out.String())
			}
			for i, c := range commands {
				f := findings[i]
				want := githubCommand{name: map[Severity]string{Error: "error", Warning: "warning", Note: "notice"}[f.Severity],
					properties: map[string]string{"file": h, "line": fmt.Sprint(f.FieldLine), "title": githubTitle + " (" + h + tail(h) + ")"}}
				if c.name != want.name || fmt.Sprint(c.properties) != fmt.Sprint(want.properties) {
					t.Errorf("command %d is %s %v, want %s %v", i, c.name, c.properties, want.name, want.properties)
				}
				if !strings.HasSuffix(c.data, h) || !strings.HasPrefix(c.data, f.object()) {
					t.Errorf("command %d says %q, want the object %q and the message %q", i, c.data, f.object(), h)
				}
			}

			out.Reset()
			if err := WriteGitHubError(&out, errors.New("open "+h+": no such file or directory")); err != nil {
				t.Fatal(err)
			}
			lines = outputLines(out.String())
			c, ok := parseGitHubLine(lines[0])
			if len(lines) != 1 || !ok || c.name != "error" || c.data != "open "+h+": no such file or directory" || c.properties["title"] != githubTitle {
				t.Errorf("error output %q, want one ::error line that decodes to the error", out.String())
			}
		})
	}
}
