package validate

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	yamlv3 "gopkg.in/yaml.v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

// Document is one YAML (or JSON) document of an input file.
type Document struct {
	// File is the file's path as given, or "-" for stdin.
	File string
	// Line is the line of the file where the document's content starts
	// (1-based): comments and the "---" before it are left out.
	Line int
	// JSON is the document as a client sends it to the API server:
	// converted from YAML as kubectl and Argo CD convert it; nil for an
	// empty document.
	JSON []byte
	// Err says why the document could not be read; JSON is nil then.
	Err error
	// node is the parsed document, for the lines of its fields.
	node *yamlv3.Node
	// offset is what to add to a line of node to make it a line of File.
	offset int
}

// Read reads the documents of each path: a file, a folder (its *.yaml,
// *.yml and *.json files, recursively, in lexical order), or "-" for stdin.
func Read(stdin io.Reader, paths []string) ([]Document, error) {
	var docs []Document
	for _, p := range paths {
		files, err := expand(p)
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			var data []byte
			if f == "-" {
				data, err = io.ReadAll(stdin)
			} else {
				data, err = os.ReadFile(f)
			}
			if err != nil {
				return nil, err
			}
			docs = append(docs, Split(f, data)...)
		}
	}
	return docs, nil
}

// expand is the files of a path: itself, or a folder's manifests.
func expand(p string) ([]string, error) {
	if p == "-" {
		return []string{p}, nil
	}
	info, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		return []string{p}, nil
	}
	var files []string
	err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch filepath.Ext(path) {
		case ".yaml", ".yml", ".json":
			if !d.IsDir() {
				files = append(files, path)
			}
		}
		return nil
	})
	slices.Sort(files)
	return files, err
}

// Split cuts data into its documents at "---" lines (which a comment may
// follow), as kubectl does, remembering where each starts in file. Empty
// documents (only comments) are left out.
func Split(file string, data []byte) []Document {
	var docs []Document
	var buf bytes.Buffer
	start, line := 1, 0
	flush := func() {
		if d, ok := parse(file, buf.Bytes(), start); ok {
			docs = append(docs, d)
		}
		buf.Reset()
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), len(data)+1)
	for sc.Scan() {
		line++
		text := sc.Text()
		if rest, ok := strings.CutPrefix(text, "---"); ok {
			if trimmed := strings.TrimSpace(rest); trimmed == "" || strings.HasPrefix(trimmed, "#") {
				flush()
				start = line + 1
				continue
			}
		}
		buf.WriteString(text)
		buf.WriteByte('\n')
	}
	flush()
	return docs
}

// parse reads one document that starts at line start of file; false when
// it holds nothing. A document that is a JSON object is read as JSON, as
// kubectl reads it (YAML would refuse control characters JSON allows).
func parse(file string, data []byte, start int) (Document, bool) {
	d := Document{File: file, Line: start, offset: start - 1}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return d, false
	}
	var root yamlv3.Node
	yamlErr := yamlv3.Unmarshal(data, &root)
	if yamlErr == nil && len(root.Content) > 0 {
		d.node = root.Content[0]
		d.Line = d.node.Line + d.offset
	}
	if trimmed[0] == '{' && json.Valid(trimmed) {
		d.JSON = trimmed
		return d, true
	}
	if yamlErr != nil {
		d.Err = yamlErr
		d.Line += errorLine(yamlErr)
		return d, true
	}
	if d.node == nil {
		return d, false
	}
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		d.Err = err
		return d, true
	}
	if string(js) == "null" {
		return d, false
	}
	d.JSON = js
	return d, true
}

// errorLine is the line, within its document, that a YAML error names, or 0.
func errorLine(err error) int {
	var te *yamlv3.TypeError
	msg := err.Error()
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg = te.Errors[0]
	}
	_, after, ok := strings.Cut(msg, "line ")
	if !ok {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimRight(strings.SplitN(after, ":", 2)[0], " "))
	return max(n-1, 0)
}

// FieldLine is the line in d's file of the field at path, a field path as
// the API server and the controller write them: "spec.sources[2].dns.name",
// "spec.service.labels[app.kubernetes.io/name]", or with a list element
// named by its name field, "spec.sources[vms].static". Where the path
// leads past what the document holds (a field it leaves out), the line of
// the deepest part that is there; 0 when there is no document.
func (d Document) FieldLine(path string) int {
	n := d.node
	if n == nil {
		return 0
	}
	line := n.Line
	for _, step := range steps(path) {
		next, at := child(n, step)
		if next == nil {
			break
		}
		n, line = next, at
	}
	return line + d.offset
}

// steps cuts a field path into field names and [index or key] steps.
func steps(path string) []string {
	var out []string
	for path != "" {
		switch path[0] {
		case '.':
			path = path[1:]
		case '[':
			end := strings.IndexByte(path, ']')
			if end < 0 {
				return append(out, path[1:])
			}
			out = append(out, "["+path[1:end])
			path = path[end+1:]
		default:
			end := strings.IndexAny(path, ".[")
			if end < 0 {
				end = len(path)
			}
			out = append(out, path[:end])
			path = path[end:]
		}
	}
	return out
}

// child is the node that step leads to from n, and the line that names
// it (a field's key, a list element's start); nil when there is none.
func child(n *yamlv3.Node, step string) (*yamlv3.Node, int) {
	key, bracket := strings.CutPrefix(step, "[")
	switch n.Kind {
	case yamlv3.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				return n.Content[i+1], n.Content[i].Line
			}
		}
	case yamlv3.SequenceNode:
		if !bracket {
			return nil, 0
		}
		if i, err := strconv.Atoi(key); err == nil {
			if i >= 0 && i < len(n.Content) {
				return n.Content[i], n.Content[i].Line
			}
			return nil, 0
		}
		// A list element named by its name field, as the controller names sources.
		for _, item := range n.Content {
			if name, _ := child(item, "name"); name != nil && name.Value == key {
				return item, item.Line
			}
		}
	}
	return nil, 0
}

// Kind is the document's apiVersion and kind; empty when it names none.
func (d Document) Kind() schema.GroupVersionKind {
	var tm metav1.TypeMeta
	_ = json.Unmarshal(d.JSON, &tm) // a document that is no object names no kind
	return tm.GroupVersionKind()
}

// String names the document: its file and line.
func (d Document) String() string { return fmt.Sprintf("%s:%d", d.File, d.Line) }
