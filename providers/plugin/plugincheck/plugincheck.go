// Package plugincheck runs the provider conformance suite
// (providers/conformance), the one the built-in providers pass, against a
// running plugin, through the controller's own plugin client: what
// `backendslice plugin-check` prints. A plugin author describes, in a
// cases file, what the plugin should answer; the check also asks the
// plugin's info (the version handshake, within InfoBound), reads its
// answers as the contract writes them (no field it does not have, each
// error code with its status), checks that consent comes before
// existence, that a wrong token is answered 401 with the protocol's
// body, and, for a plugin that pushes, whether it holds a long-poll.
package plugincheck

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
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
	// Stranger is a namespace the plugin admits to nothing: asked for
	// each good case that finds endpoints and for the missing case, the
	// plugin must answer Forbidden every time (consent comes before
	// existence). Required unless AdmitsEveryNamespace.
	Stranger string `json:"stranger,omitempty"`
	// AdmitsEveryNamespace says the plugin has no consent rules: then
	// there is no stranger to ask.
	AdmitsEveryNamespace bool `json:"admitsEveryNamespace,omitempty"`
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
// answers no endpoints, or fails as Fail says (gone and terminal:
// NotFound; or, for a plugin whose consent rules are per backend and so
// admit no one to a backend it never had, terminal AccessDenied).
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
	if o.Cases.Stranger == "" && !o.Cases.AdmitsEveryNamespace {
		return nil, errors.New("the cases: no stranger, a namespace the plugin admits to nothing, to check that consent comes before existence; " +
			"name one, or say admitsEveryNamespace: true for a plugin without consent rules")
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
		start := time.Now()
		if err := p.CheckConnection(ctx, conn); err != nil {
			r.Errorf("GET %s: %v", protocol.InfoPath, err)
		} else if took := time.Since(start); took > InfoBound {
			r.Errorf("GET %s answered after %s; answer within %s", protocol.InfoPath, took.Round(time.Millisecond), InfoBound)
		}
	})
	conformance.Check(p, fixtures, record)
	record("Push", func(r conformance.Reporter) { o.checkPush(ctx, r) })
	record("Contract", func(r conformance.Reporter) { o.checkContract(ctx, p, fixtures, r) })
	if !o.Cases.AdmitsEveryNamespace {
		record("Consent", func(r conformance.Reporter) { o.checkConsent(ctx, r) })
	}
	if o.Token != "" {
		record("Token", func(r conformance.Reporter) { o.checkToken(ctx, r) })
	}
	failed := 0
	for _, res := range results {
		if len(res.Problems) > 0 {
			failed++
		}
	}
	fmt.Fprintf(out, "%d passed, %d failed\n", len(results)-failed, failed)
	return results, nil
}

// settings are the plugin settings a BackendProvider of o would give.
func (o Options) settings() *plugin.Settings {
	pc := &plugin.Settings{URL: o.URL, CAPEM: o.CAPEM, ServerName: o.ServerName,
		Token:   func() (string, error) { return o.Token, nil },
		Timeout: o.Timeout, MaxEndpoints: o.MaxEndpoints, MaxConcurrentRequests: plugin.DefaultConcurrency}
	if pc.Timeout == 0 {
		pc.Timeout = plugin.DefaultTimeout
	}
	if pc.MaxEndpoints == 0 {
		pc.MaxEndpoints = plugin.DefaultMaxEndpoints
	}
	return pc
}

// connection is the plugin connection a BackendProvider of o would give.
func (o Options) connection() *providers.Connection {
	return &providers.Connection{Name: "plugin-check", Key: "plugin-check", Settings: o.settings()}
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
	f := conformance.Fixtures{Kinds: plugin.Kinds()}
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

// InfoBound is how quickly a plugin must answer info, as the contract says.
const InfoBound = protocol.InfoSeconds * time.Second

// checkPush asks the first good case; if the answer carries an index (the
// plugin pushes), asks again with it: with nothing changed, the plugin
// must hold the request, not answer at once, which would spin the
// controller's loop, and then answer with the same index.
func (o Options) checkPush(ctx context.Context, r conformance.Reporter) {
	if len(o.Cases.Good) == 0 {
		return
	}
	req := o.request(o.Cases.Good[0].Parameters, o.namespace())
	first, _, err := o.resolve(ctx, req)
	if err != nil {
		r.Errorf("%v", err)
		return
	}
	if first.Index == "" {
		return // a plugin that is polled
	}
	req.Index, req.WaitSeconds = first.Index, int(pushWait/time.Second)
	second, took, err := o.resolve(ctx, req)
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

// checkContract reads the plugin's answers as the contract writes them:
// a good case's answer has no field the protocol does not have and no
// hostname the controller cannot publish (nothing the controller would
// note on status), and every refusal comes with its code's one status.
func (o Options) checkContract(ctx context.Context, p *plugin.Provider, f conformance.Fixtures, r conformance.Reporter) {
	for _, c := range f.Good {
		res, err := p.Resolve(ctx, c.Request)
		switch {
		case err != nil:
			r.Errorf("case %s: %v", c.Name, err)
		case res.Limit != "":
			r.Errorf("case %s: %s", c.Name, res.Limit)
		}
	}
	asks := []struct {
		name   string
		params map[string]string
	}{{"missing case", o.Cases.Missing.Parameters}}
	for _, b := range o.Cases.Broken {
		asks = append(asks, struct {
			name   string
			params map[string]string
		}{"broken case " + b.Name, b.Parameters})
	}
	for _, a := range asks {
		status, body, _, err := o.post(ctx, protocol.ResolvePath, o.request(a.params, o.namespace()), o.Token)
		if err != nil {
			r.Errorf("%s: %v", a.name, err)
			continue
		}
		if status == http.StatusOK {
			continue
		}
		if problem := refusalProblem(status, body, ""); problem != "" {
			r.Errorf("%s: %s", a.name, problem)
		}
	}
}

// refusalProblem says what is wrong with an answer other than 200 (want:
// the code it must carry, "" for any): the body must be an ErrorResponse
// with a code and a message, sent with that code's status.
func refusalProblem(status int, body []byte, want string) string {
	var er struct {
		Error *struct {
			Code    *string `json:"code"`
			Message *string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &er); err != nil || er.Error == nil || er.Error.Code == nil || er.Error.Message == nil {
		return fmt.Sprintf(`status %d without the protocol's body {"error": {"code": ..., "message": ...}}: %q`, status, printable(body))
	}
	code := *er.Error.Code
	switch {
	case want != "" && code != want:
		return fmt.Sprintf("status %d with code %s; want code %s (status %d)", status, code, want, protocol.StatusOf(want))
	case protocol.StatusOf(code) == 0:
		return fmt.Sprintf("code %q is not one of the protocol's %v", code, protocol.Codes)
	case protocol.StatusOf(code) != status:
		return fmt.Sprintf("code %s answered with status %d; the protocol's status for %s is %d", code, status, code, protocol.StatusOf(code))
	}
	return ""
}

// printable is at most 200 bytes of b, for a message.
func printable(b []byte) string { return providers.Printable(string(b), 200) }

// checkConsent asks, from the stranger namespace, for every good case
// that finds endpoints and for the missing case: each must be Forbidden,
// so that a namespace never learns whether a backend it may not see
// exists.
func (o Options) checkConsent(ctx context.Context, r conformance.Reporter) {
	asks := map[string]map[string]string{"missing case": o.Cases.Missing.Parameters}
	for i, g := range o.Cases.Good {
		if len(g.Want) > 0 {
			asks["case "+cmpOr(g.Name, fmt.Sprint(i))] = g.Parameters
		}
	}
	for _, name := range slices.Sorted(maps.Keys(asks)) {
		status, body, _, err := o.post(ctx, protocol.ResolvePath, o.request(asks[name], o.Cases.Stranger), o.Token)
		switch {
		case err != nil:
			r.Errorf("%s from namespace %s: %v", name, o.Cases.Stranger, err)
		case status == http.StatusOK:
			r.Errorf("%s from namespace %s, which the plugin admits to nothing: answered 200; refuse it (Forbidden)", name, o.Cases.Stranger)
		default:
			if problem := refusalProblem(status, body, protocol.CodeForbidden); problem != "" {
				r.Errorf("%s from namespace %s, which the plugin admits to nothing: %s; check consent before existence, "+
					"so that Forbidden does not tell which backends exist", name, o.Cases.Stranger, problem)
			}
		}
	}
}

// checkToken asks info and resolve with a token that is not the plugin's:
// each must be answered 401 with code Unauthorized and a message.
func (o Options) checkToken(ctx context.Context, r conformance.Reporter) {
	wrong := "not-" + o.Token
	for _, path := range []string{protocol.InfoPath, protocol.ResolvePath} {
		var body any
		if path == protocol.ResolvePath && len(o.Cases.Good) > 0 {
			body = o.request(o.Cases.Good[0].Parameters, o.namespace())
		}
		status, got, _, err := o.post(ctx, path, body, wrong)
		switch {
		case err != nil:
			r.Errorf("%s with a wrong token: %v", path, err)
		case status != http.StatusUnauthorized:
			r.Errorf("%s with a wrong token answered %d; want 401", path, status)
		default:
			if problem := refusalProblem(status, got, protocol.CodeUnauthorized); problem != "" {
				r.Errorf("%s with a wrong token: %s", path, problem)
			}
		}
	}
}

// namespace is the namespace every request names.
func (o Options) namespace() string { return cmpOr(o.Cases.Namespace, "conformance") }

// request is the resolve request of params from namespace ns, as the
// controller sends it.
func (o Options) request(params map[string]string, ns string) protocol.ResolveRequest {
	if params == nil {
		params = map[string]string{}
	}
	return protocol.ResolveRequest{Namespace: ns, Backend: cmpOr(o.Cases.Backend, "plugin-check"),
		Source: "plugin-check", Parameters: params, AddressTypes: []string{"IPv4", "IPv6"}}
}

// resolve sends one resolve request, which must be answered 200, and
// says how long the answer took.
func (o Options) resolve(ctx context.Context, req protocol.ResolveRequest) (protocol.ResolveResponse, time.Duration, error) {
	var out protocol.ResolveResponse
	status, body, took, err := o.post(ctx, protocol.ResolvePath, req, o.Token)
	if err != nil {
		return out, took, err
	}
	if status != http.StatusOK {
		return out, took, fmt.Errorf("POST %s answered %d", protocol.ResolvePath, status)
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return out, took, fmt.Errorf("POST %s: %w", protocol.ResolvePath, err)
	}
	return out, took, nil
}

// post sends one request to path as the controller would, through its
// client and bounds (GET when body is nil), with token, and returns the
// status and the body (at most the answer bound).
func (o Options) post(ctx context.Context, path string, body any, token string) (int, []byte, time.Duration, error) {
	conn := o.settings()
	client, err := plugin.NewHTTPClient(conn)
	if err != nil {
		return 0, nil, 0, err
	}
	defer client.CloseIdleConnections()
	method, rd := http.MethodGet, io.Reader(nil)
	if body != nil {
		b, _ := json.Marshal(body)
		method, rd = http.MethodPost, bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, pushWait+conn.Timeout)
	defer cancel()
	hr, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(o.URL, "/")+path, rd)
	if err != nil {
		return 0, nil, 0, err
	}
	if body != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		hr.Header.Set("Authorization", "Bearer "+token)
	}
	start := time.Now()
	resp, err := client.Do(hr)
	if err != nil {
		return 0, nil, 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	got, err := io.ReadAll(io.LimitReader(resp.Body, protocol.MaxResponseBytes(conn.MaxEndpoints)))
	if err != nil {
		return 0, nil, 0, fmt.Errorf("%s %s: %w", method, path, err)
	}
	return resp.StatusCode, got, time.Since(start), nil
}
