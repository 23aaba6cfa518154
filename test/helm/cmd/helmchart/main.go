// Command helmchart lints or renders the backendslice chart with the Helm Go
// SDK pinned in go.mod, for `make helm-lint` and `make helm-template`:
//
//	helmchart lint [-f values.yaml]...      helm lint, failing on warnings
//	helmchart template [-f values.yaml]...  helm template, printed to stdout
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint/support"

	helmtest "github.com/backendslice/backendslice/test/helm"
)

// valueFiles is a repeatable -f flag.
type valueFiles []string

func (v *valueFiles) String() string     { return strings.Join(*v, ",") }
func (v *valueFiles) Set(s string) error { *v = append(*v, s); return nil }

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "helmchart:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 || (args[0] != "lint" && args[0] != "template") {
		return errors.New("usage: helmchart lint|template [-f values.yaml]")
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	var files valueFiles
	fs.Var(&files, "f", "values file, on top of the chart's values.yaml (repeatable)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	values := map[string]any{}
	for _, f := range files {
		v, err := helmtest.ReadValues(f)
		if err != nil {
			return err
		}
		values = chartutil.CoalesceTables(v, values)
	}
	if args[0] == "lint" {
		return lintChart(values, files)
	}
	ch, err := helmtest.Load()
	if err != nil {
		return err
	}
	manifest, _, err := helmtest.Render(ch, values)
	if err != nil {
		return err
	}
	fmt.Print(manifest)
	return nil
}

// lintChart prints what helm lint finds and fails on a warning or an error.
func lintChart(values map[string]any, files []string) error {
	msgs, err := helmtest.Lint(values)
	if err != nil {
		return err
	}
	failed := false
	for _, m := range msgs {
		fmt.Println(m.Error())
		failed = failed || m.Severity >= support.WarningSev
	}
	if failed {
		return errors.New("lint found problems")
	}
	fmt.Printf("charts/backendslice: linted with values %v: no warnings\n", append([]string{"values.yaml"}, files...))
	return nil
}
