package plugins_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers/plugin/protocol"
	"github.com/backendslice/backendslice/providers/plugin/sdk"
	"github.com/backendslice/backendslice/test/e2e/framework"
	"github.com/backendslice/backendslice/test/plugintest"
)

// writeFile writes content to the file at path (made in a test directory
// when path is ""), and returns the path.
func writeFile(t *testing.T, path, content string) string {
	t.Helper()
	if path == "" {
		path = filepath.Join(t.TempDir(), "inventory")
	}
	// Written aside and renamed, as git-sync and ConfigMap mounts do, so
	// that a plugin never reads half a file.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// start runs a plugin process, killed when the test ends.
func start(t *testing.T, scheme string, argv ...string) *plugintest.Process {
	t.Helper()
	p, err := plugintest.Start(scheme, argv...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	return p
}

// startHosts runs the hostsfile plugin on a hosts file, on a port of its
// own unless listen names one.
func startHosts(t *testing.T, file, listen string, extra ...string) *plugintest.Process {
	t.Helper()
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	scheme := "http"
	for _, a := range extra {
		if a == "-tls-cert" {
			scheme = "https"
		}
	}
	return start(t, scheme, append([]string{hostsfile, "-listen", listen, "-file", file, "-period", "100ms"}, extra...)...)
}

// startPython runs the Python inventory plugin on an inventory file.
func startPython(t *testing.T, file, listen string, extra ...string) *plugintest.Process {
	t.Helper()
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	return start(t, "http", plugintest.Python(append([]string{"--listen", listen, "--file", file, "--period", "0.1"}, extra...)...)...)
}

// createProvider creates a plugin BackendProvider of url admitting
// namespaces, changed by edit, deleted when the test ends.
func createProvider(t *testing.T, name, url string, namespaces []string, edit func(*v1alpha1.BackendProvider)) *v1alpha1.BackendProvider {
	t.Helper()
	bp := &v1alpha1.BackendProvider{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.BackendProviderSpec{
		Plugin: &v1alpha1.PluginProvider{URL: url}, Namespaces: v1alpha1.NamespaceSelection{Names: namespaces}}}
	if edit != nil {
		edit(bp)
	}
	framework.Create(t, bp)
	t.Cleanup(func() { _ = framework.E().Client.Delete(ctx, bp) })
	return bp
}

// backend is an ExternalBackend publishing both families, without a drain
// period, with one plugin source through provider.
func backend(ns, name, provider string, params map[string]string) *v1alpha1.ExternalBackend {
	xb := framework.Backend(ns, name, v1alpha1.Source{Name: "inventory",
		ProviderRef: &v1alpha1.ProviderReference{Name: provider}, Plugin: &v1alpha1.PluginSource{Parameters: params}})
	xb.Spec.AddressTypes = []v1alpha1.AddressType{v1alpha1.AddressTypeIPv4, v1alpha1.AddressTypeIPv6}
	xb.Spec.DrainPeriod = &metav1.Duration{}
	return xb
}

// secret creates a Secret in the controller's namespace, deleted when
// the test ends.
func secret(t *testing.T, name string, data map[string][]byte) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: controllerNamespace, Name: name}, Data: data}
	framework.Create(t, s)
	t.Cleanup(func() { _ = framework.E().Client.Delete(ctx, s) })
	return s
}

// waitProvider waits until BackendProvider name's Ready condition has
// status and reason for its generation, and returns the condition.
func waitProvider(t *testing.T, name string, status metav1.ConditionStatus, reason string) metav1.Condition {
	t.Helper()
	var got metav1.Condition
	framework.Eventually(t, framework.Timeout, fmt.Sprintf("BackendProvider %s Ready=%s/%s", name, status, reason), func() error {
		bp := &v1alpha1.BackendProvider{}
		if err := framework.E().Client.Get(ctx, client.ObjectKey{Name: name}, bp); err != nil {
			return err
		}
		c := meta.FindStatusCondition(bp.Status.Conditions, v1alpha1.ConditionReady)
		if c == nil || c.Status != status || c.Reason != reason || c.ObservedGeneration != bp.Generation {
			return fmt.Errorf("Ready is %+v", c)
		}
		got = *c
		return nil
	})
	return got
}

// sourceError is the last error status records for the backend's only source.
func sourceError(t *testing.T, xb *v1alpha1.ExternalBackend) string {
	t.Helper()
	cur := framework.Get(t, xb)
	if len(cur.Status.Sources) != 1 {
		return ""
	}
	return cur.Status.Sources[0].LastError
}

// fake is a plugin of this process, over real HTTP: the SDK's, answering
// each namespace's request for a group from groups, and recording the
// requests each namespace made, until misbehave replaces its answers.
type fake struct {
	srv    *httptest.Server
	plugin *sdk.Plugin

	mu        sync.Mutex
	groups    map[string][]sdk.Endpoint
	asked     map[string]int
	misbehave http.HandlerFunc
	// held cancels the long-polls the plugin holds, so that a change of
	// behaviour answers them too.
	held map[*http.Request]context.CancelFunc
}

// newFake starts a fake plugin that pushes, stopped when the test ends.
func newFake(t *testing.T) *fake {
	f := &fake{groups: map[string][]sdk.Endpoint{}, asked: map[string]int{}, held: map[*http.Request]context.CancelFunc{}}
	f.plugin = &sdk.Plugin{Name: "fake", Push: true,
		Validate: func(r sdk.Request) error {
			for k := range r.Parameters {
				if k != "group" {
					return sdk.InvalidParameters("unknown parameter %q; the only one is group", k)
				}
			}
			return nil
		},
		Admit: sdk.AdmitEveryNamespace,
		Resolve: func(_ context.Context, r sdk.Request) (sdk.Answer, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			eps, ok := f.groups[r.Parameters["group"]]
			if !ok {
				return sdk.Answer{}, sdk.NotFound("no group %q", r.Parameters["group"])
			}
			return sdk.Answer{Endpoints: append([]sdk.Endpoint(nil), eps...)}, nil
		}}
	h := f.plugin.Handler()
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		bad := f.misbehave
		f.mu.Unlock()
		if r.URL.Path == protocol.ResolvePath {
			var req protocol.ResolveRequest
			body := readBody(r)
			_ = json.Unmarshal(body, &req)
			f.mu.Lock()
			f.asked[req.Namespace]++
			f.mu.Unlock()
			r.Body = bodyOf(body)
		}
		if bad != nil {
			bad(w, r)
			return
		}
		// Served under a context become cancels: a held long-poll
		// then gets the new behaviour's answer.
		cctx, cancel := context.WithCancel(r.Context())
		f.mu.Lock()
		f.held[r] = cancel
		f.mu.Unlock()
		rw := &written{ResponseWriter: w}
		h.ServeHTTP(rw, r.WithContext(cctx))
		f.mu.Lock()
		delete(f.held, r)
		bad = f.misbehave
		f.mu.Unlock()
		cancel()
		if !rw.wrote && bad != nil && r.Context().Err() == nil {
			bad(w, r)
		}
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// set makes group answer eps, and pushes the change.
func (f *fake) set(group string, eps ...sdk.Endpoint) {
	f.mu.Lock()
	f.groups[group] = eps
	f.mu.Unlock()
	f.plugin.Changed()
}

// become makes every later request, and those held, answered by h (nil:
// behave again).
func (f *fake) become(h http.HandlerFunc) {
	f.mu.Lock()
	f.misbehave = h
	for _, cancel := range f.held {
		cancel()
	}
	f.mu.Unlock()
	f.plugin.Changed()
}

// written records whether a handler answered.
type written struct {
	http.ResponseWriter
	wrote bool
}

func (w *written) WriteHeader(status int) {
	w.wrote = true
	w.ResponseWriter.WriteHeader(status)
}

// requests is how many resolve requests namespace ns made.
func (f *fake) requests(ns string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.asked[ns]
}

// serving is a serving endpoint of addr.
func serving(addr string) sdk.Endpoint { return sdk.Endpoint{Address: addr, Serving: true} }

// readBody reads a request's body, bounded.
func readBody(r *http.Request) []byte {
	b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	return b
}

// bodyOf is b as a request body again.
func bodyOf(b []byte) io.ReadCloser { return io.NopCloser(bytes.NewReader(b)) }

// errorf is fmt.Errorf, for the checks of framework.Eventually.
func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

// sdkEndpoint is an endpoint of addr, serving or not.
func sdkEndpoint(addr string, healthy bool) sdk.Endpoint {
	return sdk.Endpoint{Address: addr, Serving: healthy}
}
