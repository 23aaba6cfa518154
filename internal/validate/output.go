package validate

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// Failed tells whether the report fails the check: on any error, and with
// strict on any warning too. Notes (what could not be checked) never fail.
func (r Report) Failed(strict bool) bool {
	return r.Count(Error) > 0 || (strict && r.Count(Warning) > 0)
}

// Formats are the output formats, by the name --output takes.
var Formats = map[string]func(io.Writer, Report) error{
	"text":   WriteText,
	"json":   WriteJSON,
	"github": WriteGitHub,
}

// object names the finding's object: "ExternalBackend payments/db".
func (f Finding) object() string {
	name := f.Name
	if f.Namespace != "" {
		name = f.Namespace + "/" + name
	}
	return strings.TrimSpace(f.Kind + " " + name)
}

// where is the finding's field with its line, or "".
func (f Finding) where() string {
	switch {
	case f.Field == "":
		return ""
	case f.FieldLine > 0:
		return fmt.Sprintf("%s (line %d)", f.Field, f.FieldLine)
	default:
		return f.Field
	}
}

// WriteText writes one line per finding, "FILE:LINE: SEVERITY: OBJECT:
// FIELD (line N): MESSAGE [CHECK]" (LINE is the document's), then a
// summary line.
func WriteText(w io.Writer, r Report) error {
	var b strings.Builder
	for _, f := range r.Findings {
		parts := []string{fmt.Sprintf("%s:%d: %s", f.File, f.Line, f.Severity)}
		if o := f.object(); o != "" {
			parts = append(parts, o)
		}
		if where := f.where(); where != "" {
			parts = append(parts, where)
		}
		parts = append(parts, f.Message+" ["+f.Check+tail(f.Rule)+"]")
		b.WriteString(strings.Join(parts, ": ") + "\n")
	}
	b.WriteString(r.summary() + "\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// tail is ", rule" or "".
func tail(rule string) string {
	if rule == "" {
		return ""
	}
	return " " + rule
}

// summary says how many objects were checked and skipped and what was found.
func (r Report) summary() string {
	s := fmt.Sprintf("%d object(s) checked: %d error(s), %d warning(s), %d note(s)", r.Checked, r.Count(Error), r.Count(Warning), r.Count(Note))
	if len(r.Skipped) > 0 {
		var kinds []string
		n := 0
		for _, k := range slices.Sorted(maps.Keys(r.Skipped)) {
			name := k
			if name == "" {
				name = "no kind"
			}
			kinds = append(kinds, fmt.Sprintf("%s: %d", name, r.Skipped[k]))
			n += r.Skipped[k]
		}
		s += fmt.Sprintf("; %d other object(s) passed over (%s)", n, strings.Join(kinds, ", "))
	}
	return s
}

// jsonReport is the report with its counts, as --output json writes it.
type jsonReport struct {
	Report
	Errors   int `json:"errors"`
	Warnings int `json:"warnings"`
	Notes    int `json:"notes"`
}

// WriteJSON writes the report as one JSON object with its counts.
func WriteJSON(w io.Writer, r Report) error {
	if r.Findings == nil {
		r.Findings = []Finding{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(jsonReport{Report: r, Errors: r.Count(Error), Warnings: r.Count(Warning), Notes: r.Count(Note)})
}

// WriteGitHub writes GitHub Actions workflow commands: one ::error,
// ::warning or ::notice annotation per finding, at the field's line (else
// the document's), then the summary as a plain line. Everything printed
// comes from a pull request (file names, kinds, names, messages that quote
// values) and the runner reads every line of a step's output for commands,
// so every line is escaped: a finding's values can neither end its line
// nor start a command of their own (see githubPlain).
func WriteGitHub(w io.Writer, r Report) error {
	var b strings.Builder
	command := map[Severity]string{Error: "error", Warning: "warning", Note: "notice"}
	for _, f := range r.Findings {
		line := f.Line
		if f.FieldLine > 0 {
			line = f.FieldLine
		}
		msg := f.Message
		if f.Field != "" && !strings.Contains(f.Message, f.Field) {
			msg = f.Field + ": " + msg
		}
		if o := f.object(); o != "" {
			msg = o + ": " + msg
		}
		fmt.Fprintf(&b, "::%s file=%s,line=%d,title=%s::%s\n", command[f.Severity], escapeProperty(f.File), line,
			escapeProperty(githubTitle+" ("+f.Check+tail(f.Rule)+")"), escapeData(msg))
	}
	b.WriteString(githubPlain(r.summary()) + "\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// githubTitle is the title of validate's annotations.
const githubTitle = "backendslice validate"

// WriteGitHubError writes err, which stopped validate before it had a
// report (a file that cannot be read, named by the pull request), as one
// ::error annotation, escaped as WriteGitHub escapes findings.
func WriteGitHubError(w io.Writer, err error) error {
	_, werr := fmt.Fprintf(w, "::error title=%s::%s\n", escapeProperty(githubTitle), escapeData(err.Error()))
	return werr
}

// escapeData escapes a workflow command's message, as the Actions toolkit
// does: the runner decodes it, and the command stays on one line.
func escapeData(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A").Replace(s)
}

// escapeProperty escapes a workflow command's property value, as the
// Actions toolkit does: it cannot end the property (",") or the command's
// head ("::").
func escapeProperty(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A", ":", "%3A", ",", "%2C").Replace(s)
}

// githubPlain escapes a line that is not a workflow command. The runner
// takes a line for a command when it starts with "::" (after blanks), or
// when it holds "##[" anywhere (the older form), and ends a line at CR or
// LF: escaping CR, LF and "#" as data leaves none of them, and a summary
// starts with a count. Nothing decodes a plain line, so it shows the
// escapes as they are.
func githubPlain(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A", "#", "%23").Replace(s)
}
