package admission

import (
	"context"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// oldCRD has a deprecated version and a deprecated field, which the
// project's CRDs do not have yet: the warnings validate gives for them.
const oldCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}
  scope: Cluster
  versions:
  - name: v1beta1
    served: true
    storage: true
    deprecated: true
    deprecationWarning: example.com/v1beta1 Widget is going; use v1
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer, default: 3}
              parts:
                type: array
                items:
                  type: object
                  properties:
                    colour: {type: string, description: "Deprecated: paint is not part of a widget."}
  - name: v2
    served: false
    storage: false
    schema:
      openAPIV3Schema: {type: object}
`

func TestWarningsDefaultsAndRefusals(t *testing.T) {
	c, err := New([]byte(oldCRD))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	res := c.Create(ctx, []byte(`{"apiVersion":"example.com/v1beta1","kind":"Widget","metadata":{"name":"w","namespace":"x"},
		"spec":{"parts":[{"colour":"red"},{},{"colour":"blue"}]}}`), "default")
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	want := []Warning{{Message: "example.com/v1beta1 Widget is going; use v1"},
		{Field: "spec.parts[0].colour", Message: "spec.parts[0].colour: deprecated"},
		{Field: "spec.parts[2].colour", Message: "spec.parts[2].colour: deprecated"}}
	if !slices.Equal(res.Warnings, want) {
		t.Errorf("warnings %+v, want %+v", res.Warnings, want)
	}
	if size, _, _ := unstructured.NestedInt64(res.Object.Object, "spec", "size"); size != 3 {
		t.Errorf("spec.size %d, want the default 3", size)
	}
	if res.Object.GetNamespace() != "" || res.Object.GetGeneration() != 1 {
		t.Errorf("namespace %q generation %d: a cluster-scoped create has none, and starts at 1", res.Object.GetNamespace(), res.Object.GetGeneration())
	}

	res = c.Create(ctx, []byte(`{"apiVersion":"example.com/v1beta1","kind":"Widget","metadata":{"name":"w"},"spec":{"sise":4}}`), "")
	if !apierrors.IsBadRequest(res.Err) || !slices.Equal(res.Unknown, []string{"spec.sise"}) ||
		res.UnknownFieldMessage("spec.sise") != `Widget in version "v1beta1" cannot be handled as a Widget: strict decoding error: unknown field "spec.sise"` {
		t.Errorf("unknown field: %v, %v", res.Err, res.Unknown)
	}
	res = c.Create(ctx, []byte(`{"apiVersion":"example.com/v2","kind":"Widget","metadata":{"name":"w"}}`), "")
	if !apierrors.IsNotFound(res.Err) || !strings.Contains(res.Err.Error(), "serves versions [v1beta1]") {
		t.Errorf("unserved version: %v", res.Err)
	}
}
