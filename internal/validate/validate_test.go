package validate

import (
	"bytes"
	"context"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"github.com/backendslice/backendslice/internal/decide"
	"github.com/backendslice/backendslice/internal/publish"
	"github.com/backendslice/backendslice/internal/tenancy"

	"github.com/backendslice/backendslice/cmd/backendslice/wiring"
)

// input is a file of several documents; the line numbers in the tests
// below are its lines.
const input = `# Helm writes comments like this one.
---
# Source: payments/templates/db.yaml
apiVersion: backendslice.io/v1alpha1
kind: ExternalBackend
metadata:
  name: db
  namespace: payments
spec:
  service:
    ports:
      - {name: pg, port: 5432}
  sources:
    - name: vms
      providerRef: {name: vms}
      static:
        endpoints:
          - address: 192.0.2.10
          - address: 100.100.100.200
          - address: 198.51.100.7
    - name: cloud
      awsEC2:
        region: eu-west-1
        instanceIDs: [i-01234567, i-0A]
--- # a separator with a comment
apiVersion: v1
kind: ConfigMap
metadata: {name: other}
---
apiVersion: backendslice.io/v1alpha1
kind: BackendProvider
metadata: {name: vms}
spec:
  static: {}
  namespaces:
    selector: {matchLabels: {team: payments}}
  allowedCIDRs: [192.0.2.0/24, 100.64.0.0/10]
`

// check runs the validator on docs with opts.
func check(t *testing.T, opts Options, docs []Document) Report {
	t.Helper()
	opts.Kinds = wiring.Kinds()
	v, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return v.Validate(context.Background(), docs)
}

// controllerConfig is the controller's default deny lists.
func controllerConfig() decide.Config {
	var denied []netip.Prefix
	for _, c := range decide.DefaultDeniedCIDRs() {
		denied = append(denied, netip.MustParsePrefix(c))
	}
	return decide.Config{DeniedPrefixes: denied, DeniedNames: publish.DeniedMetadataNames()}
}

// find is the findings of check c about field.
func find(r Report, c, field string) []Finding {
	var out []Finding
	for _, f := range r.Findings {
		if f.Check == c && f.Field == field {
			out = append(out, f)
		}
	}
	return out
}

func TestSplitKeepsLines(t *testing.T) {
	docs := Split("in.yaml", []byte(input))
	if len(docs) != 3 {
		t.Fatalf("%d documents, want 3", len(docs))
	}
	for i, want := range []int{4, 26, 30} {
		if docs[i].Line != want {
			t.Errorf("document %d starts at line %d, want %d", i, docs[i].Line, want)
		}
	}
	for path, want := range map[string]int{
		"spec.sources[0].static.endpoints[1].address": 19,
		"spec.sources[1].awsEC2.instanceIDs[1]":       24,
		"spec.sources[vms].providerRef":               15,
		"spec.sources[cloud].awsEC2.region":           23,
		"spec.service.ports[0].port":                  12,
		"spec.service.labels[app.kubernetes.io/name]": 10, // not there: the nearest field there is
		"metadata.name":                               7,
	} {
		if got := docs[0].FieldLine(path); got != want {
			t.Errorf("%s at line %d, want %d", path, got, want)
		}
	}
}

func TestSplitBadDocument(t *testing.T) {
	docs := Split("bad.yaml", []byte("apiVersion: v1\nkind: ConfigMap\n---\na: [b\nc: d\n"))
	if len(docs) != 2 || docs[1].Err == nil {
		t.Fatalf("documents %+v, want the second unreadable", docs)
	}
	rep := check(t, Options{}, docs)
	if len(rep.Findings) != 1 || rep.Findings[0].Check != CheckInput || rep.Findings[0].Line < 4 || !rep.Failed(false) {
		t.Errorf("findings %+v, want one input error at line 4 or after", rep.Findings)
	}
}

func TestValidateFindsEveryKind(t *testing.T) {
	docs := Split("in.yaml", []byte(input))
	rep := check(t, Options{Namespace: "default", Decision: controllerConfig(),
		NamespaceLabels: map[string]map[string]string{"payments": {"team": "payments"}}}, docs)
	// The backend is refused (an instance ID), so nothing else of it is checked.
	got := find(rep, CheckAdmission, "spec.sources[1].awsEC2.instanceIDs[1]")
	if len(got) != 1 || got[0].Line != 4 || got[0].FieldLine != 24 || got[0].Reason != "Invalid" ||
		!strings.HasSuffix(got[0].Message, `: spec.sources[].awsEC2.instanceIDs[]: not an EC2 instance ID (i- and 8 or 17 lower-case hex digits, such as i-0123456789abcdef0)`) {
		t.Errorf("admission findings %+v", got)
	}
	if rep.Checked != 2 || rep.Skipped["v1 ConfigMap"] != 1 {
		t.Errorf("checked %d, skipped %v; want 2 and one ConfigMap", rep.Checked, rep.Skipped)
	}

	// Fixed, the backend passes admission; the deny list, the provider's
	// allowedCIDRs and the Service range given drop three addresses.
	fixed := strings.Replace(input, "i-0A", "i-0abcdef1", 1)
	fixed = strings.Replace(fixed, "198.51.100.7", "192.0.2.200", 1)
	rep = check(t, Options{Namespace: "default", Decision: controllerConfig(), AllowSourcesWithoutProvider: true, ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("192.0.2.192/26")},
		NamespaceLabels: map[string]map[string]string{"payments": {"team": "payments"}}}, Split("in.yaml", []byte(fixed)))
	if rep.Count(Error) != 0 || rep.Count(Warning) != 2 || rep.Failed(false) || !rep.Failed(true) {
		t.Fatalf("findings %+v, want two warnings, no error", rep.Findings)
	}
	meta := find(rep, CheckDropped, "spec.sources[0].static.endpoints[1].address")
	if len(meta) != 1 || meta[0].FieldLine != 19 || !strings.Contains(meta[0].Message, "--denied-cidrs") {
		t.Errorf("deny-list finding %+v", meta)
	}
	svc := find(rep, CheckDropped, "spec.sources[0].static.endpoints[2].address")
	if len(svc) != 1 || !strings.Contains(svc[0].Message, "--service-cidrs") {
		t.Errorf("Service range finding %+v", svc)
	}
}

func TestTenancy(t *testing.T) {
	fixed := strings.Replace(input, "i-0A", "i-0abcdef1", 1)
	for _, tc := range []struct {
		name   string
		opts   Options
		doc    string
		rule   string
		note   string
		errors int
	}{
		{name: "admitted by labels", opts: Options{NamespaceLabels: map[string]map[string]string{"payments": {"team": "payments"}}}, doc: fixed},
		{name: "labels unknown", doc: fixed, note: `the labels of namespace payments are not known`},
		{name: "labels from a Namespace in the input", doc: fixed + "---\napiVersion: v1\nkind: Namespace\nmetadata: {name: payments, labels: {team: payments}}\n"},
		{name: "refused by labels", doc: fixed + "---\napiVersion: v1\nkind: Namespace\nmetadata: {name: payments, labels: {team: other}}\n",
			rule: tenancy.RuleNamespace, errors: 1},
		{name: "provider not in the input", doc: strings.Replace(fixed, "providerRef: {name: vms}", "providerRef: {name: elsewhere}", 1),
			note: `BackendProvider "elsewhere" is not in the input`},
		{name: "wrong kind of provider", opts: Options{NamespaceLabels: map[string]map[string]string{"payments": {"team": "payments"}}},
			doc: strings.Replace(fixed, "static: {}\n", "dns: {}\n", 1), rule: tenancy.RuleKind, errors: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The EC2 source names no provider: allowed, as the e2e suites allow it.
			tc.opts.Decision = controllerConfig()
			tc.opts.AllowSourcesWithoutProvider = true
			rep := check(t, tc.opts, Split("in.yaml", []byte(tc.doc)))
			fs := find(rep, CheckTenancy, "spec.sources[0].providerRef")
			switch {
			case tc.rule != "":
				if len(fs) != 1 || fs[0].Rule != tc.rule || fs[0].Severity != Error || fs[0].FieldLine != 15 {
					t.Errorf("tenancy findings %+v, want a refusal by rule %s at line 15", fs, tc.rule)
				}
			case tc.note != "":
				if len(fs) != 1 || fs[0].Severity != Note || !strings.Contains(fs[0].Message, "not checked: ") || !strings.Contains(fs[0].Message, tc.note) {
					t.Errorf("tenancy findings %+v, want a note saying %q", fs, tc.note)
				}
			default:
				if len(fs) != 0 {
					t.Errorf("tenancy findings %+v, want none", fs)
				}
			}
			if rep.Count(Error) != tc.errors {
				t.Errorf("%d errors, want %d: %+v", rep.Count(Error), tc.errors, rep.Findings)
			}
		})
	}
	// Without --allow-sources-without-provider (the controller's default),
	// the EC2 source is refused.
	rep := check(t, Options{Decision: controllerConfig(), NamespaceLabels: map[string]map[string]string{"payments": {"team": "payments"}}}, Split("in.yaml", []byte(fixed)))
	if fs := find(rep, CheckTenancy, "spec.sources[1].providerRef"); len(fs) != 1 || fs[0].Rule != tenancy.RuleProviderRequired {
		t.Errorf("findings %+v, want the EC2 source refused by %s", rep.Findings, tenancy.RuleProviderRequired)
	}
}

func TestControllerChecks(t *testing.T) {
	doc := `apiVersion: backendslice.io/v1alpha1
kind: ExternalBackend
metadata: {name: db.primary}
spec:
  addressTypes: [IPv4, FQDN]
  service: {ports: [{name: pg, port: 5432}]}
  sources:
    - name: lookup
      dns: {name: db.payments.svc.corp.test}
`
	opts := Options{Namespace: "payments", Decision: controllerConfig()}
	opts.Decision.ClusterDomain = "corp.test"
	opts.AllowSourcesWithoutProvider = true
	rep := check(t, opts, Split("db.yaml", []byte(doc)))
	name := find(rep, CheckController, "spec.service.name")
	if len(name) != 1 || name[0].Reason != "InvalidSpec" || name[0].FieldLine != 6 || !strings.Contains(name[0].Message, `"db.primary" is not a valid Service name`) {
		t.Errorf("Service name findings %+v", name)
	}
	lookup := find(rep, CheckController, "spec.sources[0].dns.name")
	if len(lookup) != 1 || lookup[0].FieldLine != 9 || !strings.HasPrefix(lookup[0].Message, "spec.sources[lookup].dns.name: ") {
		t.Errorf("DNS name findings %+v", lookup)
	}
	if fqdn := find(rep, CheckDeprecated, "spec.addressTypes"); len(fqdn) != 1 || fqdn[0].Severity != Warning || fqdn[0].FieldLine != 5 {
		t.Errorf("FQDN findings %+v", fqdn)
	}
}

func TestOutputs(t *testing.T) {
	rep := check(t, Options{Namespace: "default", Decision: controllerConfig()}, Split("in.yaml", []byte(input)))
	var text, js, gh bytes.Buffer
	for name, buf := range map[string]*bytes.Buffer{"text": &text, "json": &js, "github": &gh} {
		if err := Formats[name](buf, rep); err != nil {
			t.Fatal(err)
		}
	}
	wantText := `in.yaml:4: error: ExternalBackend payments/db: spec.sources[1].awsEC2.instanceIDs[1] (line 24): Invalid value: "i-0A": spec.sources[].awsEC2.instanceIDs[]: not an EC2 instance ID`
	if !strings.Contains(text.String(), wantText) || !strings.Contains(text.String(), "2 object(s) checked: 1 error(s), 0 warning(s), 0 note(s); 1 other object(s) passed over (v1 ConfigMap: 1)") {
		t.Errorf("text output:\n%s", text.String())
	}
	var decoded struct {
		Findings []Finding `json:"findings"`
		Errors   int       `json:"errors"`
		Checked  int       `json:"checked"`
	}
	if err := json.Unmarshal(js.Bytes(), &decoded); err != nil || decoded.Errors != 1 || decoded.Checked != 2 || decoded.Findings[0].FieldLine != 24 {
		t.Errorf("JSON output %v:\n%s", err, js.String())
	}
	wantGH := `::error file=in.yaml,line=24,title=backendslice validate (admission)::ExternalBackend payments/db: spec.sources[1].awsEC2.instanceIDs[1]: Invalid value: "i-0A": `
	if !strings.HasPrefix(gh.String(), wantGH) {
		t.Errorf("GitHub output:\n%s", gh.String())
	}
	if got := escapeData("50%\nnext"); got != "50%25%0Anext" {
		t.Errorf("escapeData = %q", got)
	}
	if got := escapeProperty("a:b,c"); got != "a%3Ab%2Cc" {
		t.Errorf("escapeProperty = %q", got)
	}
}

// TestSplitReadsJSONAsJSON: a JSON document holding a character YAML
// refuses (DEL) is read as kubectl reads it, as JSON, not refused.
func TestSplitReadsJSONAsJSON(t *testing.T) {
	docs := Split("cm.json", []byte("{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"data\": {\"a\": \"\x7f\"}}\n"))
	if len(docs) != 1 || docs[0].Err != nil || docs[0].Kind().Kind != "ConfigMap" || !json.Valid(docs[0].JSON) {
		t.Errorf("documents %+v, want one ConfigMap read as JSON", docs)
	}
}
