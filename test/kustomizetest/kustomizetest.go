// Package kustomizetest builds the kustomize base (config/default) with the
// kustomize API as a Go library, as `kubectl kustomize config/default` and
// Argo CD do, and reads what it holds. Its own tests check the base
// offline; test/helm holds its Deployment to the chart's, and
// test/helm/install applies it to a real API server and runs the
// controller from it.
package kustomizetest

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/backendslice/backendslice/test/controlplane"
)

// Namespace is the namespace config/default puts every namespaced object in.
const Namespace = "backendslice-system"

// DefaultDir is config/default in the repository.
func DefaultDir() (string, error) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "config", "default"), nil
}

// Build builds the kustomization in dir, from the files on disk, as
// `kubectl kustomize` does without flags, and returns its objects in the
// order kustomize writes them.
func Build(dir string) ([]*unstructured.Unstructured, error) {
	opts := krusty.MakeDefaultOptions()
	// No --reorder: the kustomization's sortOptions decide.
	opts.Reorder = krusty.ReorderOptionUnspecified
	k := krusty.MakeKustomizer(opts)
	res, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	var out []*unstructured.Unstructured
	for _, r := range res.Resources() {
		// Through JSON, so that numbers are int64 as client-go's are.
		js, err := r.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("kustomize build %s: %s: %w", dir, r.CurId(), err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(js); err != nil {
			return nil, fmt.Errorf("kustomize build %s: %s: %w", dir, r.CurId(), err)
		}
		out = append(out, u)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("kustomize build %s: no objects", dir)
	}
	return out, nil
}

// BuildDefault builds config/default.
func BuildDefault() ([]*unstructured.Unstructured, error) {
	dir, err := DefaultDir()
	if err != nil {
		return nil, err
	}
	return Build(dir)
}

// OfKind are the objects of a kind.
func OfKind(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// Deployment is the one Deployment of objs, typed.
func Deployment(objs []*unstructured.Unstructured) (*appsv1.Deployment, error) {
	ds := OfKind(objs, "Deployment")
	if len(ds) != 1 {
		return nil, fmt.Errorf("%d Deployments, want 1", len(ds))
	}
	d := &appsv1.Deployment{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(ds[0].Object, d); err != nil {
		return nil, err
	}
	return d, nil
}

// variable is a $(NAME) reference in a container's args.
var variable = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// Env is the environment the kubelet gives container c of a Pod in
// namespace: its literal values and the Pod's namespace from the downward
// API. Any other source is an error: the tests that run the controller
// from the base would have to provide it.
func Env(c corev1.Container, namespace string) (map[string]string, error) {
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			env[e.Name] = namespace
		default:
			return nil, fmt.Errorf("env %s comes from %+v: only literal values and metadata.namespace are known here", e.Name, e.ValueFrom)
		}
	}
	return env, nil
}

// Args are c's arguments as the kubelet passes them: each $(NAME) of its
// environment env replaced by its value. A reference to a name env lacks
// is an error (the kubelet would pass it unexpanded, which is never meant).
func Args(c corev1.Container, env map[string]string) ([]string, error) {
	var errs []error
	out := make([]string, 0, len(c.Args))
	for _, a := range c.Args {
		out = append(out, variable.ReplaceAllStringFunc(a, func(ref string) string {
			name := variable.FindStringSubmatch(ref)[1]
			v, ok := env[name]
			if !ok {
				errs = append(errs, fmt.Errorf("argument %q names $(%s), which the container's env does not set", a, name))
				return ref
			}
			return v
		}))
	}
	return out, errors.Join(errs...)
}
