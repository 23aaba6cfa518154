package v1alpha1

import (
	"math/rand/v2"
	"os"
	"regexp"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// TestValidHTTPProbePath: the hand-written check takes the paths and
// queries of health endpoints and refuses what could carry anything else
// (spaces, fragments, raw bytes, bad escapes, more than 256 characters).
func TestValidHTTPProbePath(t *testing.T) {
	for _, c := range []struct {
		path string
		ok   bool
	}{
		{"/", true},
		{"/healthz", true},
		{"/health/ready?verbose=1&x=a%2Fb", true},
		{"/primary", true},
		{"/a?b?c", true},
		{"/~user/.well-known/x_y-z;v=1:@!$'()*+,", true},
		{"/" + strings.Repeat("a", HTTPProbePathMaxLength-1), true},
		{"/" + strings.Repeat("a", HTTPProbePathMaxLength), false},
		{"", false},
		{"healthz", false},
		{"/a b", false},
		{"/a#frag", false},
		{"/a%2", false},
		{"/a%zz", false},
		{"/a%", false},
		{"/a\x00", false},
		{"/a\r\nHost: other", false},
		{"/é", false},
		{"/a\"b", false},
		{"/a<b>", false},
		{"/a\\b", false},
		{"/a[0]", false},
		{"/a{b}", false},
		{"/a|b", false},
		{"/a^b", false},
		{"/a`b", false},
	} {
		if got := ValidHTTPProbePath(c.path); got != c.ok {
			t.Errorf("ValidHTTPProbePath(%q) = %v, want %v", c.path, got, c.ok)
		}
	}
}

// TestValidHTTPProbePathIsThePattern: the check agrees with the CRD's
// pattern on a table of random paths drawn from an alphabet of allowed,
// refused and escape characters.
func TestValidHTTPProbePathIsThePattern(t *testing.T) {
	re := regexp.MustCompile(HTTPProbePathPattern)
	const alphabet = "aZ09-._~!$&'()*+,;=:@/?%%%fFgG #\"<>\\^`{|}[]\x00\x7f\xc3\xa9"
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		var b strings.Builder
		b.WriteByte('/')
		for range rng.IntN(12) {
			b.WriteByte(alphabet[rng.IntN(len(alphabet))])
		}
		p := b.String()
		if got, want := ValidHTTPProbePath(p), re.MatchString(p); got != want {
			t.Fatalf("ValidHTTPProbePath(%q) = %v, the pattern says %v", p, got, want)
		}
	}
}

// TestPathBoundsAreTheCRDs: the generated CRD bounds both probe paths
// (spec.probe and spec.sources[].probe) with the constants the
// controller checks.
func TestPathBoundsAreTheCRDs(t *testing.T) {
	raw, err := os.ReadFile("../../config/crd/bases/backendslice.io_externalbackends.yaml")
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(raw, crd); err != nil {
		t.Fatal(err)
	}
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	sources := spec.Properties["sources"].Items.Schema
	for name, probe := range map[string]apiextensionsv1.JSONSchemaProps{
		"spec.probe": spec.Properties["probe"], "spec.sources[].probe": sources.Properties["probe"],
	} {
		path := probe.Properties["http"].Properties["path"]
		if path.MaxLength == nil || *path.MaxLength != HTTPProbePathMaxLength {
			t.Errorf("%s.http.path: maxLength %v, want %d", name, path.MaxLength, HTTPProbePathMaxLength)
		}
		want := `self.matches("` + HTTPProbePathPattern + `")`
		if len(path.XValidations) != 1 || path.XValidations[0].Rule != want {
			t.Errorf("%s.http.path: rules %+v, want %s", name, path.XValidations, want)
		}
	}
}
