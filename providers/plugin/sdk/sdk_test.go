package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/backendslice/backendslice/providers/plugin/protocol"
)

// TestConsentFirst: the SDK asks Admit before Resolve, answers each code
// with its one status, and answers Forbidden whatever else Admit returns
// (but Unavailable), so that a refused namespace learns nothing of what
// exists; a wrong token is 401 with code Unauthorized.
func TestConsentFirst(t *testing.T) {
	resolved := 0
	p := &Plugin{Name: "t", Token: func() string { return "tok" },
		Validate: func(r Request) error {
			if r.Parameters["group"] == "" {
				return InvalidParameters("group is required")
			}
			return nil
		},
		Admit: func(_ context.Context, r Request) error {
			switch r.Namespace {
			case "stranger":
				return NotFound("a careless Admit that tells existence")
			case "plain":
				return errors.New("not admitted")
			case "busy":
				return Unavailable("the rules cannot be read now")
			}
			return nil
		},
		Resolve: func(_ context.Context, r Request) (Answer, error) {
			resolved++
			if r.Parameters["group"] == "web" {
				return Answer{Endpoints: []Endpoint{{Address: "192.0.2.1", Serving: true}}}, nil
			}
			return Answer{}, NotFound("no group %q", r.Parameters["group"])
		}}
	srv := httptest.NewServer(p.Handler())
	t.Cleanup(srv.Close)
	for _, c := range []struct {
		name, ns, group, token string
		status                 int
		code                   string
		resolves               int
	}{
		{"admitted", "ns", "web", "tok", 200, "", 1},
		{"admitted, missing", "ns", "nope", "tok", 404, protocol.CodeNotFound, 1},
		{"refused, missing", "stranger", "nope", "tok", 403, protocol.CodeForbidden, 0},
		{"refused, existing", "stranger", "web", "tok", 403, protocol.CodeForbidden, 0},
		{"refused by a plain error", "plain", "web", "tok", 403, protocol.CodeForbidden, 0},
		{"rules unavailable", "busy", "web", "tok", 503, protocol.CodeUnavailable, 0},
		{"invalid parameters first", "stranger", "", "tok", 422, protocol.CodeInvalidParameters, 0},
		{"wrong token", "ns", "web", "nope", 401, protocol.CodeUnauthorized, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			resolved = 0
			body, _ := json.Marshal(protocol.ResolveRequest{Namespace: c.ns, Backend: "b", Source: "s",
				Parameters: map[string]string{"group": c.group}, AddressTypes: []string{"IPv4"}})
			req, _ := http.NewRequest(http.MethodPost, srv.URL+protocol.ResolvePath, strings.NewReader(string(body)))
			req.Header.Set("Authorization", "Bearer "+c.token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = resp.Body.Close() }()
			var er protocol.ErrorResponse
			_ = json.NewDecoder(resp.Body).Decode(&er)
			if resp.StatusCode != c.status || er.Error.Code != c.code || resolved != c.resolves {
				t.Errorf("answered %d %q after %d resolves, want %d %q after %d", resp.StatusCode, er.Error.Code, resolved, c.status, c.code, c.resolves)
			}
			if c.code != "" && protocol.StatusOf(c.code) != resp.StatusCode {
				t.Errorf("code %s with status %d; its status is %d", c.code, resp.StatusCode, protocol.StatusOf(c.code))
			}
		})
	}
}

// TestHandlerNeedsAdmit: a plugin that states no consent rules is refused
// when it is built, not when a namespace asks.
func TestHandlerNeedsAdmit(t *testing.T) {
	defer func() {
		if msg, _ := recover().(string); !strings.Contains(msg, "AdmitEveryNamespace") {
			t.Errorf("Handler without Admit: recovered %q, want a panic naming AdmitEveryNamespace", msg)
		}
	}()
	(&Plugin{Resolve: func(context.Context, Request) (Answer, error) { return Answer{}, nil }}).Handler()
}
