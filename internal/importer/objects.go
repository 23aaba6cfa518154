package importer

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// The kinds an import reads, as apiVersion/kind.
const (
	kindService           = "v1/Service"
	kindEndpoints         = "v1/Endpoints"
	kindEndpointSlice     = "discovery.k8s.io/v1/EndpointSlice"
	kindBetaEndpointSlice = "discovery.k8s.io/v1beta1/EndpointSlice"
)

// Objects are what an import reads: the Services, EndpointSlices and
// Endpoints, and how many objects of other kinds it passed over.
type Objects struct {
	Services  []corev1.Service
	Slices    []discoveryv1.EndpointSlice
	Endpoints []corev1.Endpoints
	// PassedOver counts the objects of other kinds, by "apiVersion/kind".
	PassedOver map[string]int
	// Notes are about objects read but not understood.
	Notes []Note
}

// Append adds the objects of p to o.
func (o *Objects) Append(p Objects) {
	o.Services = append(o.Services, p.Services...)
	o.Slices = append(o.Slices, p.Slices...)
	o.Endpoints = append(o.Endpoints, p.Endpoints...)
	o.Notes = append(o.Notes, p.Notes...)
	for k, n := range p.PassedOver {
		o.pass(k, n)
	}
}

// pass counts n objects of kind as passed over.
func (o *Objects) pass(kind string, n int) {
	if o.PassedOver == nil {
		o.PassedOver = map[string]int{}
	}
	o.PassedOver[kind] += n
}

// Decode reads the objects among the YAML (or JSON) documents of data, as
// kubectl and Argo CD read a manifest: several documents, List kinds
// (v1 List, ServiceList, ...) opened, empty documents skipped. Unknown
// fields of a Service, EndpointSlice or Endpoints are an error, as they
// are for kubectl's strict field validation.
func Decode(data []byte) (Objects, error) {
	var objs Objects
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for i := 1; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return objs, err
		}
		var obj map[string]any
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			return objs, fmt.Errorf("document %d: %w (a template? render it first, as `helm template ... | backendslice import -f -`)", i, err)
		}
		if len(obj) == 0 {
			continue
		}
		if err := objs.add(obj); err != nil {
			return objs, fmt.Errorf("document %d: %w", i, err)
		}
	}
}

// add reads one object, or each item of a List.
func (o *Objects) add(obj map[string]any) error {
	apiVersion, kind := str(obj["apiVersion"]), str(obj["kind"])
	if items, ok := obj["items"].([]any); ok && strings.HasSuffix(kind, "List") {
		for i, it := range items {
			item, ok := it.(map[string]any)
			if !ok {
				return fmt.Errorf("%s item %d is not an object", kind, i)
			}
			// The items of a typed list (ServiceList) carry no kind of
			// their own, as the API server returns them.
			if _, set := item["kind"]; !set && kind != "List" {
				item["apiVersion"], item["kind"] = apiVersion, strings.TrimSuffix(kind, "List")
			}
			if err := o.add(item); err != nil {
				return err
			}
		}
		return nil
	}
	switch key := apiVersion + "/" + kind; key {
	case kindService:
		return decodeInto(obj, kind, &o.Services)
	case kindEndpointSlice:
		return decodeInto(obj, kind, &o.Slices)
	case kindEndpoints:
		return decodeInto(obj, kind, &o.Endpoints)
	case kindBetaEndpointSlice:
		o.Notes = append(o.Notes, Note{Kind: Refused, Object: objectName(kind, obj),
			Text: "discovery.k8s.io/v1beta1, which Kubernetes no longer serves (since 1.25): not read; write it as discovery.k8s.io/v1 and import again"})
	default:
		if kind == "" {
			key = "(no kind)"
		}
		o.pass(key, 1)
	}
	return nil
}

// decodeInto decodes obj strictly and appends it to list.
func decodeInto[T any](obj map[string]any, kind string, list *[]T) error {
	js, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	var v T
	strict, err := kjson.UnmarshalStrict(js, &v)
	if err = errors.Join(append(strict, err)...); err != nil {
		return fmt.Errorf("%s: %w", objectName(kind, obj), err)
	}
	*list = append(*list, v)
	return nil
}

// objectName is "Kind namespace/name" of an undecoded object.
func objectName(kind string, obj map[string]any) string {
	meta, _ := obj["metadata"].(map[string]any)
	return name(kind, str(meta["namespace"]), str(meta["name"]))
}

// name is "Kind namespace/name", or "Kind name" without a namespace.
func name(kind, namespace, n string) string {
	if namespace == "" {
		return kind + " " + n
	}
	return kind + " " + namespace + "/" + n
}

// str is v when it is a string, else "".
func str(v any) string {
	s, _ := v.(string)
	return s
}
