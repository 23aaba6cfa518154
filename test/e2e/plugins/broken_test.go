package plugins_test

import (
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// resolveAnswer is the verbatim plugin's file answering every resolve
// request with status 200 and body.
func resolveAnswer(t *testing.T, body string) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"resolve": map[string]any{"status": 200, "body": body}})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestBrokenAnswerKeepsEndpoints: a plugin process that answers 200 with
// a body missing a required field ({}, a null endpoints, a misspelt
// endpoints, an endpoint without serving) never withdraws what it
// published: the slice keeps the endpoints, and the source says
// SourceFailed naming the field. A misspelt optional field is published
// around and named on status. Only "endpoints": [] withdraws them.
func TestBrokenAnswerKeepsEndpoints(t *testing.T) {
	t.Parallel()
	ns := framework.Namespace(t)
	good := `{"endpoints":[{"address":"192.0.2.60","serving":true},{"address":"192.0.2.61","serving":true}],"refreshAfterSeconds":1}`
	file := writeFile(t, "", resolveAnswer(t, good))
	p := start(t, "http", verbatim, "-listen", "127.0.0.1:0", "-file", file)
	provider := "plugin-" + ns
	createProvider(t, provider, p.URL, []string{ns}, nil)
	xb := backend(ns, "web", provider, map[string]string{"group": "web"})
	framework.Create(t, xb)
	framework.WaitAddresses(t, ns, xb.Name, "192.0.2.60", "192.0.2.61")

	for _, c := range []struct{ name, body, says string }{
		{"an empty object", `{}`, `plugin answer has no "endpoints" field: answer "endpoints": [] to mean none`},
		{"null endpoints", `{"endpoints":null}`, `plugin answer has a null "endpoints" field: answer "endpoints": [] to mean none`},
		{"misspelt endpoints", `{"endpoint":[{"address":"192.0.2.62","serving":true}]}`,
			`plugin answer has no "endpoints" field: answer "endpoints": [] to mean none (it has "endpoint", which the protocol does not)`},
		{"an endpoint without serving", `{"endpoints":[{"address":"192.0.2.60","serving":true},{"address":"192.0.2.61"}]}`,
			`plugin answer's endpoints[1] has no "serving" field`},
	} {
		writeFile(t, file, resolveAnswer(t, c.body))
		framework.Eventually(t, framework.Timeout, c.name+" fails the source naming the field", func() error {
			cur := framework.Get(t, xb)
			cond := meta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionResolved)
			if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != v1alpha1.ReasonSourceFailed || !strings.Contains(cond.Message, c.says) {
				return errorf("Resolved is %+v, want False/SourceFailed saying %q", cond, c.says)
			}
			if e := sourceError(t, xb); !strings.Contains(e, c.says) {
				return errorf("source error %q, want it to say %q", e, c.says)
			}
			return nil
		})
		framework.WaitAddresses(t, ns, xb.Name, "192.0.2.60", "192.0.2.61")
	}

	if n, _ := framework.MetricValue(t, "backendslice_plugin_requests_total",
		map[string]string{"provider": provider, "operation": "resolve", "outcome": "broken"}); n < 4 {
		t.Errorf("%v broken answers counted for %s, want at least 4", n, provider)
	}

	// A misspelt optional field: the answer is published, the field named.
	writeFile(t, file, resolveAnswer(t, `{"endpoints":[{"address":"192.0.2.60","serving":true,"terminting":true}],"refreshAfterSeconds":1}`))
	framework.WaitAddresses(t, ns, xb.Name, "192.0.2.60")
	framework.Eventually(t, framework.Timeout, "the misspelt field named on status", func() error {
		cur := framework.Get(t, xb)
		cond := meta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionSynced)
		if cond == nil || !strings.Contains(cond.Message, `"endpoints[0].terminting" not in the protocol, ignored`) {
			return errorf("Synced is %+v, want it to name the misspelt field", cond)
		}
		return nil
	})

	// Only "endpoints": [] means none.
	writeFile(t, file, resolveAnswer(t, `{"endpoints":[],"refreshAfterSeconds":1}`))
	framework.WaitReady(t, xb)
	framework.WaitAddresses(t, ns, xb.Name)
}
