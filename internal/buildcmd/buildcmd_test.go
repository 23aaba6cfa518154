package buildcmd

import (
	"bytes"
	"context"
	"flag"
	"io"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	define := func(fs *flag.FlagSet, m *Module) Action {
		out := fs.String("out", "bin", "where")
		return func(_ context.Context, stdout io.Writer) error {
			_, err := io.WriteString(stdout, "out="+*out+" dir="+m.Dir+" version="+m.Version)
			return err
		}
	}
	cases := []struct {
		name    string
		args    []string
		want    string
		wantErr string
	}{
		{name: "default", want: "out=bin dir=. version="},
		{name: "flags", args: []string{"-out", "x", "-dir", "src", "-version", "0.3.0"}, want: "out=x dir=src version=0.3.0"},
		{name: "stray argument", args: []string{"-out", "x", "y"}, wantErr: `unexpected arguments ["y"]`},
		{name: "unknown flag", args: []string{"-nope"}, wantErr: "flag provided but not defined: -nope"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var stdout bytes.Buffer
			err := Run(context.Background(), "build-x", c.args, &stdout, define)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil || stdout.String() != c.want {
				t.Fatalf("got %q, %v; want %q", stdout.String(), err, c.want)
			}
		})
	}
}
