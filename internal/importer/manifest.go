package importer

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// commentWidth is where header comments wrap.
const commentWidth = 100

// Manifest is the backend as a YAML document for a pull request: comments
// naming the objects it replaces and every note, by kind, then the
// ExternalBackend without status or empty fields.
func (b *Backend) Manifest() ([]byte, error) {
	obj, err := b.object()
	if err != nil {
		return nil, err
	}
	body, err := yaml.Marshal(obj)
	if err != nil {
		return nil, err
	}
	return append([]byte(b.header()), body...), nil
}

// object is the ExternalBackend as a map, without what the API server
// sets.
func (b *Backend) object() (map[string]any, error) {
	js, err := json.Marshal(b.ExternalBackend)
	if err != nil {
		return nil, err
	}
	var obj map[string]any
	if err := json.Unmarshal(js, &obj); err != nil {
		return nil, err
	}
	delete(obj, "status")
	unstructured.RemoveNestedField(obj, "metadata", "creationTimestamp")
	return obj, nil
}

// header is the comment block above the ExternalBackend.
func (b *Backend) header() string {
	var sb strings.Builder
	xb := b.ExternalBackend
	fmt.Fprintf(&sb, "# ExternalBackend %s/%s, imported by `backendslice import`.\n", b.Namespace, xb.Name)
	comment(&sb, "", "It replaces "+strings.Join(b.Replaces, ", ")+".")
	notes := slices.Clone(b.Notes)
	slices.SortStableFunc(notes, func(x, y Note) int { return cmp.Compare(y.Kind, x.Kind) })
	for i, n := range notes {
		if i == 0 || notes[i-1].Kind != n.Kind {
			fmt.Fprintf(&sb, "# %s:\n", n.Kind)
		}
		comment(&sb, "  - ", n.Object+": "+n.Text)
	}
	return sb.String()
}

// comment writes text as comment lines wrapped at commentWidth, the first
// after lead, the others indented to match.
func comment(sb *strings.Builder, lead, text string) {
	indent := strings.Repeat(" ", len(lead))
	line := "# " + lead
	fresh := true
	for _, w := range strings.Fields(text) {
		if !fresh && len(line)+1+len(w) > commentWidth {
			sb.WriteString(line + "\n")
			line, fresh = "# "+indent, true
		}
		if !fresh {
			line += " "
		}
		line += w
		fresh = false
	}
	sb.WriteString(line + "\n")
}
