// Package argocdtest runs the Argo CD health check of ExternalBackend
// (config/argocd/health.lua, as config/argocd embeds it) the way Argo CD runs
// a health check from argocd-cm, so that tests can hold it to what Argo CD
// will show.
package argocdtest

import (
	"fmt"

	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

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

// HealthOf runs health.lua on obj as Argo CD does for a check configured in
// argocd-cm: in gopher-lua with only the package, base and table libraries
// open (Argo CD adds a reduced os library, which the script does not use),
// the object as the global table obj, and the table the script returns read
// as {status, message}.
func HealthOf(obj *unstructured.Unstructured) (Health, error) {
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
	if err := l.DoString(argocd.HealthLua); err != nil {
		return Health{}, fmt.Errorf("running health.lua: %w", err)
	}
	ret, ok := l.Get(-1).(*lua.LTable)
	if !ok {
		return Health{}, fmt.Errorf("health.lua returned %s, Argo CD expects a table", l.Get(-1).Type())
	}
	h := Health{Status: lua.LVAsString(ret.RawGetString("status")), Message: lua.LVAsString(ret.RawGetString("message"))}
	if !validStatuses[h.Status] {
		return Health{}, fmt.Errorf("health.lua returned status %q, which Argo CD shows as Unknown", h.Status)
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
