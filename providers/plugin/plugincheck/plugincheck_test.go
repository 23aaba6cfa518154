package plugincheck

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/backendslice/backendslice/providers/plugin/protocol"
)

// careless is a plugin written from an older reading of the contract: it
// says NotFound before it applies consent, answers bad parameters with
// 400, and a wrong token with code Forbidden.
func careless(w http.ResponseWriter, r *http.Request) {
	fail := func(status int, code, msg string) {
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(protocol.ErrorResponse{Error: protocol.Error{Code: code, Message: msg}})
	}
	if r.Header.Get("Authorization") != "Bearer secret" {
		fail(http.StatusUnauthorized, protocol.CodeForbidden, "wrong token")
		return
	}
	if r.URL.Path == protocol.InfoPath {
		_, _ = w.Write([]byte(`{"protocolVersions":["v1"]}`))
		return
	}
	var req protocol.ResolveRequest
	_ = json.NewDecoder(r.Body).Decode(&req)
	switch g := req.Parameters["group"]; {
	case g == "":
		fail(http.StatusBadRequest, protocol.CodeInvalidParameters, "group is required")
	case g != "web":
		fail(http.StatusNotFound, protocol.CodeNotFound, fmt.Sprintf("no group %q", g))
	case req.Namespace != "conformance":
		fail(http.StatusForbidden, protocol.CodeForbidden, "not yours")
	default:
		_, _ = w.Write([]byte(`{"endpoints":[{"address":"192.0.2.10","serving":true,"weight":3}]}`))
	}
}

// TestCarelessPluginFails: plugin-check fails a plugin that answers
// NotFound before consent (Consent), a refusal with another status than
// its code's and an answer with a field the protocol does not have
// (Contract), and a wrong token with another code than Unauthorized
// (Token), each naming what is wrong.
func TestCarelessPluginFails(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(careless))
	t.Cleanup(srv.Close)
	cases := Cases{Stranger: "stranger",
		Good: []Good{{Name: "web", Parameters: map[string]string{"group": "web"},
			Want: []protocol.Endpoint{{Address: "192.0.2.10", Serving: true}}}},
		Missing: Missing{Parameters: map[string]string{"group": "nope"}, Fail: &Failure{Terminal: true, Gone: true}},
		Broken:  []Broken{{Name: "no group", Parameters: map[string]string{}, Fail: Failure{Terminal: true, Reason: "InvalidSpec"}}}}
	var out strings.Builder
	results, err := Run(context.Background(), Options{URL: srv.URL, Token: "secret", Cases: cases}, &out)
	if err != nil {
		t.Fatal(err)
	}
	failed := map[string]string{}
	for _, r := range results {
		if len(r.Problems) > 0 {
			failed[r.Property] = strings.Join(r.Problems, "\n")
		}
	}
	for prop, says := range map[string][]string{
		"Consent": {"missing case from namespace stranger, which the plugin admits to nothing: status 404 with code NotFound; want code Forbidden (status 403)",
			"check consent before existence"},
		"Contract": {`the plugin's answer has "endpoints[0].weight" not in the protocol`,
			"broken case no group: code InvalidParameters answered with status 400; the protocol's status for InvalidParameters is 422"},
		"Token": {"/backendslice/v1/info with a wrong token: status 401 with code Forbidden; want code Unauthorized (status 401)"},
	} {
		for _, s := range says {
			if !strings.Contains(failed[prop], s) {
				t.Errorf("%s: problems %q do not say %q", prop, failed[prop], s)
			}
		}
	}
	if len(failed) != 3 {
		t.Errorf("failed %v; want Consent, Contract and Token only:\n%s", failed, out.String())
	}
}
