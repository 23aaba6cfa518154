package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/backendslice/backendslice/cmd/backendslice/wiring"
	"github.com/backendslice/backendslice/controllers/externalbackend"
	"github.com/backendslice/backendslice/internal/importer"
	"github.com/backendslice/backendslice/internal/publish"
	"github.com/backendslice/backendslice/internal/validate"
	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/providers/static"
)

// importOptions configure `backendslice import`.
type importOptions struct {
	// files are manifests: files, folders (read recursively) or - for stdin.
	files []string
	// kubeconfig, when set, reads the live objects of namespace instead.
	kubeconfig string
	// namespace is the live namespace read, or that of manifests naming none.
	namespace string
	// output is a folder for one file per backend; stdout when empty.
	output string
	importer.Options
}

// importCommand is `backendslice import`: ExternalBackends for what teams
// publish by hand today.
func importCommand() *cobra.Command {
	var f wiring.ControllerFlags
	var o importOptions
	cmd := &cobra.Command{
		Use:   "import (-f PATH... | --kubeconfig FILE [-n NAMESPACE]) [-o DIR] [--adopt]",
		Short: "Write ExternalBackends that publish what selectorless Services, their EndpointSlices, Endpoints and ExternalName Services publish",
		Long: `Read Services, EndpointSlices and Endpoints, from manifests (-f: files,
folders read recursively, or - for stdin; several documents and List kinds) or
from a live namespace (--kubeconfig, -n), and write for each selectorless or
ExternalName Service an ExternalBackend of its name and namespace that
publishes the same endpoints: addresses, families, zones, hostnames,
conditions as health, and the endpoints' ports as targetPorts. An ExternalName
Service becomes a dns source on its externalName.

Everything that cannot be carried over is noted, never dropped silently:
on stderr, and as comments above each ExternalBackend ("left out", "changed",
"refused", "note"). Services with a selector are refused; objects of other
kinds are passed over and counted. Each ExternalBackend is checked with the
controller's own normalisation (pass --denied-cidrs, --denied-names and
--cluster-domain if your deployment changes them): addresses it would drop
are noted.

Exit status: 0 when at least one ExternalBackend was written, even with
notes; 1 when the input cannot be read or nothing could be imported.`,
		Args: cobra.NoArgs,
		// "Nothing imported" is no usage error.
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (len(o.files) == 0) == (o.kubeconfig == "") {
				return errors.New("give either -f (manifests) or --kubeconfig (a live namespace)")
			}
			opts, err := f.ManagerOptions()
			if err != nil {
				return err
			}
			return runImport(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr(), opts.Config, o)
		},
	}
	f.Bind(cmd.Flags())
	cmd.Flags().VisitAll(func(fl *pflag.Flag) {
		if !slices.Contains(renderedFlags, fl.Name) {
			fl.Hidden = true
		}
	})
	fl := cmd.Flags()
	fl.StringArrayVarP(&o.files, "filename", "f", nil, "manifests: a file, a folder (read recursively: *.yaml, *.yml, *.json) or - for stdin; repeatable")
	fl.StringVar(&o.kubeconfig, "kubeconfig", "", "read the live objects of a namespace through this kubeconfig instead of manifests")
	fl.StringVarP(&o.namespace, "namespace", "n", "", "with --kubeconfig, the namespace read (default: the context's, else default); with -f, the namespace of objects that name none")
	fl.StringVarP(&o.output, "output", "o", "", "write one file per ExternalBackend into this folder (NAMESPACE.NAME.yaml) instead of stdout")
	fl.BoolVar(&o.Adopt, "adopt", false, "write spec.service.adopt: true, so that the controller takes each Service over (keeping its cluster IP) instead of refusing it as not its own")
	fl.StringVar(&o.StaticProvider, "static-provider", "", "BackendProvider the imported static sources name (providerRef)")
	fl.StringVar(&o.DNSProvider, "dns-provider", "", "BackendProvider the dns sources of ExternalName Services name (providerRef)")
	return cmd
}

// runImport reads the objects, imports them, and writes the backends to
// out (or o.output) and the notes to errOut.
func runImport(ctx context.Context, stdin io.Reader, out, errOut io.Writer, cfg externalbackend.Config, o importOptions) error {
	var objs importer.Objects
	var err error
	if o.kubeconfig != "" {
		objs, o.Namespace, err = readLive(ctx, o.kubeconfig, o.namespace)
	} else {
		o.Namespace = o.namespace
		objs, err = readManifests(stdin, o.files)
	}
	if err != nil {
		return err
	}
	res := importer.Convert(objs, o.Options)
	res, err = checkWithController(ctx, cfg, res)
	if err != nil {
		return err
	}
	report(errOut, res, objs.PassedOver)
	if len(res.Backends) == 0 {
		return errors.New("nothing imported: no Service of the input could become an ExternalBackend (see the notes above)")
	}
	if o.output == "" {
		return writeStream(out, res.Backends)
	}
	return writeFolder(errOut, o.output, res.Backends)
}

// readManifests reads the objects of each path, in order: a file, a
// folder's *.yaml, *.yml and *.json files (hidden folders skipped), or -.
func readManifests(stdin io.Reader, paths []string) (importer.Objects, error) {
	var objs importer.Objects
	for _, p := range paths {
		files := []string{p}
		if info, err := os.Stat(p); err == nil && info.IsDir() {
			files = nil
			err := filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
				switch {
				case err != nil:
					return err
				case d.IsDir() && path != p && strings.HasPrefix(d.Name(), "."):
					return filepath.SkipDir
				case !d.IsDir() && slices.Contains([]string{".yaml", ".yml", ".json"}, filepath.Ext(path)):
					files = append(files, path)
				}
				return nil
			})
			if err != nil {
				return objs, err
			}
		}
		for _, file := range files {
			data, err := readInput(stdin, file)
			if err != nil {
				return objs, err
			}
			got, err := importer.Decode(data)
			if err != nil {
				return objs, fmt.Errorf("%s: %w", file, err)
			}
			objs.Append(got)
		}
	}
	return objs, nil
}

// readLive lists the Services, EndpointSlices and Endpoints of a namespace
// (the kubeconfig context's when namespace is empty) and returns them with
// the namespace read.
func readLive(ctx context.Context, kubeconfig, namespace string) (importer.Objects, string, error) {
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: kubeconfig},
		&clientcmd.ConfigOverrides{Context: clientcmdapi.Context{Namespace: namespace}})
	ns, _, err := loader.Namespace()
	if err != nil {
		return importer.Objects{}, "", fmt.Errorf("%s: %w", kubeconfig, err)
	}
	cfg, err := loader.ClientConfig()
	if err != nil {
		return importer.Objects{}, "", fmt.Errorf("%s: %w", kubeconfig, err)
	}
	// Listing v1 Endpoints draws a deprecation warning (Kubernetes 1.33
	// and later): reading them is the point here.
	cfg.WarningHandler = rest.NoWarnings{}
	scheme := runtime.NewScheme()
	if err := errors.Join(corev1.AddToScheme(scheme), discoveryv1.AddToScheme(scheme)); err != nil {
		return importer.Objects{}, "", err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return importer.Objects{}, "", err
	}
	var svcs corev1.ServiceList
	var eps discoveryv1.EndpointSliceList
	var legacy corev1.EndpointsList
	for _, l := range []client.ObjectList{&svcs, &eps, &legacy} {
		if err := c.List(ctx, l, client.InNamespace(ns)); err != nil {
			return importer.Objects{}, "", fmt.Errorf("listing in namespace %s: %w", ns, err)
		}
	}
	return importer.Objects{Services: svcs.Items, Slices: eps.Items, Endpoints: legacy.Items}, ns, nil
}

// checkWithController runs each backend through the controller's own spec
// checks and normalisation, as render does: addresses it would drop are
// noted, and a backend it would refuse is refused here, with its message.
func checkWithController(ctx context.Context, cfg externalbackend.Config, res importer.Result) (importer.Result, error) {
	v, err := validate.New(validate.Options{Namespace: metav1.NamespaceDefault, Kinds: wiring.Kinds()})
	if err != nil {
		return res, err
	}
	var kept []importer.Backend
	for _, b := range res.Backends {
		if err := checkBackend(ctx, cfg, v, &b); err != nil {
			res.Refused = append(res.Refused, append(b.Notes, importer.Note{Kind: importer.Refused, Object: b.Replaces[0],
				Text: "the controller would refuse the ExternalBackend: " + err.Error()})...)
			continue
		}
		kept = append(kept, b)
	}
	res.Backends = kept
	return res, nil
}

// checkBackend admits b as the API server would (render's path) and
// renders it as the controller would, with its static sources resolved
// (other kinds are not resolved offline), and notes the addresses it drops.
func checkBackend(ctx context.Context, cfg externalbackend.Config, v *validate.Validator, b *importer.Backend) error {
	data, err := yaml.Marshal(b.ExternalBackend)
	if err != nil {
		return err
	}
	xbs, err := admitBackends(ctx, v, validate.Split(b.Replaces[0], data))
	if err != nil {
		return err
	}
	xb := xbs[0]
	xb.Namespace = b.Namespace
	var results []publish.SourceResult
	for _, src := range xb.Spec.Sources {
		if src.Static == nil {
			continue
		}
		res, err := static.New().Resolve(ctx, providers.Request{Namespace: xb.Namespace, Backend: xb.Name, Source: src})
		if err != nil {
			return err
		}
		results = append(results, publish.SourceResult{Name: src.Name, Endpoints: res.Endpoints})
	}
	_, _, dropped, err := externalbackend.Render(wiring.Kinds(), xb, results, cfg, publish.ClusterNetworks{})
	if err != nil {
		return err
	}
	for _, d := range dropped {
		b.Notes = append(b.Notes, importer.Note{Kind: importer.LeftOut, Object: b.Replaces[0],
			Text: fmt.Sprintf("endpoint %s: the controller drops it: %s", d.Address, d.Reason)})
	}
	return nil
}

// readInput reads a file, or stdin for "-".
func readInput(stdin io.Reader, name string) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(stdin)
	}
	return os.ReadFile(name)
}

// report writes the notes on each backend, the refusals, what was passed
// over and a summary line.
func report(w io.Writer, res importer.Result, passedOver map[string]int) {
	for _, b := range res.Backends {
		fmt.Fprintf(w, "ExternalBackend %s/%s <- %s\n", b.Namespace, b.ExternalBackend.Name, strings.Join(b.Replaces, ", "))
		notes := slices.Clone(b.Notes)
		slices.SortStableFunc(notes, func(x, y importer.Note) int { return cmp.Compare(y.Kind, x.Kind) })
		for _, n := range notes {
			fmt.Fprintf(w, "  %s\n", n)
		}
	}
	for _, n := range res.Refused {
		fmt.Fprintf(w, "%s\n", n)
	}
	if len(passedOver) > 0 {
		var kinds []string
		total := 0
		for _, k := range slices.Sorted(maps.Keys(passedOver)) {
			kinds = append(kinds, fmt.Sprintf("%s (%d)", k, passedOver[k]))
			total += passedOver[k]
		}
		fmt.Fprintf(w, "passed over %d object(s) of other kinds: %s\n", total, strings.Join(kinds, ", "))
	}
	refused := 0
	for _, n := range res.Refused {
		if n.Kind == importer.Refused && strings.HasPrefix(n.Object, "Service ") {
			refused++
		}
	}
	fmt.Fprintf(w, "imported %d ExternalBackend(s); %d Service(s) refused\n", len(res.Backends), refused)
}

// writeStream writes the backends to w as one stream of YAML documents.
func writeStream(w io.Writer, backends []importer.Backend) error {
	docs := make([]string, 0, len(backends))
	for _, b := range backends {
		doc, err := b.Manifest()
		if err != nil {
			return err
		}
		docs = append(docs, string(doc))
	}
	_, err := io.WriteString(w, strings.Join(docs, "---\n"))
	return err
}

// writeFolder writes each backend to dir/NAMESPACE.NAME.yaml, replacing
// what an earlier import wrote there, and names each file on log.
func writeFolder(log io.Writer, dir string, backends []importer.Backend) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, b := range backends {
		doc, err := b.Manifest()
		if err != nil {
			return err
		}
		path := filepath.Join(dir, b.Namespace+"."+b.ExternalBackend.Name+".yaml")
		if err := os.WriteFile(path, doc, 0o644); err != nil {
			return err
		}
		fmt.Fprintf(log, "wrote %s\n", path)
	}
	return nil
}
