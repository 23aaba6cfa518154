package main

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/backendslice/backendslice/cmd/backendslice/wiring"
	"github.com/backendslice/backendslice/internal/validate"
)

// validateOptions configure `backendslice validate`.
type validateOptions struct {
	files           []string
	output          string
	strict          bool
	namespace       string
	namespaceLabels []string
	serviceCIDRs    []string
}

// validatedFlags are the controller flags that change validate's verdicts;
// the others are accepted, so that a Deployment's arguments can be
// passed as they are, and hidden.
var validatedFlags = append([]string{"allow-sources-without-provider"}, renderedFlags...)

// errFailed makes validate exit with status 1 when the report fails: the
// report itself says why.
var errFailed = errors.New("validation failed")

// validateCommand is `backendslice validate`: the API server's admission,
// the controller's own checks and tenancy, offline, for a pull request.
func validateCommand() *cobra.Command {
	var f wiring.ControllerFlags
	var o validateOptions
	cmd := &cobra.Command{
		Use:   "validate [-f] FILE|DIR|- ...",
		Short: "Check ExternalBackends and BackendProviders offline, as the API server and the controller would",
		Long: `Check, offline, the ExternalBackends and BackendProviders in the files given
(manifests, kustomize build or helm template output; folders are read
recursively, - is stdin) as the cluster would:

  - the API server's own admission, with the CRDs built into this binary:
    schema, defaults, pruning of unknown fields (refused, as kubectl and Argo
    CD refuse them) and every CEL rule, with admission's messages;
  - the controller's own checks, those that end in InvalidSpec on status;
  - tenancy: whether each source would be admitted to the BackendProvider it
    names, when the input holds the BackendProviders (and the Namespaces, or
    --namespace-labels gives their labels); "not checked" otherwise;
  - warnings: addresses the controller would drop (the deny list with the
    flags given, --service-cidrs, a provider's allowedCIDRs) and deprecated
    fields and values.

Other objects are passed over and counted. Findings name the file, the line
of the document, the field and its line. The exit status is 1 on any error,
and with --strict on any warning too.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts, err := f.ManagerOptions()
			if err != nil {
				return err
			}
			vo := validate.Options{Namespace: o.namespace, Decision: opts.Config.Decision(), AllowSourcesWithoutProvider: opts.Config.AllowSourcesWithoutProvider,
				Kinds: wiring.Kinds()}
			if vo.NamespaceLabels, err = parseNamespaceLabels(o.namespaceLabels); err != nil {
				return err
			}
			for _, c := range o.serviceCIDRs {
				p, err := netip.ParsePrefix(strings.TrimSpace(c))
				if err != nil {
					return fmt.Errorf("--service-cidrs: %w", err)
				}
				vo.ServiceCIDRs = append(vo.ServiceCIDRs, p.Masked())
			}
			return runValidate(cmd, append(o.files, args...), o, vo)
		},
	}
	f.Bind(cmd.Flags())
	cmd.Flags().VisitAll(func(fl *pflag.Flag) {
		if !slices.Contains(validatedFlags, fl.Name) {
			fl.Hidden = true
		}
	})
	cmd.Flags().StringSliceVarP(&o.files, "filename", "f", nil, "files, folders (read recursively) or - for stdin; also taken as arguments")
	cmd.Flags().StringVarP(&o.output, "output", "o", "text", "text, json, or github (GitHub Actions annotations)")
	cmd.Flags().BoolVar(&o.strict, "strict", false, "fail on warnings too (dropped addresses, deprecated fields)")
	cmd.Flags().StringVarP(&o.namespace, "namespace", "n", "default", "namespace of ExternalBackends that name none (as Argo CD's destination namespace)")
	cmd.Flags().StringArrayVar(&o.namespaceLabels, "namespace-labels", nil, "NAMESPACE=KEY=VALUE[,KEY=VALUE...]: the labels of a namespace the input does not hold, for BackendProviders that admit namespaces by selector (repeatable)")
	cmd.Flags().StringSliceVar(&o.serviceCIDRs, "service-cidrs", nil, "the cluster's Service ranges, which the controller reads from the cluster: addresses in them are dropped")
	return cmd
}

// runValidate reads files, checks them and writes the report; errFailed
// when it fails.
func runValidate(cmd *cobra.Command, files []string, o validateOptions, vo validate.Options) error {
	write, ok := validate.Formats[o.output]
	if !ok {
		return fmt.Errorf("--output %q: one of %s", o.output, formats())
	}
	if len(files) == 0 {
		return errors.New("no input: give files, folders or - (stdin)")
	}
	rep, err := validateFiles(cmd, files, vo)
	if err != nil && o.output == "github" {
		// The error names a file of the pull request: printed as cobra
		// prints it, a name holding a newline would start a workflow
		// command of its own.
		cmd.SilenceErrors = true
		if werr := validate.WriteGitHubError(cmd.ErrOrStderr(), err); werr != nil {
			return werr
		}
		return errFailed
	}
	if err != nil {
		return err
	}
	if err := write(cmd.OutOrStdout(), rep); err != nil {
		return err
	}
	if rep.Failed(o.strict) {
		// The report says why; the exit status is what CI reads.
		cmd.SilenceErrors = true
		return errFailed
	}
	return nil
}

// validateFiles reads files and checks them.
func validateFiles(cmd *cobra.Command, files []string, vo validate.Options) (validate.Report, error) {
	docs, err := validate.Read(cmd.InOrStdin(), files)
	if err != nil {
		return validate.Report{}, err
	}
	v, err := validate.New(vo)
	if err != nil {
		return validate.Report{}, err
	}
	return v.Validate(cmd.Context(), docs), nil
}

// parseNamespaceLabels reads --namespace-labels: NAMESPACE=KEY=VALUE,...
// (a namespace without labels is NAMESPACE=).
func parseNamespaceLabels(values []string) (map[string]map[string]string, error) {
	out := map[string]map[string]string{}
	for _, v := range values {
		ns, pairs, ok := strings.Cut(v, "=")
		if !ok || ns == "" {
			return nil, fmt.Errorf("--namespace-labels %q: write NAMESPACE=KEY=VALUE[,KEY=VALUE...]", v)
		}
		labels := map[string]string{}
		for _, p := range strings.Split(pairs, ",") {
			if p == "" {
				continue
			}
			k, val, ok := strings.Cut(p, "=")
			if !ok || k == "" {
				return nil, fmt.Errorf("--namespace-labels %q: label %q is not KEY=VALUE", v, p)
			}
			labels[k] = val
		}
		out[ns] = labels
	}
	return out, nil
}

// formats names the output formats, for messages.
func formats() string {
	names := make([]string, 0, len(validate.Formats))
	for n := range validate.Formats {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}
