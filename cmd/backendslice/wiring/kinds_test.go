package wiring

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/test/examplekind"
)

// TestKindsBindTheirFlags: each provider kind binds its own flags, every
// one named with its FlagPrefix, and the controller binds them all.
func TestKindsBindTheirFlags(t *testing.T) {
	controller := pflag.NewFlagSet("controller", pflag.ContinueOnError)
	var f ControllerFlags
	f.Bind(controller)
	for _, p := range Kinds().ProviderKinds() {
		own := pflag.NewFlagSet(p.Name, pflag.ContinueOnError)
		if p.Configure == nil {
			t.Errorf("provider kind %s has no Configure: the binary could not build its providers", p.Name)
			continue
		}
		p.Configure(own)
		n := 0
		own.VisitAll(func(fl *pflag.Flag) {
			n++
			if p.FlagPrefix == "" || !strings.HasPrefix(fl.Name, p.FlagPrefix) {
				t.Errorf("provider kind %s binds --%s, outside its prefix %q", p.Name, fl.Name, p.FlagPrefix)
			}
			if controller.Lookup(fl.Name) == nil {
				t.Errorf("the controller does not bind --%s of provider kind %s", fl.Name, p.Name)
			}
		})
		if p.FlagPrefix != "" && n == 0 {
			t.Errorf("provider kind %s names flags --%s*, but binds none", p.Name, p.FlagPrefix)
		}
	}
}

// sharedSourceFields are the fields of v1alpha1.Source that every kind
// has; each other field is a kind, which a row of the table must claim.
var sharedSourceFields = map[string]bool{"Name": true, "ProviderRef": true, "Probe": true}

// sharedProviderFields are the fields of v1alpha1.BackendProviderSpec
// that every kind has; each other field is a provider kind.
var sharedProviderFields = map[string]bool{"Namespaces": true, "AllowedCIDRs": true, "Probes": true}

// TestEveryFieldHasARow sets each kind field of v1alpha1.Source and of
// v1alpha1.BackendProviderSpec alone, and fails for one no row of the
// binary's table claims, or one claimed under another name than its JSON
// name: a field added to the API without a kind's package to serve it.
// The made-up example kind's fields are claimed by its own package
// (test/examplekind) and must be by no row of the binary's.
func TestEveryFieldHasARow(t *testing.T) {
	kinds, testOnly := Kinds(), examplekind.Kinds()
	eachKindField(t, sharedSourceFields, func(name string, src v1alpha1.Source) {
		want := providers.Kind(name)
		if testOnly.KindOf(src) == want {
			want = ""
		}
		if got := kinds.KindOf(src); got != want {
			t.Errorf("spec.sources[].%s is claimed by row %q of the table; want a kind's package (providers/<kind>.Kinds, listed in wiring.Kinds) whose row %q claims it", name, got, want)
		}
	})
	eachKindField(t, sharedProviderFields, func(name string, spec v1alpha1.BackendProviderSpec) {
		p := kinds.ProviderOf(spec)
		if testOnly.ProviderOf(spec) != nil {
			if p != nil {
				t.Errorf("BackendProvider spec.%s, of the made-up example kind, is claimed by the binary's provider kind %s", name, p.Name)
			}
			return
		}
		if p == nil || p.Name != name {
			t.Errorf("BackendProvider spec.%s is claimed by provider kind %+v; want a kind's package whose provider kind %q claims it", name, p, name)
		}
	})
}

// eachKindField calls check with the JSON name of each field of struct
// type T outside shared, and a T with only that field set.
func eachKindField[T any](t *testing.T, shared map[string]bool, check func(name string, v T)) {
	t.Helper()
	st := reflect.TypeFor[T]()
	for i := range st.NumField() {
		f := st.Field(i)
		if shared[f.Name] {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Type.Kind() != reflect.Pointer || f.Type.Elem().Kind() != reflect.Struct {
			t.Errorf("%s.%s is neither shared by every kind nor a kind (a pointer to the kind's struct): list it among the shared fields, or make it a kind", st.Name(), f.Name)
			continue
		}
		var v T
		reflect.ValueOf(&v).Elem().Field(i).Set(reflect.New(f.Type.Elem()))
		check(name, v)
	}
}

// TestEveryKindHasAConformanceRun reads every test file of the module
// for the harnesses given to providertest.Run (their Kind field, which
// Run checks against the provider's Kind()), and fails for each kind of
// the table that none of them checks.
func TestEveryKindHasAConformanceRun(t *testing.T) {
	root := moduleRoot(t)
	consts := kindConstants(t, filepath.Join(root, "providers"))
	checked := map[providers.Kind][]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "bin" || d.Name() == "tmp" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, "_test.go") {
			return nil
		}
		file, err := parser.ParseFile(token.NewFileSet(), p, nil, 0)
		if err != nil {
			return err
		}
		for _, k := range harnessKinds(file, consts) {
			rel, _ := filepath.Rel(root, p)
			checked[k] = append(checked[k], rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range Kinds() {
		if len(checked[row.Kind]) == 0 {
			t.Errorf("kind %q of the table has no conformance run: give its provider's tests a "+
				"providertest.Run harness with Kind set to its package's constant", row.Kind)
		}
	}
	t.Logf("harnesses by kind: %v", checked)
}

// harnessKinds are the kinds named in the Kind field of the
// providertest.Harness literals of file: a constant of the file's own
// package, or of a package it imports, looked up in consts.
func harnessKinds(file *ast.File, consts map[string]providers.Kind) []providers.Kind {
	pkg := strings.TrimSuffix(file.Name.Name, "_test")
	imports := map[string]string{}
	for _, im := range file.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		name := path.Base(p)
		if im.Name != nil {
			imports[im.Name.Name] = name
		} else {
			imports[name] = name
		}
	}
	var out []providers.Kind
	ast.Inspect(file, func(n ast.Node) bool {
		lit, ok := n.(*ast.CompositeLit)
		if !ok || !isSelector(lit.Type, "providertest", "Harness") {
			return true
		}
		for _, el := range lit.Elts {
			kv, ok := el.(*ast.KeyValueExpr)
			if key, _ := kv.Key.(*ast.Ident); !ok || key == nil || key.Name != "Kind" {
				continue
			}
			switch v := kv.Value.(type) {
			case *ast.Ident:
				out = append(out, consts[pkg+"."+v.Name])
			case *ast.SelectorExpr:
				if x, ok := v.X.(*ast.Ident); ok {
					out = append(out, consts[imports[x.Name]+"."+v.Sel.Name])
				}
			}
		}
		return true
	})
	return out
}

// isSelector tells whether e is pkg.name.
func isSelector(e ast.Expr, pkg, name string) bool {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != name {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == pkg
}

// kindConstants are the string constants named Kind* declared in the
// files (tests aside) of the packages under dir, by package.name.
func kindConstants(t *testing.T, dir string) map[string]providers.Kind {
	t.Helper()
	out := map[string]providers.Kind{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return err
		}
		file, err := parser.ParseFile(token.NewFileSet(), p, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(file, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok || len(vs.Values) != len(vs.Names) {
				return true
			}
			for i, name := range vs.Names {
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING && strings.HasPrefix(name.Name, "Kind") {
					v, _ := strconv.Unquote(lit.Value)
					out[file.Name.Name+"."+name.Name] = providers.Kind(v)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// moduleRoot is the directory of the module's go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// TestNewProvidersBuildsEveryKind: the flags' defaults build one provider
// for each kind of the table, in its order.
func TestNewProvidersBuildsEveryKind(t *testing.T) {
	var f ControllerFlags
	fs := pflag.NewFlagSet("controller", pflag.ContinueOnError)
	f.Bind(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	p, err := f.NewProviders(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Registry.Close()
	var got, want []providers.Kind
	for _, pr := range p.Registry.Providers() {
		got = append(got, pr.Kind())
	}
	for _, k := range Kinds() {
		want = append(want, k.Kind)
	}
	if !slices.Equal(got, want) || p.Waker == nil {
		t.Errorf("providers of kinds %v (waker %v), want %v", got, p.Waker, want)
	}
}
