// Command backendslice-demo starts a local kube-apiserver and etcd, applies
// the sample ExternalBackends, runs the controller on them and prints what
// it wrote. It is a developer's tool, apart from the backendslice binary:
// the control plane it starts is the tests' one (test/controlplane, on
// controller-runtime's envtest), which the shipped binary must not carry.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/cmd/backendslice/wiring"
	"github.com/backendslice/backendslice/controllers"
	"github.com/backendslice/backendslice/test/controlplane"
)

// demoNamespace is where the demo applies the samples.
const demoNamespace = "backendslice-demo"

// demoOptions configure the demo.
type demoOptions struct {
	samples     string
	once        bool
	timeout     time.Duration
	singleStack bool
}

func main() {
	if err := demoCommand().Execute(); err != nil {
		os.Exit(1)
	}
}

// demoCommand takes the controller's flags, and the demo's own.
func demoCommand() *cobra.Command {
	var f wiring.ControllerFlags
	var o demoOptions
	cmd := &cobra.Command{
		Use:          "backendslice-demo",
		Short:        "Start a local kube-apiserver and etcd, apply the samples, run the controller and show what it wrote",
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := f.ManagerOptions()
			if err != nil {
				return err
			}
			ctrl.SetLogger(f.Logger())
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			p, err := f.NewProviders(ctx)
			if err != nil {
				return err
			}
			return runDemo(ctx, cmd.OutOrStdout(), wiring.WithProviders(opts, p), o)
		},
	}
	f.Bind(cmd.Flags())
	cmd.Flags().StringVar(&o.samples, "samples", "config/samples", "folder of ExternalBackend manifests to apply")
	cmd.Flags().BoolVar(&o.once, "once", false, "stop after printing the result instead of running until Ctrl-C")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 60*time.Second, "how long to wait for the samples to become Ready")
	cmd.Flags().BoolVar(&o.singleStack, "single-stack", false, "run an IPv4-only API server, as most clusters are, instead of a dual-stack one")
	// The demo needs no ports of its own, and its tables read best without
	// the controller's info logs between them.
	for flag, value := range map[string]string{"metrics-bind-address": "0", "health-probe-bind-address": "0", "zap-log-level": "error"} {
		if err := cmd.Flags().Set(flag, value); err != nil {
			panic(fmt.Sprintf("demo flag %s: %v", flag, err))
		}
	}
	return cmd
}

// runDemo starts the control plane, applies the samples, runs the
// controller, prints what it wrote, and waits for ctx to end.
func runDemo(ctx context.Context, out io.Writer, opts controllers.ManagerOptions, o demoOptions) (err error) {
	fmt.Fprintln(out, "Starting kube-apiserver and etcd ...")
	cidrs := controlplane.DualStackServiceCIDRs
	if o.singleStack {
		cidrs = controlplane.SingleStackServiceCIDRs
	}
	cp, err := controlplane.StartWith(cidrs)
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(out, "Stopping the control plane ...")
		err = errors.Join(err, cp.Stop())
	}()
	kubeconfig, err := writeKubeconfig(cp)
	if err != nil {
		return err
	}
	// The kubeconfig holds the API server's admin credentials, and is no
	// use once the API server is gone.
	defer func() { err = errors.Join(err, os.RemoveAll(filepath.Dir(kubeconfig))) }()
	fmt.Fprintf(out, "API server at %s (Service ranges %s); kubeconfig written to %s (removed when the demo stops)\n", cp.Config.Host, cidrs, kubeconfig)

	opts.MetricsRegistry = prometheus.NewRegistry()
	// One demo runs one controller; its tests run the demo twice in one
	// process (dual-stack, then single-stack), one after the other.
	opts.SkipNameValidation = true
	mgr, err := controllers.NewManager(cp.Config, opts)
	if err != nil {
		return err
	}
	mgrCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mgrCtx) }()
	defer func() {
		cancel()
		err = errors.Join(err, <-done)
	}()

	c := mgr.GetClient()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: demoNamespace}}); err != nil {
		return fmt.Errorf("creating namespace %s: %w", demoNamespace, err)
	}
	names, err := applySamples(ctx, c, o.samples)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "Applied the BackendProvider(s) and %d ExternalBackend(s) from %s into namespace %s; waiting for Ready ...\n\n", len(names), o.samples, demoNamespace)
	if err := waitReady(ctx, mgr.GetAPIReader(), names, o.timeout); err != nil {
		return err
	}
	if err := printBackends(ctx, mgr.GetAPIReader(), out); err != nil {
		return err
	}
	if o.once {
		return nil
	}
	fmt.Fprintf(out, "\nThe controller keeps running: try\n  KUBECONFIG=%s kubectl -n %s edit xb postgres\nPress Ctrl-C to stop.\n", kubeconfig, demoNamespace)
	<-ctx.Done()
	return nil
}

// writeKubeconfig writes a kubeconfig for the demo's API server into a
// directory of its own, which the caller removes.
func writeKubeconfig(cp *controlplane.ControlPlane) (string, error) {
	dir, err := os.MkdirTemp("", "backendslice-demo-")
	if err != nil {
		return "", err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["demo"] = &clientcmdapi.Cluster{Server: cp.Config.Host, CertificateAuthorityData: cp.Config.CAData}
	cfg.AuthInfos["demo"] = &clientcmdapi.AuthInfo{ClientCertificateData: cp.Config.CertData, ClientKeyData: cp.Config.KeyData, Token: cp.Config.BearerToken}
	cfg.Contexts["demo"] = &clientcmdapi.Context{Cluster: "demo", AuthInfo: "demo", Namespace: demoNamespace}
	cfg.CurrentContext = "demo"
	path := filepath.Join(dir, "kubeconfig")
	return path, clientcmd.WriteToFile(*cfg, path)
}

// applySamples creates the BackendProviders and ExternalBackends in the
// YAML files of dir, the backends in the demo namespace; it returns the
// backends' names.
func applySamples(ctx context.Context, c client.Client, dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no samples (*.yaml) in %s: %w", dir, err)
	}
	var names []string
	for _, file := range files {
		objs, err := readSamples(file)
		if err != nil {
			return nil, err
		}
		for _, obj := range objs {
			if xb, ok := obj.(*v1alpha1.ExternalBackend); ok {
				xb.Namespace = demoNamespace
				names = append(names, xb.Name)
			}
			if err := c.Create(ctx, obj); err != nil {
				return nil, fmt.Errorf("%s: creating %s: %w", file, obj.GetName(), err)
			}
		}
	}
	return names, nil
}

// readSamples decodes the BackendProviders and ExternalBackends of a file.
func readSamples(file string) ([]client.Object, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	dec := yaml.NewYAMLOrJSONDecoder(f, 4096)
	var out []client.Object
	for {
		var raw runtime.RawExtension
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		var obj client.Object
		var tm metav1.TypeMeta
		if err := json.Unmarshal(raw.Raw, &tm); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		switch tm.Kind {
		case "BackendProvider":
			obj = &v1alpha1.BackendProvider{}
		case "ExternalBackend":
			obj = &v1alpha1.ExternalBackend{}
		default:
			return nil, fmt.Errorf("%s: the demo applies BackendProviders and ExternalBackends, not %q", file, tm.Kind)
		}
		if err := json.Unmarshal(raw.Raw, obj); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		out = append(out, obj)
	}
}

// waitReady waits until every named backend is Ready for its generation.
func waitReady(ctx context.Context, c client.Reader, names []string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for _, name := range names {
		for {
			xb := &v1alpha1.ExternalBackend{}
			err := c.Get(ctx, client.ObjectKey{Namespace: demoNamespace, Name: name}, xb)
			if err == nil && xb.Status.ObservedGeneration == xb.Generation &&
				meta.IsStatusConditionTrue(xb.Status.Conditions, v1alpha1.ConditionReady) {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s did not become Ready within %s: %v", name, timeout, xb.Status.Conditions)
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return nil
}

// printBackends prints each backend with its Service and slices as tables.
func printBackends(ctx context.Context, c client.Reader, out io.Writer) error {
	var xbs v1alpha1.ExternalBackendList
	if err := c.List(ctx, &xbs, client.InNamespace(demoNamespace)); err != nil {
		return err
	}
	for _, xb := range xbs.Items {
		svc := &corev1.Service{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: demoNamespace, Name: xb.Status.ServiceName}, svc); err != nil {
			return err
		}
		var sl discoveryv1.EndpointSliceList
		if err := c.List(ctx, &sl, client.InNamespace(demoNamespace), client.MatchingLabels{discoveryv1.LabelServiceName: svc.Name}); err != nil {
			return err
		}
		ready := meta.FindStatusCondition(xb.Status.Conditions, v1alpha1.ConditionReady)
		fmt.Fprintf(out, "ExternalBackend %s  Ready=%s (%s)\n", xb.Name, ready.Status, ready.Message)
		if c := meta.FindStatusCondition(xb.Status.Conditions, v1alpha1.ConditionResolved); c != nil && c.Reason != v1alpha1.ReasonResolved {
			fmt.Fprintf(out, "  Resolved=%s %s: %s\n", c.Status, c.Reason, c.Message)
		}
		fmt.Fprintf(out, "  Service %s  clusterIPs=%s  ipFamilies=%v  policy=%s  selector=%v\n",
			svc.Name, strings.Join(svc.Spec.ClusterIPs, ","), svc.Spec.IPFamilies, ptr.Deref(svc.Spec.IPFamilyPolicy, ""), svc.Spec.Selector)
		w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "  SLICE\tTYPE\tPORTS\tADDRESS\tZONE\tHOSTNAME\tREADY\tSERVING\tTERMINATING")
		slices.SortFunc(sl.Items, func(a, b discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
		for _, s := range sl.Items {
			ports := make([]string, 0, len(s.Ports))
			for _, p := range s.Ports {
				ports = append(ports, fmt.Sprintf("%s:%d/%s", ptr.Deref(p.Name, ""), ptr.Deref(p.Port, 0), ptr.Deref(p.Protocol, "")))
			}
			for i, e := range s.Endpoints {
				if i == 3 && len(s.Endpoints) > 4 {
					fmt.Fprintf(w, "  %s\t\t\t... %d more\t\t\t\t\t\n", s.Name, len(s.Endpoints)-3)
					break
				}
				fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\t%s\t%t\t%t\t%t\n", s.Name, s.AddressType, strings.Join(ports, ","),
					e.Addresses[0], ptr.Deref(e.Zone, "-"), ptr.Deref(e.Hostname, "-"),
					ptr.Deref(e.Conditions.Ready, false), ptr.Deref(e.Conditions.Serving, false), ptr.Deref(e.Conditions.Terminating, false))
			}
		}
		if err := w.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(out)
	}
	return nil
}
