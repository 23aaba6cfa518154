// Package argocdtest runs the Argo CD health checks of ExternalBackend and
// BackendProvider (config/argocd/health.lua and
// backendprovider-health.lua, as config/argocd embeds them) the way Argo CD
// runs a health check from argocd-cm, so that tests can hold them to what
// Argo CD will show.
package argocdtest

import (
	"fmt"

	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/config/argocd"
)

// Health is what Argo CD shows for a resource.
type Health struct {
	// Status is Healthy, Progressing, Degraded, Suspended, Missing or Unknown.
	Status string
	// Message is shown next to the status.
	Message string
}

// validStatuses are the statuses Argo CD accepts from a health script.
var validStatuses = map[string]bool{
	"Healthy": true, "Progressing": true, "Degraded": true, "Suspended": true, "Missing": true, "Unknown": true,
}

// Checks are health checks by the kind they are installed for.
type Checks map[string]string

// Shipped are the health checks of config/argocd, as it embeds them.
var Shipped = Checks{
	"ExternalBackend": argocd.HealthLua,
	"BackendProvider": argocd.BackendProviderHealthLua,
}

// ConfigMapKey is the key of argocd-cm that holds the health check of a
// backendslice.io kind: resource.customizations.health.<group>_<kind>.
func ConfigMapKey(kind string) string {
	return "resource.customizations.health." + v1alpha1.GroupVersion.Group + "_" + kind
}

// ChecksOf reads the health checks of ExternalBackend and BackendProvider
// from an argocd-cm ConfigMap's data, where Argo CD reads them (ConfigMapKey),
// and fails when one is missing.
func ChecksOf(data map[string]string) (Checks, error) {
	out := Checks{}
	for kind := range Shipped {
		script, ok := data[ConfigMapKey(kind)]
		if !ok {
			return nil, fmt.Errorf("argocd-cm has no %s", ConfigMapKey(kind))
		}
		out[kind] = script
	}
	return out, nil
}

// HealthOf runs the shipped health check of obj's kind on obj (see
// Checks.HealthOf).
func HealthOf(obj *unstructured.Unstructured) (Health, error) {
	return Shipped.HealthOf(obj)
}

// HealthOf runs the health check of obj's kind on obj as Argo CD does for a
// check configured in argocd-cm: in gopher-lua with only the package, base
// and table libraries open (Argo CD adds a reduced os library, which the
// scripts do not use), the object as the global table obj, and the table
// the script returns read as {status, message}.
func (c Checks) HealthOf(obj *unstructured.Unstructured) (Health, error) {
	script, ok := c[obj.GetKind()]
	if !ok {
		return Health{}, fmt.Errorf("no health check for kind %q", obj.GetKind())
	}
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer l.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{
		{lua.LoadLibName, lua.OpenPackage},
		{lua.BaseLibName, lua.OpenBase},
		{lua.TabLibName, lua.OpenTable},
	} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(lib.open), Protect: true}, lua.LString(lib.name)); err != nil {
			return Health{}, fmt.Errorf("opening Lua library %q: %w", lib.name, err)
		}
	}
	l.SetGlobal("obj", toLua(l, obj.Object))
	if err := l.DoString(script); err != nil {
		return Health{}, fmt.Errorf("running the %s health check: %w", obj.GetKind(), err)
	}
	ret, ok := l.Get(-1).(*lua.LTable)
	if !ok {
		return Health{}, fmt.Errorf("the %s health check returned %s, Argo CD expects a table", obj.GetKind(), l.Get(-1).Type())
	}
	h := Health{Status: lua.LVAsString(ret.RawGetString("status")), Message: lua.LVAsString(ret.RawGetString("message"))}
	if !validStatuses[h.Status] {
		return Health{}, fmt.Errorf("the %s health check returned status %q, which Argo CD shows as Unknown", obj.GetKind(), h.Status)
	}
	return h, nil
}

// toLua converts an object's JSON values to Lua as Argo CD does: numbers of
// any Go type become Lua numbers, JSON arrays become sequences.
func toLua(l *lua.LState, v any) lua.LValue {
	switch v := v.(type) {
	case bool:
		return lua.LBool(v)
	case string:
		return lua.LString(v)
	case int64:
		return lua.LNumber(v)
	case float64:
		return lua.LNumber(v)
	case []any:
		t := l.CreateTable(len(v), 0)
		for _, item := range v {
			t.Append(toLua(l, item))
		}
		return t
	case map[string]any:
		t := l.CreateTable(0, len(v))
		for k, item := range v {
			t.RawSetH(lua.LString(k), toLua(l, item))
		}
		return t
	}
	return lua.LNil
}
