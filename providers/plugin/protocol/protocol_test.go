package protocol

import (
	"reflect"
	"slices"
	"strconv"
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

// TestDocumentSaysTheBounds: the numbers openapi.yaml states are the
// package's: each error code's one status is a response of resolve named
// after it, the code enum is Codes, and the bounds of the fields are the
// limits the controller applies.
func TestDocumentSaysTheBounds(t *testing.T) {
	type schema struct {
		Minimum    *int              `json:"minimum"`
		Maximum    *int              `json:"maximum"`
		MaxLength  *int              `json:"maxLength"`
		Enum       []string          `json:"enum"`
		Properties map[string]schema `json:"properties"`
	}
	var doc struct {
		Paths map[string]map[string]struct {
			Responses map[string]struct {
				Description string `json:"description"`
			} `json:"responses"`
		} `json:"paths"`
		Components struct {
			Schemas map[string]schema `json:"schemas"`
		} `json:"components"`
	}
	if err := yaml.Unmarshal(OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	responses := doc.Paths[ResolvePath]["post"].Responses
	for _, code := range Codes {
		r, ok := responses[strconv.Itoa(StatusOf(code))]
		if !ok || !strings.HasPrefix(r.Description, code+".") {
			t.Errorf("resolve's response %d is %+v; want it to say %s", StatusOf(code), r, code)
		}
	}
	if len(responses) != len(Codes)+1 {
		t.Errorf("resolve has %d responses; want 200 and one for each of %v", len(responses), Codes)
	}
	s := doc.Components.Schemas
	if got := s["Error"].Properties["code"].Enum; !slices.Equal(got, Codes) {
		t.Errorf("Error.code's enum is %v, the package's codes %v", got, Codes)
	}
	for _, c := range []struct {
		what string
		got  *int
		want int
	}{
		{"ResolveRequest.waitSeconds minimum", s["ResolveRequest"].Properties["waitSeconds"].Minimum, MinWaitSeconds},
		{"ResolveRequest.waitSeconds maximum", s["ResolveRequest"].Properties["waitSeconds"].Maximum, MaxWaitSeconds},
		{"ResolveRequest.index maxLength", s["ResolveRequest"].Properties["index"].MaxLength, MaxIndexLength},
		{"ResolveResponse.index maxLength", s["ResolveResponse"].Properties["index"].MaxLength, MaxIndexLength},
		{"ResolveResponse.refreshAfterSeconds minimum", s["ResolveResponse"].Properties["refreshAfterSeconds"].Minimum, 0},
		{"Endpoint.address maxLength", s["Endpoint"].Properties["address"].MaxLength, MaxAddressLength},
		{"Endpoint.zone maxLength", s["Endpoint"].Properties["zone"].MaxLength, MaxZoneLength},
		{"Endpoint.hostname maxLength", s["Endpoint"].Properties["hostname"].MaxLength, MaxHostnameLength},
		{"Endpoint.port maximum", s["Endpoint"].Properties["port"].Maximum, 65535},
	} {
		if c.got == nil || *c.got != c.want {
			t.Errorf("%s: the document says %v, the package %d", c.what, c.got, c.want)
		}
	}
	for _, says := range []string{"64 KiB and 512 bytes for each of its\n    maxEndpoints", "headers larger than 32 KiB",
		"500 ms,\n    doubling", "up to 30 s", "keeps a\n    connection that carries no request for 4 s", "answers within 1 second",
		"0 or\n            absent means 30", "above 3600 is read as 3600"} {
		if !strings.Contains(string(OpenAPI), says) {
			t.Errorf("openapi.yaml does not say %q", says)
		}
	}
	if ResponseBaseBytes != 64<<10 || ResponseBytesPerEndpoint != 512 || MaxResponseHeaderBytes != 32<<10 ||
		DefaultRefreshSeconds != 30 || MaxRefreshSeconds != 3600 || InfoSeconds != 1 {
		t.Error("a bound the document states changed: say the new one in openapi.yaml and here")
	}
}
