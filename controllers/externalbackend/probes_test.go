package externalbackend

import (
	"context"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/config/crd"
	"github.com/backendslice/backendslice/probe"
)

// TestCheckOfDefaults: a probe without the API server's defaulting gets
// the API's defaults; set fields are kept.
func TestCheckOfDefaults(t *testing.T) {
	xb := stepBackend(2)
	for _, c := range []struct {
		name  string
		probe v1alpha1.Probe
		want  probe.Check
	}{
		{"tcp, nothing set", v1alpha1.Probe{TCP: &v1alpha1.TCPProbe{}},
			probe.Check{Kind: probe.TCP, Port: 5432, Period: 10 * time.Second, Timeout: time.Second,
				SuccessThreshold: 1, FailureThreshold: 3, InitialReady: true}},
		{"http, nothing set", v1alpha1.Probe{HTTP: &v1alpha1.HTTPProbe{}},
			probe.Check{Kind: probe.HTTP, Port: 5432, Path: "/", Period: 10 * time.Second, Timeout: time.Second,
				SuccessThreshold: 1, FailureThreshold: 3, InitialReady: true}},
		{"everything set", v1alpha1.Probe{
			HTTP: &v1alpha1.HTTPProbe{Scheme: v1alpha1.HTTPSchemeHTTPS, Path: "/health", StatusCodes: []string{"200", "204"}, ServerName: "db.example.com"},
			Port: ptr.To[int32](8080), Period: &metav1.Duration{Duration: 5 * time.Second}, Timeout: &metav1.Duration{Duration: 2 * time.Second},
			SuccessThreshold: 2, FailureThreshold: 5, InitialState: v1alpha1.ProbeStateNotReady,
		}, probe.Check{Kind: probe.HTTPS, Port: 8080, Path: "/health", StatusCodes: "200,204", ServerName: "db.example.com",
			Period: 5 * time.Second, Timeout: 2 * time.Second, SuccessThreshold: 2, FailureThreshold: 5}},
		{"a short period without a timeout: half the period", v1alpha1.Probe{TCP: &v1alpha1.TCPProbe{}, Period: &metav1.Duration{Duration: time.Second}},
			probe.Check{Kind: probe.TCP, Port: 5432, Period: time.Second, Timeout: 500 * time.Millisecond,
				SuccessThreshold: 1, FailureThreshold: 3, InitialReady: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := (&Reconciler{}).checkOf(context.Background(), xb, "spec.probe", &c.probe)
			if err != nil || got != c.want {
				t.Errorf("checkOf = %+v, %v\nwant %+v", got, err, c.want)
			}
		})
	}
}

// TestProbeDefaultsMatchTheCRD: the defaults the API server applies (the
// +kubebuilder:default markers, as generated into the CRD) are the ones
// the controller applies, for spec.probe and each source's probe alike.
func TestProbeDefaultsMatchTheCRD(t *testing.T) {
	var def apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(crd.ExternalBackendYAML, &def); err != nil {
		t.Fatal(err)
	}
	spec := def.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	for field, schema := range map[string]apiextensionsv1.JSONSchemaProps{
		"spec.probe":           spec.Properties["probe"],
		"spec.sources[].probe": spec.Properties["sources"].Items.Schema.Properties["probe"],
	} {
		http := schema.Properties["http"]
		for _, c := range []struct {
			path string
			got  *apiextensionsv1.JSON
			want any
		}{
			{"period", schema.Properties["period"].Default, metav1.Duration{Duration: v1alpha1.DefaultProbePeriod}},
			{"timeout", schema.Properties["timeout"].Default, metav1.Duration{Duration: v1alpha1.DefaultProbeTimeout}},
			{"successThreshold", schema.Properties["successThreshold"].Default, v1alpha1.DefaultProbeSuccessThreshold},
			{"failureThreshold", schema.Properties["failureThreshold"].Default, v1alpha1.DefaultProbeFailureThreshold},
			{"initialState", schema.Properties["initialState"].Default, v1alpha1.DefaultProbeInitialState},
			{"failOpen", schema.Properties["failOpen"].Default, v1alpha1.DefaultProbeFailOpen},
			{"http.scheme", http.Properties["scheme"].Default, v1alpha1.DefaultHTTPProbeScheme},
			{"http.path", http.Properties["path"].Default, v1alpha1.DefaultHTTPProbePath},
		} {
			want, err := yaml.Marshal(c.want)
			if err != nil {
				t.Fatal(err)
			}
			if c.got == nil {
				t.Errorf("%s.%s: no default in the CRD, want %s", field, c.path, want)
				continue
			}
			if got, err := yaml.JSONToYAML(c.got.Raw); err != nil || string(got) != string(want) {
				t.Errorf("%s.%s: the CRD defaults to %s, the controller to %s (%v)", field, c.path,
					strings.TrimSpace(string(got)), strings.TrimSpace(string(want)), err)
			}
		}
		if d := http.Properties["statusCodes"].Description; !strings.Contains(d, probe.DefaultStatusCodes) {
			t.Errorf("%s.http.statusCodes: description %q does not name the default %s", field, d, probe.DefaultStatusCodes)
		}
	}
}
