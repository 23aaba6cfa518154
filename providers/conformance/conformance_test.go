package conformance

import (
	"strings"
	"testing"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
)

func TestDiffEndpoints(t *testing.T) {
	a := providers.Endpoint{Address: "192.0.2.1", Serving: true}
	b := providers.Endpoint{Address: "192.0.2.2", Serving: true}
	bDown := providers.Endpoint{Address: "192.0.2.2"}
	cases := []struct {
		name      string
		want, got []providers.Endpoint
		diff      []string
	}{
		{name: "equal", want: []providers.Endpoint{a, b}, got: []providers.Endpoint{a, b}},
		{name: "order ignored", want: []providers.Endpoint{a, b}, got: []providers.Endpoint{b, a}},
		{name: "both empty", want: nil, got: []providers.Endpoint{}},
		{name: "missing", want: []providers.Endpoint{a, b}, got: []providers.Endpoint{a}, diff: []string{"missing: {Address:192.0.2.2"}},
		{name: "extra", want: []providers.Endpoint{a}, got: []providers.Endpoint{a, b}, diff: []string{"extra:   {Address:192.0.2.2"}},
		{name: "field differs", want: []providers.Endpoint{b}, got: []providers.Endpoint{bDown},
			diff: []string{"missing: {Address:192.0.2.2 Zone: Hostname: Serving:true", "extra:   {Address:192.0.2.2 Zone: Hostname: Serving:false"}},
		{name: "multiplicity", want: []providers.Endpoint{a}, got: []providers.Endpoint{a, a}, diff: []string{"extra:   {Address:192.0.2.1"}},
		{name: "multiplicity missing", want: []providers.Endpoint{a, a}, got: []providers.Endpoint{a}, diff: []string{"missing: {Address:192.0.2.1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := diffEndpoints(c.want, c.got)
			if len(c.diff) == 0 {
				if got != "" {
					t.Errorf("diff = %q, want none", got)
				}
				return
			}
			for _, d := range c.diff {
				if !strings.Contains(got, d) {
					t.Errorf("diff %q does not contain %q", got, d)
				}
			}
			if n := strings.Count(got, "\n"); n != len(c.diff) {
				t.Errorf("diff has %d line(s), want %d: %q", n, len(c.diff), got)
			}
		})
	}
}

func TestNewRequest(t *testing.T) {
	src := v1alpha1.Source{Name: "s", Static: &v1alpha1.StaticSource{}}
	r := NewRequest(src)
	if r.Namespace == "" || r.Backend == "" || r.Source.Name != "s" {
		t.Errorf("NewRequest = %+v", r)
	}
	if len(r.AddressTypes) != 2 || r.AddressTypes[0] != v1alpha1.AddressTypeIPv4 || r.AddressTypes[1] != v1alpha1.AddressTypeIPv6 {
		t.Errorf("default AddressTypes = %v, want [IPv4 IPv6]", r.AddressTypes)
	}
	r = NewRequest(src, v1alpha1.AddressTypeFQDN)
	if len(r.AddressTypes) != 1 || r.AddressTypes[0] != v1alpha1.AddressTypeFQDN {
		t.Errorf("AddressTypes = %v, want [FQDN]", r.AddressTypes)
	}
}

func TestCopyRequestIsDeep(t *testing.T) {
	r := NewRequest(v1alpha1.Source{Name: "s", Static: &v1alpha1.StaticSource{Endpoints: []v1alpha1.StaticEndpoint{{Address: "192.0.2.1"}}}})
	c := copyRequest(r)
	c.Source.Static.Endpoints[0].Address = "192.0.2.2"
	c.AddressTypes[0] = v1alpha1.AddressTypeFQDN
	if r.Source.Static.Endpoints[0].Address != "192.0.2.1" || r.AddressTypes[0] != v1alpha1.AddressTypeIPv4 {
		t.Errorf("changing the copy changed the original: %+v", r)
	}
}
