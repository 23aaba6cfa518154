// Package plugincheck runs the provider conformance suite
// (providers/conformance), the one the built-in providers pass, against a
// running plugin, through the controller's own plugin client: what
// `backendslice plugin-check` prints. A plugin author describes, in a
// cases file, what the plugin should answer; the check also asks the
// plugin's info (the version handshake) and, for a plugin that pushes,
// whether it holds a long-poll.
package plugincheck

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/providers/conformance"
	"github.com/backendslice/backendslice/providers/plugin"
	"github.com/backendslice/backendslice/providers/plugin/protocol"
)

// Cases is the cases file: what the plugin should answer.
type Cases struct {
	// Namespace and Backend are what every request names (the plugin's
	// consent rules must admit them); conformance and plugin-check when unset.
	Namespace string `json:"namespace,omitempty"`
	Backend   string `json:"backend,omitempty"`
	// Good are parameters the plugin answers, each with exactly its want.
	Good []Good `json:"good"`
	// Missing are parameters of a backend that does not exist.
	Missing Missing `json:"missing"`
	// Broken are parameters the plugin refuses, each with how.
	Broken []Broken `json:"broken"`
}

// Good is a request the plugin answers.
type Good struct {
	Name         string                 `json:"name"`
	Parameters   map[string]string      `json:"parameters"`
	AddressTypes []v1alpha1.AddressType `json:"addressTypes,omitempty"`
	Want         []protocol.Endpoint    `json:"want"`
}

// Missing is a request for a backend that does not exist: the plugin
// answers no endpoints, or fails as Fail says (gone and terminal).
type Missing struct {
	Parameters map[string]string `json:"parameters"`
	Fail       *Failure          `json:"fail,omitempty"`
}

// Broken is a request the plugin refuses.
type Broken struct {
	Name       string            `json:"name"`
	Parameters map[string]string `json:"parameters"`
	Fail       Failure           `json:"fail"`
}

// Failure is how a request fails, as the controller reads it.
type Failure struct {
	Terminal        bool     `json:"terminal,omitempty"`
	Gone            bool     `json:"gone,omitempty"`
	Reason          string   `json:"reason,omitempty"`
	MessageContains []string `json:"messageContains,omitempty"`
}

// Options say where the plugin is and how to reach it.
type Options struct {
	// URL, CAPEM, ServerName and Token as a BackendProvider's spec.plugin says them.
	URL        string
	CAPEM      []byte
	ServerName string
	Token      string
	// Timeout and MaxEndpoints as spec.plugin's; the controller's defaults when zero.
	Timeout      time.Duration
	MaxEndpoints int
	// Cases are what the plugin should answer.
	Cases Cases
}

// ReadCases reads a cases file (YAML or JSON), refusing unknown fields.
func ReadCases(path string) (Cases, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Cases{}, err
	}
	var c Cases
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return Cases{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Result is one property's verdict.
type Result struct {
	Property string
	// Problems are what failed; none when it passed.
	Problems []string
}

// reporter collects a property's problems.
type reporter struct{ problems []string }

// Helper does nothing: the problems name their cases.
func (*reporter) Helper() {}

// Errorf records a problem.
func (r *reporter) Errorf(format string, args ...any) {
	r.problems = append(r.problems, fmt.Sprintf(format, args...))
}

// nowhere takes wake-ups nobody waits for: the check only resolves.
type nowhere struct{}

// Wake drops the wake-up.
func (nowhere) Wake(types.NamespacedName) {}

// Run checks the plugin, writing each property's verdict to out as it
// goes and a last line "N passed, M failed", and returns the verdicts.
// An error is a check that could not run (bad cases).
func Run(ctx context.Context, o Options, out io.Writer) ([]Result, error) {
	conn := o.connection()
	fixtures := o.fixtures(conn)
	if err := fixtures.Validate(); err != nil {
		return nil, fmt.Errorf("the cases: %w", err)
	}
	p, err := plugin.New(plugin.Options{RetryDelay: 100 * time.Millisecond, MaxRetryDelay: time.Second}, nowhere{})
	if err != nil {
		return nil, err
	}
	defer p.Close()
	var results []Result
	record := func(property string, check func(conformance.Reporter)) {
		r := &reporter{}
		check(r)
		results = append(results, Result{Property: property, Problems: r.problems})
		if len(r.problems) == 0 {
			fmt.Fprintf(out, "PASS %s\n", property)
			return
		}
		fmt.Fprintf(out, "FAIL %s\n", property)
		for _, pr := range r.problems {
			fmt.Fprintf(out, "    %s\n", strings.ReplaceAll(pr, "\n", "\n    "))
		}
	}
	record("Info", func(r conformance.Reporter) {
		if err := p.CheckConnection(ctx, conn); err != nil {
			r.Errorf("GET %s: %v", protocol.InfoPath, err)
		}
	})
	conformance.Check(p, fixtures, record)
	record("Push", func(r conformance.Reporter) { o.checkPush(ctx, r) })
	failed := 0
	for _, res := range results {
		if len(res.Problems) > 0 {
			failed++
		}
	}
	fmt.Fprintf(out, "%d passed, %d failed\n", len(results)-failed, failed)
	return results, nil
}

// connection is the plugin connection a BackendProvider of o would give.
func (o Options) connection() *providers.Connection {
	pc := &providers.PluginConnection{URL: o.URL, CAPEM: o.CAPEM, ServerName: o.ServerName,
		Token:   func() (string, error) { return o.Token, nil },
		Timeout: o.Timeout, MaxEndpoints: o.MaxEndpoints, MaxConcurrentRequests: providers.DefaultPluginConcurrency}
	if pc.Timeout == 0 {
		pc.Timeout = providers.DefaultPluginTimeout
	}
	if pc.MaxEndpoints == 0 {
		pc.MaxEndpoints = providers.DefaultPluginMaxEndpoints
	}
	return &providers.Connection{Name: "plugin-check", Key: "plugin-check", Plugin: pc}
}

// fixtures are the cases as the conformance suite takes them.
func (o Options) fixtures(conn *providers.Connection) conformance.Fixtures {
	c := o.Cases
	request := func(i int, kind string, params map[string]string, types []v1alpha1.AddressType) providers.Request {
		req := conformance.NewRequest(v1alpha1.Source{Name: fmt.Sprintf("%s-%d", kind, i),
			ProviderRef: &v1alpha1.ProviderReference{Name: conn.Name},
			Plugin:      &v1alpha1.PluginSource{Parameters: params}}, types...)
		req.Namespace = cmpOr(c.Namespace, "conformance")
		req.Backend = cmpOr(c.Backend, "plugin-check")
		req.Connection = conn
		return req
	}
	var f conformance.Fixtures
	for i, g := range c.Good {
		want := make([]providers.Endpoint, 0, len(g.Want))
		for _, e := range g.Want {
			want = append(want, providers.Endpoint{Address: e.Address, Zone: e.Zone, Hostname: e.Hostname,
				Serving: e.Serving, Terminating: e.Terminating, Port: e.Port})
		}
		f.Good = append(f.Good, conformance.Case{Name: cmpOr(g.Name, fmt.Sprint(i)), Request: request(i, "good", g.Parameters, g.AddressTypes), Want: want})
	}
	f.Missing = conformance.MissingCase{Request: request(0, "missing", c.Missing.Parameters, nil)}
	if m := c.Missing.Fail; m != nil {
		f.Missing.Fail = &conformance.Failure{Terminal: m.Terminal, Gone: m.Gone, Reason: m.Reason, MessageContains: m.MessageContains}
	}
	for i, b := range c.Broken {
		f.Broken = append(f.Broken, conformance.FailCase{Name: cmpOr(b.Name, fmt.Sprint(i)), Request: request(i, "broken", b.Parameters, nil),
			Failure: conformance.Failure{Terminal: b.Fail.Terminal, Gone: b.Fail.Gone, Reason: b.Fail.Reason, MessageContains: b.Fail.MessageContains}})
	}
	return f
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// pushWait is the long-poll the push check holds, and pushFloor how long
// a plugin must hold it when nothing changed.
const (
	pushWait  = 2 * time.Second
	pushFloor = time.Second
)

// checkPush asks the first good case; if the answer carries an index (the
// plugin pushes), asks again with it: with nothing changed, the plugin
// must hold the request, not answer at once, which would spin the
// controller's loop, and then answer with the same index.
func (o Options) checkPush(ctx context.Context, r conformance.Reporter) {
	if len(o.Cases.Good) == 0 {
		return
	}
	g := o.Cases.Good[0]
	req := protocol.ResolveRequest{Namespace: cmpOr(o.Cases.Namespace, "conformance"), Backend: cmpOr(o.Cases.Backend, "plugin-check"),
		Source: "good-0", Parameters: g.Parameters, AddressTypes: []string{"IPv4", "IPv6"}}
	if req.Parameters == nil {
		req.Parameters = map[string]string{}
	}
	first, _, err := o.post(ctx, req)
	if err != nil {
		r.Errorf("%v", err)
		return
	}
	if first.Index == "" {
		return // a plugin that is polled
	}
	req.Index, req.WaitSeconds = first.Index, int(pushWait/time.Second)
	second, took, err := o.post(ctx, req)
	switch {
	case err != nil:
		r.Errorf("a long-poll with index %q: %v", first.Index, err)
	case second.Index != first.Index:
		r.Errorf("with nothing changed, a long-poll with index %q answered index %q: an index must change only with the answer", first.Index, second.Index)
	case took < pushFloor:
		r.Errorf("a long-poll with the current index %q and waitSeconds %d answered after %s: hold it until the answer changes or the wait ends",
			first.Index, req.WaitSeconds, took.Round(time.Millisecond))
	}
}

// post sends one resolve request as the controller would, and says how
// long the answer took.
func (o Options) post(ctx context.Context, req protocol.ResolveRequest) (protocol.ResolveResponse, time.Duration, error) {
	conn := o.connection().Plugin
	client, err := plugin.NewHTTPClient(conn)
	if err != nil {
		return protocol.ResolveResponse{}, 0, err
	}
	defer client.CloseIdleConnections()
	body, _ := json.Marshal(req)
	ctx, cancel := context.WithTimeout(ctx, pushWait+conn.Timeout)
	defer cancel()
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(o.URL, "/")+protocol.ResolvePath, bytes.NewReader(body))
	if err != nil {
		return protocol.ResolveResponse{}, 0, err
	}
	hr.Header.Set("Content-Type", "application/json")
	if o.Token != "" {
		hr.Header.Set("Authorization", "Bearer "+o.Token)
	}
	start := time.Now()
	resp, err := client.Do(hr)
	if err != nil {
		return protocol.ResolveResponse{}, 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	took := time.Since(start)
	var out protocol.ResolveResponse
	if resp.StatusCode != http.StatusOK {
		return out, took, fmt.Errorf("POST %s answered %d", protocol.ResolvePath, resp.StatusCode)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, protocol.MaxResponseBytes(conn.MaxEndpoints))).Decode(&out); err != nil {
		return out, took, fmt.Errorf("POST %s: %w", protocol.ResolvePath, err)
	}
	return out, took, nil
}
