package admission

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
)

// deprecatedFields are the paths, under prefix, of the fields of s whose
// description starts with "Deprecated" (the Kubernetes API convention,
// which controller-gen copies from the Go doc comment): "spec.a",
// "spec.list[].b", "spec.map{}.c". The API server says nothing of them;
// kubectl explain and the docs do, and validate warns.
func deprecatedFields(s *apiextensions.JSONSchemaProps, prefix string) []string {
	if s == nil {
		return nil
	}
	var out []string
	names := make([]string, 0, len(s.Properties))
	for name := range s.Properties {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		prop := s.Properties[name]
		path := strings.TrimPrefix(prefix+"."+name, ".")
		if strings.HasPrefix(prop.Description, "Deprecated") {
			out = append(out, path)
		}
		out = append(out, deprecatedFields(&prop, path)...)
	}
	if s.Items != nil && s.Items.Schema != nil {
		out = append(out, deprecatedFields(s.Items.Schema, prefix+"[]")...)
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		out = append(out, deprecatedFields(s.AdditionalProperties.Schema, prefix+"{}")...)
	}
	return out
}

// setFields are the field paths (as the API server writes them:
// "spec.list[2].b", "spec.map[k].c") at which obj sets the field of a
// deprecatedFields path.
func setFields(obj any, path string) []string {
	var out []string
	var walk func(x any, rest, at string)
	walk = func(x any, rest, at string) {
		if rest == "" {
			out = append(out, at)
			return
		}
		switch {
		case strings.HasPrefix(rest, "[]"):
			list, _ := x.([]any)
			for i, item := range list {
				walk(item, rest[2:], fmt.Sprintf("%s[%d]", at, i))
			}
		case strings.HasPrefix(rest, "{}"):
			m, _ := x.(map[string]any)
			keys := make([]string, 0, len(m))
			for k := range m {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				walk(m[k], rest[2:], fmt.Sprintf("%s[%s]", at, k))
			}
		default:
			rest = strings.TrimPrefix(rest, ".")
			name, tail := rest, ""
			if i := strings.IndexAny(rest, ".[{"); i >= 0 {
				name, tail = rest[:i], rest[i:]
			}
			m, _ := x.(map[string]any)
			v, ok := m[name]
			if !ok || v == nil {
				return
			}
			walk(v, tail, strings.TrimPrefix(at+"."+name, "."))
		}
	}
	walk(obj, path, "")
	return out
}
