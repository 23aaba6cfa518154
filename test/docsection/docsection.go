// Package docsection rewrites one generated section of a Markdown report and
// keeps the rest, so that several benchmarks share one file (each section
// sits between an HTML comment pair naming it and the command that makes
// it) without one rerun wiping what another wrote.
package docsection

import (
	"fmt"
	"os"
	"strings"
)

// markers are the lines around section name.
func markers(name string) (begin, end string) {
	return fmt.Sprintf("<!-- begin %s: generated, do not edit by hand -->", name),
		fmt.Sprintf("<!-- end %s -->", name)
}

// Replace sets the body of section name in the file at path: between its
// markers if the file has them, else appended at the end (the file is
// created when missing).
func Replace(path, name, body string) error {
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	out, err := replace(string(old), name, body)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, []byte(out), 0o644)
}

// replace is Replace on the text of the file.
func replace(doc, name, body string) (string, error) {
	begin, end := markers(name)
	section := begin + "\n" + strings.TrimRight(body, "\n") + "\n" + end + "\n"
	i := strings.Index(doc, begin)
	j := strings.Index(doc, end)
	switch {
	case i < 0 && j < 0:
		if doc != "" && !strings.HasSuffix(doc, "\n\n") {
			doc = strings.TrimRight(doc, "\n") + "\n\n"
		}
		return doc + section, nil
	case i < 0 || j < i:
		return "", fmt.Errorf("the markers of section %s are broken (one missing, or end before begin)", name)
	}
	rest := strings.TrimPrefix(doc[j+len(end):], "\n")
	return doc[:i] + section + rest, nil
}
