package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/cmd/backendslice/wiring"
	"github.com/backendslice/backendslice/internal/validate"
)

// FuzzRenderDecode feeds arbitrary bytes to admitBackends, which reads
// every file `backendslice render` is given (through validate's path), and renders what it decodes
// the way render does, with the controller's default flags and the provider
// answers of testdata/render/snapshot.yaml. Render reads files nobody has
// checked yet (a pull request under review), so it must answer any input
// with objects or an error, never a panic. The oracle:
//
//   - an error comes alone (no objects with it) and says something;
//   - every decoded object is an ExternalBackend of the version this binary
//     knows (other kinds are skipped, other versions refused), and one
//     validate finds no admission error in;
//   - rendering a decoded object does not panic, and what it prints is YAML
//     documents of the objects the controller writes: a Service first, then
//     its EndpointSlices, or the note on a suspended backend alone.
//
// The seeds are the files render is tested with (the samples and
// testdata/render) and a few inputs they leave out.
func FuzzRenderDecode(f *testing.F) {
	var files []string
	for _, pattern := range []string{"../../config/samples/*.yaml", "../../config/samples/aws/*.yaml", "testdata/render/*.yaml"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			f.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) == 0 {
		f.Fatal("no seed files")
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	// What the files leave out: another version, JSON, all three families,
	// and empty documents.
	f.Add([]byte("apiVersion: backendslice.io/v2\nkind: ExternalBackend\nmetadata: {name: db}\n"))
	f.Add([]byte(`{"apiVersion": "backendslice.io/v1alpha1", "kind": "ExternalBackend", "metadata": {"name": "db"},
"spec": {"service": {"ports": [{"name": "pg", "port": 5432, "targetPort": 6432}]}, "addressTypes": ["IPv4", "IPv6", "FQDN"],
"sources": [{"name": "s", "static": {"endpoints": [{"address": "2001:DB8::1", "hostname": "a"}, {"address": "Db.Example.com."},
{"address": "::ffff:192.0.2.1", "health": "Draining"}, {"address": "127.0.0.1"}]}}]}}`))
	f.Add([]byte("---\n---\n# comments only\n---\n"))
	v, err := validate.New(validate.Options{Namespace: "default", Kinds: wiring.Kinds()})
	if err != nil {
		f.Fatal(err)
	}
	var flags wiring.ControllerFlags
	flags.Bind(pflag.NewFlagSet("render", pflag.ContinueOnError))
	opts, err := flags.ManagerOptions()
	if err != nil {
		f.Fatal(err)
	}
	snap, err := readSnapshot("testdata/render/snapshot.yaml")
	if err != nil {
		f.Fatal(err)
	}
	reg, err := snapshotRegistry(snap)
	if err != nil {
		f.Fatal(err)
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		docs := validate.Split("fuzz", data)
		xbs, err := admitBackends(context.Background(), v, docs)
		if err != nil {
			if xbs != nil || strings.TrimSpace(err.Error()) == "" {
				t.Fatalf("decoding failed with objects %v and error %q", xbs, err)
			}
			return
		}
		for _, f := range v.Validate(context.Background(), docs).Findings {
			if f.Check == validate.CheckAdmission && f.Kind == "ExternalBackend" {
				t.Errorf("render read what validate refuses: %+v", f)
			}
		}
		for _, xb := range xbs {
			if xb.APIVersion != v1alpha1.GroupVersion.String() || xb.Kind != "ExternalBackend" {
				t.Errorf("decoded a %s %s", xb.APIVersion, xb.Kind)
			}
			if xb.Namespace == "" {
				xb.Namespace = "default"
			}
			docs, err := renderBackend(context.Background(), reg, opts.Config, xb)
			if err != nil {
				continue // the controller would not write it either: its status says why
			}
			checkRendered(t, xb, docs)
		}
	})
}

// checkRendered checks the documents printed for xb: each the YAML of one
// object of the kind expected at its place.
func checkRendered(t *testing.T, xb *v1alpha1.ExternalBackend, docs []string) {
	t.Helper()
	if xb.Spec.Suspend {
		if len(docs) != 1 || strings.TrimSpace(docs[0]) == "" {
			t.Errorf("suspended %s/%s rendered as %q", xb.Namespace, xb.Name, docs)
		}
		return
	}
	if len(docs) == 0 {
		t.Fatalf("%s/%s rendered nothing", xb.Namespace, xb.Name)
	}
	for i, doc := range docs {
		var obj map[string]any
		if err := yaml.UnmarshalStrict([]byte(doc), &obj); err != nil {
			t.Fatalf("%s/%s: document %d is not YAML: %v\n%s", xb.Namespace, xb.Name, i, err, doc)
		}
		want := [2]string{"discovery.k8s.io/v1", "EndpointSlice"}
		if i == 0 {
			want = [2]string{"v1", "Service"}
		}
		if got := [2]string{str(obj["apiVersion"]), str(obj["kind"])}; got != want {
			t.Errorf("%s/%s: document %d is a %v, want a %v", xb.Namespace, xb.Name, i, got, want)
		}
	}
}

// str is v when it is a string, else "".
func str(v any) string {
	s, _ := v.(string)
	return s
}
