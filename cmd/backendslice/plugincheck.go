package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/backendslice/backendslice/providers/plugin/plugincheck"
)

// errChecksFailed makes the command exit 1 once it printed what failed.
var errChecksFailed = errors.New("the plugin fails the checks above")

// pluginCheckCommand runs the provider conformance suite against a
// running plugin, so that its author can certify it before anyone
// installs it.
func pluginCheckCommand() *cobra.Command {
	var o plugincheck.Options
	var cases, caFile, tokenFile string
	cmd := &cobra.Command{
		Use:   "plugin-check --url URL --cases FILE",
		Short: "Run the provider conformance suite against a running plugin and print what fails",
		Long: `Run the provider conformance suite, the one every built-in provider passes,
against a running plugin, through the controller's own plugin client, and print
each property's verdict and a last line "N passed, M failed". The cases file
(YAML) says what the plugin should answer: good parameters with the endpoints
each gives, the parameters of a backend that does not exist, and parameters the
plugin refuses (see docs/plugins.md). Exits 1 when a check fails.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := plugincheck.ReadCases(cases)
			if err != nil {
				return err
			}
			o.Cases = c
			if caFile != "" {
				if o.CAPEM, err = os.ReadFile(caFile); err != nil {
					return err
				}
			}
			if tokenFile != "" {
				b, err := os.ReadFile(tokenFile)
				if err != nil {
					return err
				}
				o.Token = strings.TrimSpace(string(b))
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			results, err := plugincheck.Run(ctx, o, cmd.OutOrStdout())
			if err != nil {
				return err
			}
			for _, r := range results {
				if len(r.Problems) > 0 {
					return errChecksFailed
				}
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.URL, "url", "", "the plugin's url, as a BackendProvider's spec.plugin.url")
	fs.StringVar(&cases, "cases", "", "the cases file: what the plugin should answer")
	fs.StringVar(&caFile, "ca-file", "", "PEM file of the CA that signs the plugin's certificate (https)")
	fs.StringVar(&o.ServerName, "server-name", "", "the name verified in the plugin's certificate")
	fs.StringVar(&tokenFile, "token-file", "", "file holding the bearer token the plugin expects")
	fs.DurationVar(&o.Timeout, "timeout", 0, "spec.plugin.timeout (default 5s)")
	fs.IntVar(&o.MaxEndpoints, "max-endpoints", 0, "spec.plugin.maxEndpoints (default 1000)")
	for _, f := range []string{"url", "cases"} {
		if err := cmd.MarkFlagRequired(f); err != nil {
			panic(fmt.Sprintf("flag %s: %v", f, err))
		}
	}
	return cmd
}
