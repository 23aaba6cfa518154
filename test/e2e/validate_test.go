package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/cmd/backendslice/wiring"
	"github.com/backendslice/backendslice/config/crd"
	"github.com/backendslice/backendslice/internal/admission"
	"github.com/backendslice/backendslice/internal/validate"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// The differential test: every spec the admission and bad-input tests send
// to the API server (refusedSpecs, acceptedSpecs, badSpecs), the specs
// below that reach every x-kubernetes-validations rule of the CRDs, and
// whole documents with unknown fields, wrong types and bad metadata, go
// both through `backendslice validate` (its library, the code the command
// runs) and through a server-side dry-run create with strict field
// validation (kubectl's and Argo CD's default). The verdict, the reason,
// and every cause (type, field, message) must be the same, and so must
// the findings validate prints.

// ruleSpecs reach the rules refusedSpecs and badSpecs leave out, and a
// few accepted neighbours of them.
var ruleSpecs = []struct{ name, spec string }{
	{"probe with two checks", `{"probe":{"tcp":{},"grpc":{}},` + staticBody},
	{"probe with no check", `{"probe":{"period":"10s"},` + staticBody},
	{"probe timeout not under period", `{"probe":{"tcp":{},"period":"2s","timeout":"2s"},` + staticBody},
	{"probe period of 2h", `{"probe":{"tcp":{},"period":"2h"},` + staticBody},
	{"probe period in words", `{"probe":{"tcp":{},"period":"ten seconds"},` + staticBody},
	{"probe timeout of 5ms", `{"probe":{"tcp":{},"timeout":"5ms"},` + staticBody},
	{"probe HTTPS without serverName", `{"probe":{"http":{"scheme":"HTTPS"}},` + staticBody},
	{"probe HTTP with serverName", `{"probe":{"http":{"scheme":"HTTP","serverName":"db.example.com"}},` + staticBody},
	{"probe HTTP with caSecretRef", `{"probe":{"http":{"caSecretRef":{"name":"ca","key":"ca.crt"}}},` + staticBody},
	{"probe HTTPS accepted", `{"probe":{"http":{"scheme":"HTTPS","serverName":"db.example.com","path":"/healthz"},"period":"10s","timeout":"1s"},` + staticBody},
	{"source probe with two checks", sourceProbe(`{"tcp":{},"http":{}}`)},
	{"source probe timeout not under period", sourceProbe(`{"tcp":{},"period":"1s","timeout":"1500ms"}`)},
	{"source probe period of 500ms", sourceProbe(`{"tcp":{},"period":"500ms"}`)},
	{"source probe timeout of 1ns", sourceProbe(`{"tcp":{},"timeout":"1ns"}`)},
	{"source probe HTTPS without serverName", sourceProbe(`{"http":{"scheme":"HTTPS"}}`)},
	{"source probe HTTP with serverName", sourceProbe(`{"http":{"serverName":"db.example.com"}}`)},
	{"source probe path without a slash", sourceProbe(`{"http":{"path":"healthz"}}`)},
	{"adopting the EndpointSlice controller's slices", `{"service":{"adopt":{"handWrittenManagedBy":["endpointslice-controller.k8s.io"]}},` + staticBody},
	{"Kubernetes' labels on the Service", `{"service":{"labels":{"kubernetes.io/service-name":"other"}},` + staticBody},
	{"labels and adoption accepted", `{"service":{"labels":{"team":"payments"},"adopt":{"handWrittenManagedBy":["hand"]}},` + staticBody},
	{"unspecified address", addresses(nil, "0.0.0.0")},
	{"IPv6 link-local multicast", addresses(nil, "ff02::1")},
	{"a name that is only 0x", addresses(withFQDN, "0x.example.com")},
	{"plugin source without a provider", `{"sources":[{"name":"p","plugin":{"parameters":{"zone":"a"}}}]}`},
	{"plugin parameter key with a slash", `{"sources":[{"name":"p","providerRef":{"name":"hosts"},"plugin":{"parameters":{"a/b":"1"}}}]}`},
	{"plugin parameter value of 1025 characters", `{"sources":[{"name":"p","providerRef":{"name":"hosts"},"plugin":{"parameters":{"a":"` + strings.Repeat("v", 1025) + `"}}}]}`},
	{"serverless cache name with two hyphens", `{"sources":[{"name":"c","awsElastiCache":{"region":"eu-west-1","serverlessCacheName":"lru--a"}}]}`},
	{"empty cache cluster ID", `{"sources":[{"name":"c","awsElastiCache":{"region":"eu-west-1","cacheClusterID":""}}]}`},
	{"MemoryDB region of a host", `{"sources":[{"name":"m","awsMemoryDB":{"region":"169.254.169.254","clusterName":"ledger"}}]}`},
	{"MemoryDB cluster accepted", `{"sources":[{"name":"m","awsMemoryDB":{"region":"eu-central-1","clusterName":"ledger"}}]}`},
	{"plugin parameters accepted", `{"sources":[{"name":"p","providerRef":{"name":"hosts"},"plugin":{"parameters":{"zone":"eu-west-1a","file.path":"/etc/hosts"}}}]}`},
	{"the tests' made-up example kind", `{"sources":[{"name":"e","providerRef":{"name":"catalog"},"example":{"item":"web"}}]}`},
}

// staticBody ends a spec with one static source.
const staticBody = `"sources":[{"name":"s","static":{"endpoints":[{"address":"192.0.2.10"}]}}]}`

// sourceProbe is a spec whose one static source has the probe (JSON).
func sourceProbe(probe string) string {
	return `{"sources":[{"name":"s","probe":` + probe + `,"static":{"endpoints":[{"address":"192.0.2.10"}]}}]}`
}

// providerSpecs are BackendProvider specs, refused and accepted, with
// TestAllowedPortsAdmission's allowedPorts among them.
var providerSpecs = []struct{ name, spec string }{
	{"static without allowedCIDRs", `{"static":{},"namespaces":{"names":["payments"]}}`},
	{"static with no allowedCIDRs", `{"static":{},"allowedCIDRs":[],"namespaces":{"names":["payments"]}}`},
	{"two kinds", `{"static":{},"dns":{},"allowedCIDRs":["192.0.2.0/24"],"namespaces":{"names":["payments"]}}`},
	{"no kind", `{"namespaces":{"names":["payments"]}}`},
	{"the tests' made-up example kind", `{"example":{"catalog":"shop"},"namespaces":{"names":["payments"]}}`},
	{"an address for a CIDR", `{"static":{},"allowedCIDRs":["192.0.2.7"],"namespaces":{"names":["payments"]}}`},
	{"a CIDR with host bits", `{"static":{},"allowedCIDRs":["192.0.2.7/24"],"namespaces":{"names":["payments"]}}`},
	{"no namespace", `{"dns":{},"namespaces":{}}`},
	{"inverted port range", `{"static":{},"allowedCIDRs":["192.0.2.0/24"],"namespaces":{"names":["default"]},"probes":{"allowedPorts":[{"port":9000,"endPort":8000}]}}`},
	{"port 0", `{"static":{},"allowedCIDRs":["192.0.2.0/24"],"namespaces":{"names":["default"]},"probes":{"allowedPorts":[{"port":0}]}}`},
	{"port past 65535", `{"static":{},"allowedCIDRs":["192.0.2.0/24"],"namespaces":{"names":["default"]},"probes":{"allowedPorts":[{"port":8000,"endPort":70000}]}}`},
	{"33 allowed ports", `{"static":{},"allowedCIDRs":["192.0.2.0/24"],"namespaces":{"names":["default"]},"probes":{"allowedPorts":[` + manyPorts(33) + `]}}`},
	{"ports and ranges", `{"static":{},"allowedCIDRs":["192.0.2.0/24","2001:db8::/32"],"namespaces":{"names":["default"]},"probes":{"allowedPorts":[{"port":8008},{"port":9000,"endPort":9099},{"port":65535}]}}`},
	{"consul", `{"consul":{"address":"https://consul.example.com:8501","allowedServices":["payments-*"]},"namespaces":{"selector":{"matchLabels":{"team":"payments"}}}}`},
	{"aws", `{"aws":{"region":"eu-west-1","consentTag":"backendslice.io/namespaces"},"namespaces":{"names":["payments"]}}`},
	{"aws in the European Sovereign Cloud", `{"aws":{"region":"eusc-de-east-1"},"namespaces":{"names":["payments"]}}`},
	{"aws region in capitals", `{"aws":{"region":"EU-WEST-1"},"namespaces":{"names":["payments"]}}`},
	{"plugin token over plain HTTP", `{"plugin":{"url":"http://plugin.example.com:8080","tokenSecretRef":{"name":"t","key":"token"}},"namespaces":{"names":["payments"]}}`},
	{"plugin token over HTTP on loopback", `{"plugin":{"url":"http://127.0.0.1:8080","tokenSecretRef":{"name":"t","key":"token"}},"namespaces":{"names":["payments"]}}`},
	{"plugin TLS over plain HTTP", `{"plugin":{"url":"http://plugin.example.com","tls":{"serverName":"plugin.example.com"}},"namespaces":{"names":["payments"]}}`},
	{"plugin timeout of 2m", `{"plugin":{"url":"https://plugin.example.com","timeout":"2m"},"namespaces":{"names":["payments"]}}`},
	{"plugin timeout of 500ms", `{"plugin":{"url":"https://plugin.example.com","timeout":"500ms"},"namespaces":{"names":["payments"]}}`},
	{"plugin accepted", `{"plugin":{"url":"https://plugin.example.com/v1","timeout":"5s","tokenSecretRef":{"name":"t","key":"token"}},"namespaces":{"names":["payments"]}}`},
}

// manyPorts is n allowed ports, 8000 onwards (JSON list items).
func manyPorts(n int) string {
	ports := make([]string, n)
	for i := range ports {
		ports[i] = fmt.Sprintf(`{"port":%d}`, 8000+i)
	}
	return strings.Join(ports, ",")
}

// documentCases are whole documents (YAML), for what a spec cannot show:
// unknown fields, wrong types, metadata, defaults, versions.
var documentCases = []struct{ name, doc string }{
	{"unknown fields", backendYAML("unknown", "  bogus: 1\n  service: {ports: [{name: pg, port: 5432, extra: x}]}\n  sources: [{name: s, static: {endpoints: [{address: 192.0.2.10}]}}]\n")},
	{"unknown metadata field", "apiVersion: backendslice.io/v1alpha1\nkind: ExternalBackend\nmetadata: {name: meta, labelz: {a: b}}\nspec:\n  service: {ports: [{name: pg, port: 5432}]}\n  sources: [{name: s, static: {endpoints: [{address: 192.0.2.10}]}}]\n"},
	{"a port as a string", backendYAML("types", "  service: {ports: [{name: pg, port: \"5432\"}]}\n  sources: [{name: s, static: {endpoints: [{address: 192.0.2.10}]}}]\n")},
	{"a name of yes, a YAML 1.1 boolean", backendYAML("yes", "  suspend: yes\n  service: {ports: [{name: pg, port: 5432}]}\n  sources: [{name: s, static: {endpoints: [{address: 192.0.2.10}]}}]\n")},
	{"YAML 1.1 booleans", backendYAML("suspended", "  suspend: yes\n  service: {ports: [{name: pg, port: 5432}]}\n  sources: [{name: s, static: {endpoints: [{address: 192.0.2.10}]}}]\n")},
	{"no spec", "apiVersion: backendslice.io/v1alpha1\nkind: ExternalBackend\nmetadata: {name: nospec}\n"},
	{"no sources", backendYAML("nosources", "  service: {ports: [{name: pg, port: 5432}]}\n")},
	{"a bad enum and a port out of range", backendYAML("enum", "  addressTypes: [IPv5]\n  service: {ports: [{name: pg, port: 70000, protocol: ICMP}]}\n  sources: [{name: s, static: {endpoints: [{address: 192.0.2.10, health: Sick}]}}]\n")},
	{"two sources of one name", backendYAML("dupes", "  service: {ports: [{name: pg, port: 5432}]}\n  sources: [{name: s, static: {endpoints: [{address: 192.0.2.10}]}}, {name: s, dns: {name: db.example.com}}]\n")},
	{"a name too long for a label", backendYAML("db-"+strings.Repeat("x", 61), "  service: {ports: [{name: pg, port: 5432}]}\n  sources: [{name: s, static: {endpoints: [{address: 192.0.2.10}]}}]\n")},
	{"a name that is no DNS subdomain", backendYAML("DB_Primary", "  service: {ports: [{name: pg, port: 5432}]}\n  sources: [{name: s, static: {endpoints: [{address: 192.0.2.10}]}}]\n")},
	{"a bad label", "apiVersion: backendslice.io/v1alpha1\nkind: ExternalBackend\nmetadata: {name: label, labels: {\"a b\": c}}\nspec:\n  service: {ports: [{name: pg, port: 5432}]}\n  sources: [{name: s, static: {endpoints: [{address: 192.0.2.10}]}}]\n"},
	{"a status is dropped", backendYAML("status", "  service: {ports: [{name: pg, port: 5432}]}\n  sources: [{name: s, static: {endpoints: [{address: 192.0.2.10}]}}]\nstatus: {readyEndpoints: -1}\n")},
	{"a provider with a namespace", "apiVersion: backendslice.io/v1alpha1\nkind: BackendProvider\nmetadata: {name: namespaced, namespace: payments}\nspec: {dns: {}, namespaces: {names: [payments]}}\n"},
}

// backendYAML is an ExternalBackend document named name whose spec lines
// (indented by two) are spec; a line at no indent after them ends the spec.
func backendYAML(name, spec string) string {
	return "apiVersion: backendslice.io/v1alpha1\nkind: ExternalBackend\nmetadata:\n  name: " + name + "\nspec:\n" + spec
}

// ruleObject is backendObject's ExternalBackend, keeping the fields of
// spec.service that spec sets besides the port.
func ruleObject(t *testing.T, ns, name, spec string) map[string]any {
	t.Helper()
	var s struct {
		Service map[string]any `json:"service"`
	}
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		t.Fatalf("spec of %s: %v", name, err)
	}
	obj := backendObject(t, ns, name, spec).Object
	svc := obj["spec"].(map[string]any)["service"].(map[string]any) //nolint:errcheck // backendObject sets both
	for k, v := range s.Service {
		svc[k] = v
	}
	return obj
}

// diffCase is one object for both sides, as a document (YAML or JSON).
type diffCase struct {
	name string
	doc  []byte
}

// differentialCases are every case the test sends both ways.
func differentialCases(t *testing.T, ns string) []diffCase {
	t.Helper()
	var cases []diffCase
	add := func(group, name string, obj any) {
		b, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, diffCase{name: group + "/" + name, doc: b})
	}
	for i, c := range refusedSpecs {
		add("refused", c.name, backendObject(t, ns, fmt.Sprintf("refused-%d", i), c.spec).Object)
	}
	for i, c := range acceptedSpecs {
		add("accepted", c.name, backendObject(t, ns, fmt.Sprintf("accepted-%d", i), c.spec).Object)
	}
	for i, c := range badSpecs {
		xb := staticBackend(ns, fmt.Sprintf("bad-%d", i), "192.0.2.10", "192.0.2.11")
		xb.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("ExternalBackend"))
		c.change(xb)
		add("badinput", c.name, xb)
	}
	for i, c := range ruleSpecs {
		add("rule", c.name, ruleObject(t, ns, fmt.Sprintf("rule-%d", i), c.spec))
	}
	for i, c := range providerSpecs {
		var spec map[string]any
		if err := json.Unmarshal([]byte(c.spec), &spec); err != nil {
			t.Fatalf("provider %s: %v", c.name, err)
		}
		add("provider", c.name, map[string]any{"apiVersion": v1alpha1.GroupVersion.String(), "kind": "BackendProvider",
			"metadata": map[string]any{"name": fmt.Sprintf("provider-%d", i)}, "spec": spec})
	}
	for _, c := range documentCases {
		cases = append(cases, diffCase{name: "document/" + c.name, doc: []byte(c.doc)})
	}
	return cases
}

// validateOptions are the options of validate for namespace ns, with the
// tests' controller configuration.
func validateOptions(ns string) validate.Options {
	cfg := framework.TestConfig()
	return validate.Options{Namespace: ns, Decision: cfg.Decision(), AllowSourcesWithoutProvider: cfg.AllowSourcesWithoutProvider,
		Kinds: wiring.Kinds()}
}

// TestValidateAgreesWithAdmission: every case gets the same verdict,
// reason and causes from validate as from the API server, and together the
// cases reach every x-kubernetes-validations rule of the CRDs: a rule
// added without a case fails here.
func TestValidateAgreesWithAdmission(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	v, err := validate.New(validateOptions(ns))
	if err != nil {
		t.Fatal(err)
	}
	server := dryRunner(t)
	var causes []metav1.StatusCause
	cases := differentialCases(t, ns)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			docs := validate.Split(c.name, c.doc)
			if len(docs) != 1 || docs[0].Err != nil {
				t.Fatalf("%d documents (%v), want one", len(docs), docs)
			}
			res := v.Admit(ctx, docs[0])
			serverErr := server.create(ns, docs[0].JSON)
			sameRefusal(t, res.Err, serverErr)
			sameFindings(t, v.Validate(ctx, docs), serverErr)
			causes = append(causes, res.Causes()...)
		})
	}
	rules := crdRules(t, crd.ExternalBackendYAML, crd.BackendProviderYAML)
	hit := 0
	for _, r := range rules {
		if slices.ContainsFunc(causes, r.hitBy(rules)) {
			hit++
		} else {
			t.Errorf("no case reaches the rule of %s at %q: %s; add one to ruleSpecs", r.kind, r.path, r.rule)
		}
	}
	t.Logf("%d cases; %d of %d rules of the CRDs reached", len(cases), hit, len(rules))
}

// dryRun creates objects of this API group with dryRun=All and
// fieldValidation=Strict, sending the bytes as they are.
type dryRun struct{ client *rest.RESTClient }

func dryRunner(t *testing.T) dryRun {
	t.Helper()
	cfg := rest.CopyConfig(framework.E().Config())
	cfg.GroupVersion = &v1alpha1.GroupVersion
	cfg.APIPath = "/apis"
	cfg.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	c, err := rest.RESTClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return dryRun{client: c}
}

// create sends a create of the object (JSON) into ns, or cluster-wide for
// a BackendProvider, and returns the API server's answer.
func (d dryRun) create(ns string, obj []byte) error {
	var tm metav1.TypeMeta
	_ = json.Unmarshal(obj, &tm) // a case without a kind is refused by the server below
	req := d.client.Post().Param("dryRun", "All").Param("fieldValidation", "Strict").SetHeader("Content-Type", "application/json").Body(obj)
	switch tm.Kind {
	case "BackendProvider":
		req = req.Resource("backendproviders")
	default:
		req = req.Namespace(ns).Resource("externalbackends")
	}
	return req.Do(context.Background()).Error()
}

// sameRefusal fails the test unless validate's error and the API server's
// are both nil, or both refusals with the same reason, code and causes
// (and message, where the order of the errors in it is fixed).
func sameRefusal(t *testing.T, got, want error) {
	t.Helper()
	if (got == nil) != (want == nil) {
		t.Fatalf("validate says %v; the API server says %v", got, want)
	}
	if got == nil {
		return
	}
	var g, w apierrors.APIStatus
	if !errors.As(got, &g) || !errors.As(want, &w) {
		t.Fatalf("validate says %v; the API server says %v", got, want)
	}
	gs, ws := g.Status(), w.Status()
	if gs.Reason != ws.Reason || gs.Code != ws.Code {
		t.Errorf("validate refuses with %s %d, the API server with %s %d: %q vs %q", gs.Reason, gs.Code, ws.Reason, ws.Code, gs.Message, ws.Message)
	}
	gc, wc := sortedCauses(gs), sortedCauses(ws)
	if !slices.Equal(gc, wc) {
		t.Errorf("causes differ:\nvalidate:   %q\nAPI server: %q", gc, wc)
	}
	if len(gc) <= 1 && gs.Reason == metav1.StatusReasonInvalid && gs.Message != ws.Message {
		t.Errorf("message differs:\nvalidate:   %q\nAPI server: %q", gs.Message, ws.Message)
	}
	if gs.Reason == metav1.StatusReasonBadRequest && !slices.Equal(unknownFields(gs.Message), unknownFields(ws.Message)) {
		t.Errorf("bad request differs:\nvalidate:   %q\nAPI server: %q", gs.Message, ws.Message)
	}
}

// sortedCauses are a status's causes as "type|field|message", sorted:
// the API server walks maps in no fixed order.
func sortedCauses(s metav1.Status) []string {
	if s.Details == nil {
		return nil
	}
	var out []string
	for _, c := range s.Details.Causes {
		out = append(out, string(c.Type)+"|"+c.Field+"|"+c.Message)
	}
	sort.Strings(out)
	return out
}

// unknownField matches one field of a strict decoding error.
var unknownField = regexp.MustCompile(`unknown field "([^"]*)"`)

// unknownFields are the fields a strict decoding error names, sorted,
// else the whole message.
func unknownFields(msg string) []string {
	var out []string
	for _, m := range unknownField.FindAllStringSubmatch(msg, -1) {
		out = append(out, m[1])
	}
	if out == nil {
		return []string{msg}
	}
	sort.Strings(out)
	return out
}

// sameFindings fails the test unless validate's report holds, as its
// admission findings, the API server's causes (field and message), or
// for a strict decoding error its fields, and nothing else.
func sameFindings(t *testing.T, rep validate.Report, serverErr error) {
	t.Helper()
	var got, want []string
	for _, f := range rep.Findings {
		if f.Check == validate.CheckAdmission {
			got = append(got, f.Field+"|"+f.Message)
		}
	}
	var status apierrors.APIStatus
	isStatus := errors.As(serverErr, &status)
	switch {
	case serverErr == nil:
	case isStatus && status.Status().Details != nil && len(status.Status().Details.Causes) > 0:
		for _, c := range status.Status().Details.Causes {
			want = append(want, c.Field+"|"+c.Message)
		}
	case isStatus && apierrors.IsBadRequest(serverErr) && strings.Contains(status.Status().Message, "strict decoding error: "):
		// One finding per field, each the server's sentence for it alone.
		prefix, _, _ := strings.Cut(status.Status().Message, "strict decoding error: ")
		for _, f := range unknownFields(status.Status().Message) {
			want = append(want, f+"|"+prefix+`strict decoding error: unknown field "`+f+`"`)
		}
	default:
		want = append(want, "|"+serverErr.Error())
	}
	sort.Strings(got)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Errorf("validate's findings differ from the API server's causes:\nvalidate:   %q\nAPI server: %q", got, want)
	}
	if (serverErr != nil) != rep.Failed(false) {
		t.Errorf("validate's report fails: %t; the API server refuses: %v", rep.Failed(false), serverErr)
	}
}

// crdRule is one x-kubernetes-validations rule of a CRD, with the schema
// path it sits at ("spec.sources[].dns.name"; lists' and maps' elements
// are "[]").
type crdRule struct {
	kind, path        string
	rule, message     string
	messageExpression bool
}

// crdRules are every rule of the CRDs, read from them.
func crdRules(t *testing.T, crds ...[]byte) []crdRule {
	t.Helper()
	var out []crdRule
	for _, data := range crds {
		c := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(data, c); err != nil {
			t.Fatal(err)
		}
		for _, v := range c.Spec.Versions {
			var walk func(s *apiextensionsv1.JSONSchemaProps, path string)
			walk = func(s *apiextensionsv1.JSONSchemaProps, path string) {
				for _, r := range s.XValidations {
					if r.FieldPath != "" {
						t.Fatalf("rule %q of %s sets fieldPath, which crdRule does not follow yet", r.Rule, path)
					}
					out = append(out, crdRule{kind: c.Spec.Names.Kind, path: path, rule: r.Rule, message: r.Message, messageExpression: r.MessageExpression != ""})
				}
				for name, p := range s.Properties {
					walk(&p, strings.TrimPrefix(path+"."+name, "."))
				}
				if s.Items != nil && s.Items.Schema != nil {
					walk(s.Items.Schema, path+"[]")
				}
				if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
					walk(s.AdditionalProperties.Schema, path+"[]")
				}
			}
			walk(v.Schema.OpenAPIV3Schema, "")
		}
	}
	return out
}

// elements matches a list index or map key in a field path.
var elements = regexp.MustCompile(`\[[^\]]*\]`)

// hitBy tells whether a cause comes from r: at r's path, with r's
// message, or, for a rule with a messageExpression, with a message no
// other rule at that path has.
func (r crdRule) hitBy(all []crdRule) func(metav1.StatusCause) bool {
	return func(c metav1.StatusCause) bool {
		field := elements.ReplaceAllString(c.Field, "[]")
		if field == "<nil>" {
			field = ""
		}
		if field != r.path {
			return false
		}
		says := func(msg string) bool { return c.Message == msg || strings.HasSuffix(c.Message, ": "+msg) }
		if !r.messageExpression {
			return says(r.message)
		}
		return !slices.ContainsFunc(all, func(o crdRule) bool {
			return o.path == r.path && o.rule != r.rule && says(o.message)
		}) && !strings.Contains(c.Message, "some validation rules were not checked")
	}
}

// costCRD is a CRD of this test's own whose first rule may cost more at
// run time than CEL allows one call (the per-call limit), while its
// estimate stays under what a CRD may declare: what the CRDs of this
// project never reach (their bounds keep them cheap), checked here so that
// validate's answer to it is the API server's too. Its second rule is a
// messageExpression on the elements of a list of lists. (The budget of a
// whole object, 10M, is not reached here: the cheapest rules that reach it
// take about ten seconds of CPU on each side.)
const costCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: costprobes.validate.backendslice.io}
spec:
  group: validate.backendslice.io
  names: {kind: CostProbe, plural: costprobes, singular: costprobe, listKind: CostProbeList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              words:
                type: array
                maxItems: 500
                items: {type: string, maxLength: 32}
                x-kubernetes-validations:
                - rule: self.all(a, self.all(b, a == b || !a.startsWith(b)))
                  message: no word may start with another
              groups:
                type: array
                maxItems: 20
                items:
                  type: array
                  maxItems: 200
                  items: {type: string, maxLength: 16}
                  x-kubernetes-validations:
                  - rule: self.all(a, self.exists_one(b, a == b))
                    messageExpression: "'duplicates among the words of ' + (self.size() > 100 ? 'a long' : 'a short') + ' group'"
                    message: duplicates
`

// apiextensionsScheme knows CustomResourceDefinitions.
func apiextensionsScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestValidateCostLimitsAgreeWithAdmission installs costCRD and sends
// objects under and over CEL's per-call limit both ways: the same
// verdicts and messages, "call cost exceeds limit" included.
func TestValidateCostLimitsAgreeWithAdmission(t *testing.T) {
	t.Parallel()
	def := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict([]byte(costCRD), def); err != nil {
		t.Fatal(err)
	}
	crds, err := client.New(framework.E().Config(), client.Options{Scheme: apiextensionsScheme(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := crds.Create(ctx, def); err != nil {
		t.Fatalf("creating the CRD: %v", err)
	}
	t.Cleanup(func() { _ = crds.Delete(context.Background(), def) })
	eventually(t, timeout, "the CRD established", func() error {
		cur := &apiextensionsv1.CustomResourceDefinition{}
		if err := crds.Get(ctx, client.ObjectKey{Name: def.Name}, cur); err != nil {
			return err
		}
		for _, c := range cur.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("conditions %v", cur.Status.Conditions)
	})
	checker, err := admission.New([]byte(costCRD))
	if err != nil {
		t.Fatal(err)
	}
	ns := newNamespace(t)
	cfg := rest.CopyConfig(framework.E().Config())
	cfg.GroupVersion = &schema.GroupVersion{Group: "validate.backendslice.io", Version: "v1"}
	cfg.APIPath = "/apis"
	cfg.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	rc, err := rest.RESTClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	words := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("w%015d", i)
		}
		return out
	}
	groups := func(n, size int) [][]string {
		out := make([][]string, n)
		for i := range out {
			out[i] = words(size)
		}
		return out
	}
	for _, c := range []struct {
		name string
		spec map[string]any
	}{
		{"cheap", map[string]any{"words": words(10), "groups": [][]string{words(5)}}},
		{"one word starts another", map[string]any{"words": []string{"ab", "abc"}}},
		{"a duplicate, in a messageExpression", map[string]any{"groups": [][]string{{"a", "b", "a"}}}},
		{"over the per-call limit", map[string]any{"words": words(500)}},
		{"near the limits", map[string]any{"words": words(200), "groups": groups(20, 50)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			obj, err := json.Marshal(map[string]any{"apiVersion": "validate.backendslice.io/v1", "kind": "CostProbe",
				"metadata": map[string]any{"name": "cost"}, "spec": c.spec})
			if err != nil {
				t.Fatal(err)
			}
			res := checker.Create(ctx, obj, ns)
			serverErr := rc.Post().Namespace(ns).Resource("costprobes").Param("dryRun", "All").Param("fieldValidation", "Strict").
				SetHeader("Content-Type", "application/json").Body(obj).Do(context.Background()).Error()
			sameRefusal(t, res.Err, serverErr)
		})
	}
}

// fuzzTemplates are specs with two string slots, %[1]s and %[2]s (JSON
// strings), each reaching a family of rules.
var fuzzTemplates = []string{
	`{"sources":[{"name":"s","static":{"endpoints":[{"address":%[1]s,"hostname":%[2]s}]}}]}`,
	`{"addressTypes":["IPv4","IPv6","FQDN"],"sources":[{"name":"s","static":{"endpoints":[{"address":%[1]s},{"address":%[2]s}]}}]}`,
	`{"sources":[{"name":"s","dns":{"name":%[1]s,"minRefresh":%[2]s}}]}`,
	`{"sources":[{"name":"s","consul":{"service":%[1]s,"datacenter":%[2]s,"tags":[%[2]s]}}]}`,
	`{"sources":[{"name":"s","consul":{"service":"web","namespace":%[1]s,"partition":%[2]s,"nodeMeta":{%[1]s:%[2]s}}}]}`,
	`{"sources":[{"name":"s","awsEC2":{"region":%[1]s,"instanceIDs":[%[2]s]}}]}`,
	`{"sources":[{"name":"s","awsRDS":{"region":"eu-west-1","dbClusterIdentifier":%[1]s}},{"name":"t","awsRDS":{"region":%[2]s,"tags":{%[1]s:%[2]s}}}]}`,
	`{"drainPeriod":%[1]s,"probe":{"http":{"path":%[2]s}},` + staticBody,
	`{"probe":{"tcp":{},"period":%[1]s,"timeout":%[2]s},` + staticBody,
	`{"service":{"name":%[1]s,"labels":{%[2]s:"x"},"adopt":{"handWrittenManagedBy":[%[1]s]}},` + staticBody,
	`{"sources":[{"name":%[1]s,"static":{"endpoints":[{"address":"192.0.2.1"}]}},{"name":%[2]s,"dns":{"name":"db.example.com"}}]}`,
	`{"sources":[{"name":"p","providerRef":{"name":"hosts"},"plugin":{"parameters":{%[1]s:%[2]s}}}]}`,
}

// FuzzValidateAgainstAdmission sends specs made of generated strings, in
// the slots of fuzzTemplates, both to validate and to the API server: any
// disagreement in verdict, reason or cause fails. `make fuzz` runs it
// against the control plane TestMain starts; its seeds run in `make test`.
func FuzzValidateAgainstAdmission(f *testing.F) {
	seeds := [][2]string{
		{"192.0.2.10", "pg-0"}, {"::ffff:192.0.2.7", "a"}, {"0x64.0x64.0x64.0xc8", "1684301000"}, {"db.payments.svc", "cluster.local"},
		{"fe80::1", "ff02::1"}, {"192.0.2.07", "2001:db8::1::2"}, {"db.example.com", "_db._tcp.Example.COM"},
		{"web..db", "dc1/../x"}, {"Team-A", "part_a"}, {"eu-west-1", "i-0123456789abcdef0"}, {"us-gov-west-1", "i-0a"},
		{"orders--db", ""}, {"-5s", "/a b"}, {"1h0m0.001s", "/health?x=%2F"}, {"500ms", "10ms"}, {"10s", "10s"},
		{"db", "kubernetes.io/service-name"}, {"endpointslice-controller.k8s.io", "team"}, {"s", "s"}, {"", "\x00"},
	}
	for i, s := range seeds {
		f.Add(uint8(i%len(fuzzTemplates)), s[0], s[1])
		f.Add(uint8((i+1)%len(fuzzTemplates)), s[1], s[0])
	}
	v, err := validate.New(validateOptions("default"))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, template uint8, a, b string) {
		ja, _ := json.Marshal(a) // strings always marshal
		jb, _ := json.Marshal(b)
		spec := fmt.Sprintf(fuzzTemplates[int(template)%len(fuzzTemplates)], ja, jb)
		obj, err := json.Marshal(ruleObject(t, "default", "fuzz", spec))
		if err != nil {
			t.Fatal(err)
		}
		docs := validate.Split("fuzz", obj)
		if len(docs) != 1 || docs[0].Err != nil {
			t.Fatalf("%d documents (%v) of %s", len(docs), docs, obj)
		}
		serverErr := dryRunner(t).create("default", docs[0].JSON)
		sameRefusal(t, v.Admit(ctx, docs[0]).Err, serverErr)
		sameFindings(t, v.Validate(ctx, docs), serverErr)
	})
}

// TestValidateAgreesWithTheController: what validate says the controller
// will refuse or drop, offline, is what the controller says on status:
// its own spec check (InvalidSpec), a source its BackendProvider does not
// admit (ProviderNotAdmitted, with the provider and the Namespace in
// validate's input), and an address the deny list drops.
func TestValidateAgreesWithTheController(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	provider := &v1alpha1.BackendProvider{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "BackendProvider"},
		ObjectMeta: metav1.ObjectMeta{Name: "validate-" + ns},
		Spec: v1alpha1.BackendProviderSpec{Static: &v1alpha1.StaticProvider{}, AllowedCIDRs: []string{"192.0.2.0/24"},
			Namespaces: v1alpha1.NamespaceSelection{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "payments"}}}},
	}
	// The namespace as the input holds it: not labelled team=payments.
	namespace := &corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: ns}}

	dotted := staticBackend(ns, "db.primary", "192.0.2.10")
	refused := staticBackend(ns, "refused", "192.0.2.10")
	refused.Spec.Sources[0].ProviderRef = &v1alpha1.ProviderReference{Name: provider.Name}
	denied := staticBackend(ns, "denied", "192.0.2.10", "fd00:ec2::254")
	v, err := validate.New(validateOptions(ns))
	if err != nil {
		t.Fatal(err)
	}
	var input []byte
	for _, obj := range []client.Object{provider, namespace, dotted, refused, denied} {
		if _, ok := obj.(*v1alpha1.ExternalBackend); ok {
			obj.GetObjectKind().SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("ExternalBackend"))
		}
		b, err := yaml.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		input = append(append(input, "---\n"...), b...)
	}
	rep := v.Validate(ctx, validate.Split("input.yaml", input))
	said := func(name, check string) validate.Finding {
		t.Helper()
		var out []validate.Finding
		for _, f := range rep.Findings {
			if f.Name == name && f.Check == check {
				out = append(out, f)
			}
		}
		if len(out) != 1 {
			t.Fatalf("validate's %s findings of %s: %+v, want one", check, name, out)
		}
		return out[0]
	}
	mustCreate(t, provider)
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), provider) })
	for _, xb := range []*v1alpha1.ExternalBackend{dotted, refused, denied} {
		mustCreate(t, xb)
	}

	spec := said("db.primary", validate.CheckController)
	cur := waitCondition(t, dotted, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec)
	if c, _ := condition(cur, v1alpha1.ConditionReady); c.Message != spec.Message {
		t.Errorf("InvalidSpec on status %q; validate says %q", c.Message, spec.Message)
	}

	tenant := said("refused", validate.CheckTenancy)
	cur = waitCondition(t, refused, v1alpha1.ConditionResolved, metav1.ConditionFalse, v1alpha1.ReasonProviderNotAdmitted)
	if c, _ := condition(cur, v1alpha1.ConditionResolved); !strings.Contains(c.Message, tenant.Message) || !strings.Contains(c.Message, tenant.Rule) {
		t.Errorf("ProviderNotAdmitted on status %q; validate says %q (rule %s)", c.Message, tenant.Message, tenant.Rule)
	}

	drop := said("denied", validate.CheckDropped)
	cur = waitCondition(t, denied, v1alpha1.ConditionResolved, metav1.ConditionTrue, v1alpha1.ReasonAddressesDropped)
	if len(cur.Status.Dropped) != 1 || drop.Message != fmt.Sprintf("the controller would drop %s from source %s: %s",
		cur.Status.Dropped[0].Address, cur.Status.Dropped[0].Source, cur.Status.Dropped[0].Reason) {
		t.Errorf("dropped on status %+v; validate says %q", cur.Status.Dropped, drop.Message)
	}
}
