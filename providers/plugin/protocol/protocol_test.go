package protocol

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestTypesFollowTheDocument: each wire type has exactly the properties
// its schema in openapi.yaml has, the required ones without omitempty,
// and the document's paths are the package's.
func TestTypesFollowTheDocument(t *testing.T) {
	var doc struct {
		Paths map[string]any `json:"paths"`
	}
	if err := yaml.Unmarshal(OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{InfoPath, ResolvePath} {
		if _, ok := doc.Paths[p]; !ok {
			t.Errorf("openapi.yaml has no path %s", p)
		}
	}
	types := map[string]any{"Info": Info{}, "ResolveRequest": ResolveRequest{}, "ResolveResponse": ResolveResponse{},
		"Endpoint": Endpoint{}, "ErrorResponse": ErrorResponse{}, "Error": Error{}}
	schemas := schemaFields()
	if len(schemas) != len(types) {
		t.Errorf("openapi.yaml has %d schemas, the package %d types", len(schemas), len(types))
	}
	for name, v := range types {
		schema, ok := schemas[name]
		if !ok {
			t.Errorf("openapi.yaml has no schema %s", name)
			continue
		}
		var fields, required []string
		rt := reflect.TypeOf(v)
		for i := range rt.NumField() {
			tag := rt.Field(i).Tag.Get("json")
			field, opts, _ := strings.Cut(tag, ",")
			fields = append(fields, field)
			if opts != "omitempty" {
				required = append(required, field)
			}
		}
		props := schema.Known
		slices.Sort(fields)
		slices.Sort(required)
		want := slices.Clone(schema.Required)
		slices.Sort(want)
		if !slices.Equal(fields, props) {
			t.Errorf("%s: the Go type has %v, the document %v", name, fields, props)
		}
		if !slices.Equal(required, want) {
			t.Errorf("%s: the Go type always sends %v, the document requires %v", name, required, want)
		}
	}
}
