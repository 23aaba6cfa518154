package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/yaml"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/cmd/backendslice/wiring"
	"github.com/backendslice/backendslice/controllers/externalbackend"
	"github.com/backendslice/backendslice/internal/publish"
	"github.com/backendslice/backendslice/internal/validate"
	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/providers/static"
)

// renderOptions configure `backendslice render`.
type renderOptions struct {
	// file holds the ExternalBackends: a file, a folder of *.yaml and *.yml, or - for stdin.
	file string
	// snapshot holds what providers answer, for sources other than static.
	snapshot string
	// namespace is for ExternalBackends that name none.
	namespace string
}

// renderedFlags are the controller flags that change what is written; render
// accepts the others too, so that a Deployment's arguments can be passed as
// they are, but hides them from its help.
var renderedFlags = []string{"max-endpoints-per-slice", "denied-cidrs", "denied-names", "unsafe-allow-default-denied", "cluster-domain"}

// renderCommand is `backendslice render`: what the controller would write,
// for review before a merge.
func renderCommand() *cobra.Command {
	var f wiring.ControllerFlags
	var o renderOptions
	cmd := &cobra.Command{
		Use:   "render -f FILE [--snapshot FILE]",
		Short: "Print the Service and EndpointSlices the controller would write for the ExternalBackends in FILE, offline",
		Long: `Print, as YAML documents, the Service and EndpointSlices the controller would
write for each ExternalBackend in FILE into a namespace where none exist yet,
using the controller's own normalisation and slice planner and the CRD's
defaults. No cluster is needed: static sources resolve as written, and the
answers of other sources come from --snapshot, a YAML map of
"namespace/name" to source name to endpoints, each as a static endpoint
(address, zone, hostname, health) plus an optional port. Other documents in
FILE are skipped. Pass the controller's --max-endpoints-per-slice,
--denied-cidrs, --denied-names and --cluster-domain if your deployment
changes them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Only the settings are read: render calls no provider, so it
			// builds none.
			opts, err := f.ManagerOptions()
			if err != nil {
				return err
			}
			return runRender(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout(), opts.Config, o)
		},
	}
	f.Bind(cmd.Flags())
	cmd.Flags().VisitAll(func(fl *pflag.Flag) {
		if !slices.Contains(renderedFlags, fl.Name) {
			fl.Hidden = true
		}
	})
	cmd.Flags().StringVarP(&o.file, "filename", "f", "", "ExternalBackend manifests: a file, a folder of *.yaml and *.yml files, or - for stdin")
	cmd.Flags().StringVar(&o.snapshot, "snapshot", "", "YAML file of provider answers for sources other than static")
	cmd.Flags().StringVarP(&o.namespace, "namespace", "n", "default", "namespace of ExternalBackends that name none (as Argo CD's destination namespace)")
	if err := cmd.MarkFlagRequired("filename"); err != nil {
		panic(fmt.Sprintf("render flag filename: %v", err))
	}
	return cmd
}

// runRender prints what the controller would write for each ExternalBackend
// in o.file, in the order they appear.
func runRender(ctx context.Context, stdin io.Reader, out io.Writer, cfg externalbackend.Config, o renderOptions) error {
	backends, err := readBackends(ctx, stdin, o.file, o.namespace)
	if err != nil {
		return err
	}
	snap, err := readSnapshot(o.snapshot)
	if err != nil {
		return err
	}
	reg, err := snapshotRegistry(snap)
	if err != nil {
		return err
	}
	var docs []string
	for _, xb := range backends {
		d, err := renderBackend(ctx, reg, cfg, xb)
		if err != nil {
			return fmt.Errorf("ExternalBackend %s/%s: %w", xb.Namespace, xb.Name, err)
		}
		docs = append(docs, d...)
	}
	_, err = io.WriteString(out, strings.Join(docs, "---\n"))
	return err
}

// renderBackend resolves the sources of xb and returns the YAML documents
// of what the controller writes for it, the first one headed by comments
// that name the backend and any address it drops.
func renderBackend(ctx context.Context, reg *providers.Registry, cfg externalbackend.Config, xb *v1alpha1.ExternalBackend) ([]string, error) {
	head := fmt.Sprintf("# ExternalBackend %s/%s\n", xb.Namespace, xb.Name)
	if xb.Spec.Suspend {
		return []string{head + "# spec.suspend is true: the controller writes nothing\n"}, nil
	}
	var results []publish.SourceResult
	for _, src := range xb.Spec.Sources {
		res, err := reg.Resolve(ctx, providers.Request{
			Namespace: xb.Namespace, Backend: xb.Name, Source: src, AddressTypes: xb.Spec.AddressTypes,
		})
		if err != nil {
			return nil, fmt.Errorf("source %s: %w", src.Name, err)
		}
		results = append(results, publish.SourceResult{Name: src.Name, Endpoints: res.Endpoints})
	}
	svc, eps, dropped, err := externalbackend.Render(wiring.Kinds(), xb, results, cfg, publish.ClusterNetworks{})
	if err != nil {
		return nil, err
	}
	for _, d := range dropped {
		head += fmt.Sprintf("# dropped %s from source %s: %s\n", d.Address, d.Source, d.Reason)
	}
	svc.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Service"))
	doc, err := toYAML(svc)
	if err != nil {
		return nil, err
	}
	docs := []string{head + doc}
	for _, s := range eps {
		s.SetGroupVersionKind(discoveryv1.SchemeGroupVersion.WithKind("EndpointSlice"))
		doc, err := toYAML(s)
		if err != nil {
			return nil, err
		}
		docs = append(docs, doc)
	}
	return docs, nil
}

// toYAML prints an object as the controller sends it, without the empty
// status that Go's zero values would add.
func toYAML(obj any) (string, error) {
	js, err := json.Marshal(obj)
	if err != nil {
		return "", err
	}
	var m map[string]any
	if err := json.Unmarshal(js, &m); err != nil {
		return "", err
	}
	delete(m, "status")
	out, err := yaml.Marshal(m)
	return string(out), err
}

// readBackends reads the ExternalBackends in file (a file, a folder or - for
// stdin), with namespace where they name none, through validate's path.
func readBackends(ctx context.Context, stdin io.Reader, file, namespace string) ([]*v1alpha1.ExternalBackend, error) {
	docs, err := validate.Read(stdin, []string{file})
	if err != nil {
		return nil, err
	}
	v, err := validate.New(validate.Options{Namespace: namespace, Kinds: wiring.Kinds()})
	if err != nil {
		return nil, err
	}
	return admitBackends(ctx, v, docs)
}

// admitBackends are the ExternalBackends among docs as the API server
// would store them, through the admission `backendslice validate` runs
// (the CRD's schema, defaults, pruning and CEL rules, with the CRD this
// binary embeds): render and import show nothing the API server would
// refuse, and what they show has the API server's defaults. A document
// that cannot be read, or an ExternalBackend the API server would refuse,
// is an error with the API server's message; other kinds are skipped.
func admitBackends(ctx context.Context, v *validate.Validator, docs []validate.Document) ([]*v1alpha1.ExternalBackend, error) {
	var out []*v1alpha1.ExternalBackend
	for _, d := range docs {
		if d.Err != nil {
			return nil, fmt.Errorf("%s: %w", d, d.Err)
		}
		if d.Kind().GroupKind() != backendKind {
			continue
		}
		res := v.Admit(ctx, d)
		if res.Err != nil {
			return nil, fmt.Errorf("%s: the API server would refuse it: %w", d, res.Err)
		}
		js, err := res.Object.MarshalJSON()
		if err != nil {
			return nil, err
		}
		xb := &v1alpha1.ExternalBackend{}
		if err := json.Unmarshal(js, xb); err != nil {
			return nil, fmt.Errorf("%s: %w", d, err)
		}
		out = append(out, xb)
	}
	return out, nil
}

// backendKind is the kind render and import read.
var backendKind = v1alpha1.GroupVersion.WithKind("ExternalBackend").GroupKind()

// snapshot is what providers answered: by "namespace/name" of the
// ExternalBackend, then by source name, the endpoints found.
type snapshot map[string]map[string][]snapshotEndpoint

// snapshotEndpoint is an endpoint as a provider found it, written as a
// static endpoint, plus the backend's own port where it tells one (as RDS
// instances do).
type snapshotEndpoint struct {
	v1alpha1.StaticEndpoint `json:",inline"`
	// Port replaces the targetPort of the Service's ports for this endpoint.
	Port int32 `json:"port,omitempty"`
}

// readSnapshot reads the snapshot file; no file is an empty snapshot.
func readSnapshot(file string) (snapshot, error) {
	if file == "" {
		return nil, nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var snap snapshot
	if err := yaml.UnmarshalStrict(data, &snap); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return snap, nil
}

// snapshotRegistry resolves static sources with the static provider and
// every other kind from the snapshot.
func snapshotRegistry(snap snapshot) (*providers.Registry, error) {
	kinds := wiring.Kinds()
	ps := []providers.Provider{static.New()}
	for _, k := range kinds {
		if k.Kind != static.Kind {
			ps = append(ps, snapshotProvider{kind: k.Kind, snap: snap})
		}
	}
	return kinds.NewRegistry(ps...)
}

// snapshotProvider answers one source kind from a snapshot.
type snapshotProvider struct {
	kind providers.Kind
	snap snapshot
}

// Kind is the source kind the provider stands in for.
func (p snapshotProvider) Kind() providers.Kind { return p.kind }

// Resolve returns the snapshot's endpoints for the source, read as the
// static provider reads its endpoints so that health means the same.
func (p snapshotProvider) Resolve(ctx context.Context, req providers.Request) (providers.Result, error) {
	key := req.Namespace + "/" + req.Backend
	eps, ok := p.snap[key][req.Source.Name]
	if !ok {
		return providers.Result{}, fmt.Errorf("a %s source is read from --snapshot offline, and the snapshot lists no endpoints under %q, source %q",
			p.kind, key, req.Source.Name)
	}
	src := &v1alpha1.StaticSource{}
	for _, e := range eps {
		src.Endpoints = append(src.Endpoints, e.StaticEndpoint)
	}
	res, err := static.New().Resolve(ctx, providers.Request{Source: v1alpha1.Source{Name: req.Source.Name, Static: src}})
	if err != nil {
		return res, err
	}
	// The static provider returns one endpoint for each it is given, in order.
	for i := range res.Endpoints {
		res.Endpoints[i].Port = eps[i].Port
	}
	return res, nil
}
