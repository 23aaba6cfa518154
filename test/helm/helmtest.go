// Package helmtest loads, lints and renders the backendslice Helm chart
// (charts/backendslice) with the Helm Go SDK, as `helm lint` and
// `helm template` do. The chart's tests and the Makefile's helm-lint and
// helm-template targets use it.
package helmtest

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/backendslice/backendslice/test/controlplane"
)

// Release and namespace the chart is rendered as.
const (
	ReleaseName = "backendslice"
	Namespace   = "backendslice-system"
)

// KubeVersion is the Kubernetes version offline renders target: the
// version of the test control plane.
var KubeVersion = chartutil.KubeVersion{Version: "v1.37.2", Major: "1", Minor: "37"}

// ChartDir is the chart's directory in the repository.
func ChartDir() (string, error) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "charts", "backendslice"), nil
}

// Load loads the chart from the repository.
func Load() (*chart.Chart, error) {
	dir, err := ChartDir()
	if err != nil {
		return nil, err
	}
	return loader.Load(dir)
}

// ReadValues reads a values file.
func ReadValues(path string) (map[string]any, error) {
	v, err := chartutil.ReadValuesFile(path)
	if err != nil {
		return nil, err
	}
	return v.AsMap(), nil
}

// Lint runs `helm lint` over the chart with values on top of its defaults,
// and returns what it found.
func Lint(values map[string]any) ([]support.Message, error) {
	dir, err := ChartDir()
	if err != nil {
		return nil, err
	}
	return lint.AllWithKubeVersion(dir, values, Namespace, &KubeVersion).Messages, nil
}

// Render renders the chart with values on top of its defaults as
// `helm template` does: values.schema.json is checked, nothing is sent to a
// cluster. It returns the manifest and the notes.
func Render(ch *chart.Chart, values map[string]any) (manifest, notes string, err error) {
	inst := action.NewInstall(&action.Configuration{})
	inst.DryRun, inst.ClientOnly, inst.Replace = true, true, true
	inst.ReleaseName, inst.Namespace = ReleaseName, Namespace
	inst.KubeVersion = &KubeVersion
	rel, err := inst.Run(ch, values)
	if err != nil {
		return "", "", err
	}
	return rel.Manifest, rel.Info.Notes, nil
}

// RenderObjects loads the chart, renders it with values (see Render) and
// parses the objects.
func RenderObjects(values map[string]any) ([]*unstructured.Unstructured, error) {
	ch, err := Load()
	if err != nil {
		return nil, err
	}
	manifest, _, err := Render(ch, values)
	if err != nil {
		return nil, err
	}
	return Objects(manifest)
}

// Documents splits a rendered manifest into its YAML documents, in order,
// each starting with Helm's "# Source:" line.
func Documents(manifest string) []string {
	var out []string
	for _, d := range strings.Split(manifest, "\n---\n") {
		if d = strings.TrimSpace(strings.TrimPrefix(d, "---\n")); d != "" {
			out = append(out, d)
		}
	}
	return out
}

// Objects parses a rendered manifest into objects, in order.
func Objects(manifest string) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, d := range Documents(manifest) {
		o := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(d), &o.Object); err != nil {
			return nil, fmt.Errorf("parsing %q: %w", firstLine(d), err)
		}
		if len(o.Object) == 0 {
			continue
		}
		out = append(out, o)
	}
	if len(out) == 0 {
		return nil, errors.New("the manifest has no objects")
	}
	return out, nil
}

// firstLine is the first line of s, to name a document in errors.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
