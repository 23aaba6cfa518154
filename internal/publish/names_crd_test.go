package publish

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/config/crd"
	"github.com/backendslice/backendslice/internal/admission"
	"github.com/backendslice/backendslice/providers"
)

// TestCRDRefusesWhatTheControllerRefuses: the names the controller refuses
// for what the CRD can know too (its lists, with the default cluster
// domain) are refused at admission, as a static FQDN address and as a dns
// source's name, by the CRD's own CEL rules run offline; the names beside
// them that the controller publishes pass admission. The cases are built
// from the controller's lists (EveryClustersNamespaces, MetadataNames,
// MetadataLabel), so a name added to them but not to the CRD's rules
// fails here. The controller refuses names under a metadata name too
// (DeniedMetadataNames): an object stored before the CRD refused them can
// still hold one.
func TestCRDRefusesWhatTheControllerRefuses(t *testing.T) {
	checker, err := admission.New(crd.ExternalBackendYAML)
	if err != nil {
		t.Fatal(err)
	}
	type nameCase struct {
		name string
		// refused tells whether the CRD and the controller refuse it.
		refused bool
	}
	var cases []nameCase
	refuse := func(names ...string) {
		for _, n := range names {
			cases = append(cases, nameCase{name: n, refused: true})
		}
	}
	accept := func(names ...string) {
		for _, n := range names {
			cases = append(cases, nameCase{name: n})
		}
	}
	for _, ns := range EveryClustersNamespaces {
		refuse("kubernetes."+ns, "db."+strings.ToUpper(ns)+".")
		accept("kubernetes."+ns+".example.com", ns+".example.com", "kubernetes."+ns+"s")
	}
	for _, m := range MetadataNames {
		refuse(m, strings.ToUpper(m)+".")
		refuse("x."+m, "a.b."+m)
		accept(m+".example.com", "x"+m)
	}
	refuse(MetadataLabel+".ec2.internal", MetadataLabel+".eu-west-1.compute.internal")
	accept("x-"+MetadataLabel+".example.com", MetadataLabel+"-backup.example.com")
	refuse("db.localhost", "a.b.LocalHost.", "db.payments.pod")
	accept("localhost.example.com", "db.localhosts", "pod.example.com")
	refuse("db", "cafe", "db.")
	accept("db.example.com", "db.example")

	pol := Policy{AddressTypes: []v1alpha1.AddressType{v1alpha1.AddressTypeFQDN}, DeniedNames: DeniedMetadataNames()}
	for _, c := range cases {
		// The static address field takes lower-case names without the
		// trailing dot; the dns source's name takes both.
		static := strings.TrimSuffix(strings.ToLower(c.name), ".")
		for _, spec := range []struct{ field, name, json string }{
			{"spec.sources[0].static.endpoints[0].address", static, `{"name":"s","static":{"endpoints":[{"address":` + quote(t, static) + `}]}}`},
			{"spec.sources[0].dns.name", c.name, `{"name":"s","dns":{"name":` + quote(t, c.name) + `}}`},
		} {
			obj := `{"apiVersion":"backendslice.io/v1alpha1","kind":"ExternalBackend","metadata":{"name":"db"},"spec":{` +
				`"addressTypes":["IPv4","IPv6","FQDN"],"service":{"ports":[{"name":"pg","port":5432}]},"sources":[` + spec.json + `]}}`
			res := checker.Create(context.Background(), []byte(obj), "payments")
			for _, cause := range res.Causes() {
				if cause.Field != spec.field || !strings.Contains(cause.Message, "spec.sources[].") || !strings.Contains(cause.Message, "; ") {
					t.Errorf("%s %q: cause %s %q, want one on the field whose message names it and the fix", spec.field, spec.name, cause.Field, cause.Message)
				}
			}
			if refused := res.Err != nil; refused != c.refused {
				t.Errorf("%s %q: refused at admission %v (%v), want %v", spec.field, spec.name, refused, res.Err, c.refused)
			}
		}
		_, dropped := Normalize([]SourceResult{{Name: "s", Endpoints: []providers.Endpoint{{Address: static, Serving: true}}}}, pol)
		if controller := len(dropped) > 0; controller != c.refused {
			t.Errorf("%q: dropped by the controller %v (%v), want %v", static, controller, dropped, c.refused)
		}
	}
}

// quote is s as a JSON string.
func quote(t *testing.T, s string) string {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
