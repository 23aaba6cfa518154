package conformance

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/backendslice/backendslice/providers"
)

// TestSourceOfEveryKind: the kind check finds a source for every kind of
// the table, and only that kind's row claims it.
func TestSourceOfEveryKind(t *testing.T) {
	ks := providers.BuiltinKinds()
	for _, row := range ks {
		src := sourceOfKind(ks, row.Kind)
		if got := ks.KindOf(src); got != row.Kind {
			t.Errorf("sourceOfKind(%s) = %+v, of kind %q", row.Kind, src, got)
		}
	}
	if src := sourceOfKind(ks, "nothing"); ks.Of(src) != nil {
		t.Errorf("sourceOfKind of a kind the table lacks = %+v, claimed by %s", src, ks.KindOf(src))
	}
}

// TestEveryKindHasAConformanceRun reads every test file of the module
// for the harnesses given to providertest.Run (their Kind field, which
// Run checks against the provider's Kind()), and fails for each kind of
// the table that none of them checks.
func TestEveryKindHasAConformanceRun(t *testing.T) {
	root := moduleRoot(t)
	names := kindConstants(t, filepath.Join(root, "providers", "provider.go"))
	checked := map[providers.Kind][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "bin" || d.Name() == "tmp" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		file, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
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
				if sel, ok := kv.Value.(*ast.SelectorExpr); ok && isSelector(sel, "providers", sel.Sel.Name) {
					rel, _ := filepath.Rel(root, path)
					checked[names[sel.Sel.Name]] = append(checked[names[sel.Sel.Name]], rel)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range providers.BuiltinKinds() {
		if len(checked[row.Kind]) == 0 {
			t.Errorf("kind %q of the table (providers.BuiltinKinds) has no conformance run: give its provider's tests a "+
				"providertest.Run harness with Kind set to it", row.Kind)
		}
	}
	t.Logf("harnesses by kind: %v", checked)
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

// kindConstants are the Kind constants declared in path, by name.
func kindConstants(t *testing.T, path string) map[string]providers.Kind {
	t.Helper()
	file, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]providers.Kind{}
	ast.Inspect(file, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Values) != len(vs.Names) {
			return true
		}
		for i, name := range vs.Names {
			if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING && strings.HasPrefix(name.Name, "Kind") {
				v, _ := strconv.Unquote(lit.Value)
				out[name.Name] = providers.Kind(v)
			}
		}
		return true
	})
	if len(out) < len(providers.BuiltinKinds()) {
		t.Fatalf("%s declares %d Kind constants, fewer than the table's %d kinds", path, len(out), len(providers.BuiltinKinds()))
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
