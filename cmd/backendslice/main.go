// Command backendslice publishes backends that live outside a Kubernetes
// cluster as selectorless Services and EndpointSlices.
//
//	backendslice controller   run the controller
//	backendslice render       print, offline, what it would write for a file
//	backendslice validate     check manifests offline as the API server and the controller would
//	backendslice import       write ExternalBackends for hand-written Services
//	backendslice plugin-check run the provider conformance suite against a running plugin
//	backendslice version      print the build's version, commit and Go version (-o json for scripts)
//
// The demo, which starts a local control plane, is its own binary
// (cmd/backendslice-demo), so that this one, shipped in the image, carries
// no test tooling.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/backendslice/backendslice/cmd/backendslice/wiring"
	"github.com/backendslice/backendslice/controllers"
	"github.com/backendslice/backendslice/internal/version"
)

func main() {
	if err := rootCommand().Execute(); err != nil {
		os.Exit(1)
	}
}

func rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:          "backendslice",
		Short:        "Publish outside backends as Kubernetes Services and EndpointSlices",
		SilenceUsage: true,
	}
	root.AddCommand(controllerCommand(), renderCommand(), validateCommand(), importCommand(), pluginCheckCommand(), versionCommand())
	return root
}

func controllerCommand() *cobra.Command {
	var f wiring.ControllerFlags
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run the ExternalBackend controller against the cluster of --kubeconfig (or in-cluster)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := f.ManagerOptions()
			if err != nil {
				return err
			}
			ctrl.SetLogger(f.Logger())
			cfg, err := ctrl.GetConfig()
			if err != nil {
				return fmt.Errorf("finding the cluster: %w", err)
			}
			ctx := ctrl.SetupSignalHandler()
			p, err := f.NewProviders(ctx)
			if err != nil {
				return err
			}
			mgr, err := controllers.NewManager(cfg, wiring.WithProviders(opts, p))
			if err != nil {
				return err
			}
			v := version.Get()
			ctrl.Log.Info("starting backendslice controller", "version", v.Version, "commit", v.Commit, "go", v.GoVersion)
			return controllers.Run(ctx, mgr)
		},
	}
	f.Bind(cmd.Flags())
	// controller-runtime registers --kubeconfig on the standard flag set.
	cmd.Flags().AddGoFlagSet(flag.CommandLine)
	return cmd
}

// versionCommand prints which build this is: what `make build` or `make
// image` recorded, Go's VCS stamp, and the toolchain.
func versionCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the build's version, commit and Go version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch output {
			case "text":
				_, err := fmt.Fprint(cmd.OutOrStdout(), version.Get())
				return err
			case "json":
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(version.Get())
			default:
				return fmt.Errorf("--output %q: want text or json", output)
			}
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text, or json for scripts")
	return cmd
}
