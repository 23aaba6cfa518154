// Package buildcmd is what the repository's build commands (build-image,
// build-release) share: their flags are parsed, an interrupt cancels the
// build, and an error is printed and sets the exit status.
package buildcmd

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
)

// Action is a build command's work once its flags are parsed.
type Action func(ctx context.Context, stdout io.Writer) error

// Module is what every build command builds from: the module's root
// (-dir) and the version it is given (-version).
type Module struct {
	// Dir is the root of the backendslice module.
	Dir string
	// Version is the release version, "" for the chart's appVersion.
	Version string
}

// Define binds a command's own flags on fs; m holds the shared ones once
// they are parsed.
type Define func(fs *flag.FlagSet, m *Module) Action

// Main runs the command name: define binds its flags and returns its
// action, which runs after the flags in os.Args are parsed. It exits 1 on an
// error.
func Main(name string, define Define) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := Run(ctx, name, os.Args[1:], os.Stdout, define)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}

// Run parses args with the flags define binds, refuses arguments that are
// not flags, and runs the action.
func Run(ctx context.Context, name string, args []string, stdout io.Writer, define Define) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	var m Module
	fs.StringVar(&m.Dir, "dir", ".", "root of the backendslice module")
	fs.StringVar(&m.Version, "version", "", "the version to build (default: the chart's appVersion; a release needs the chart's version and appVersion to be it)")
	action := define(fs, &m)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return action(ctx, stdout)
}
