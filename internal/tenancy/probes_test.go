package tenancy

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/backendslice/backendslice/api/v1alpha1"
)

// TestProbePortRefusers: a probe goes to a target port, or to a port every
// provider of the endpoint allows; a source without a provider allows
// target ports only.
func TestProbePortRefusers(t *testing.T) {
	health := ProbeGrant{Provider: "vms", Ports: []v1alpha1.PortRange{{Port: 8008}}}
	ranged := ProbeGrant{Provider: "range", Ports: []v1alpha1.PortRange{{Port: 9000, EndPort: ptr.To[int32](9099)}}}
	none := ProbeGrant{Provider: "plain"}
	flags := ProbeGrant{}
	for _, c := range []struct {
		name        string
		port        int32
		targetPorts []int32
		grants      []ProbeGrant
		refusers    []string
	}{
		{"a target port", 5432, []int32{5432}, []ProbeGrant{none}, nil},
		{"one of several target ports", 8443, []int32{8080, 8443}, []ProbeGrant{none}, nil},
		{"a target port through a source without provider", 5432, []int32{5432}, []ProbeGrant{flags}, nil},
		{"another port, no provider allows it", 22, []int32{5432}, []ProbeGrant{none}, []string{"plain"}},
		{"another port, the provider allows it", 8008, []int32{5432}, []ProbeGrant{health}, nil},
		{"inside a range", 9050, []int32{5432}, []ProbeGrant{ranged}, nil},
		{"a range's first and last ports", 9099, []int32{5432}, []ProbeGrant{ranged}, nil},
		{"just past a range", 9100, []int32{5432}, []ProbeGrant{ranged}, []string{"range"}},
		{"just below a range", 8999, []int32{5432}, []ProbeGrant{ranged}, []string{"range"}},
		{"a port one provider of two allows", 8008, []int32{5432}, []ProbeGrant{health, none}, []string{"plain"}},
		{"a port both providers allow", 9050, []int32{5432}, []ProbeGrant{ranged, {Provider: "b", Ports: []v1alpha1.PortRange{{Port: 9050}}}}, nil},
		{"trusted mode allows no other port", 8008, []int32{5432}, []ProbeGrant{health, flags}, []string{""}},
		{"no grant at all: target ports only", 8008, []int32{5432}, nil, []string{""}},
		{"no grant at all, a target port", 5432, []int32{5432}, nil, nil},
		{"an inverted range allows nothing", 9050, []int32{5432}, []ProbeGrant{{Provider: "bad", Ports: []v1alpha1.PortRange{{Port: 9099, EndPort: ptr.To[int32](9000)}}}}, []string{"bad"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			for _, g := range ProbePortRefusers(c.port, c.targetPorts, c.grants) {
				got = append(got, g.Provider)
			}
			if !slices.Equal(got, c.refusers) {
				t.Errorf("port %d, targets %v: refused by %q, want %q", c.port, c.targetPorts, got, c.refusers)
			}
		})
	}
}

// TestGrantOf: a provider grants its spec.probes.allowedPorts, none when
// unset.
func TestGrantOf(t *testing.T) {
	bp := &v1alpha1.BackendProvider{ObjectMeta: metav1.ObjectMeta{Name: "vms"}}
	if g := GrantOf(bp); g.Provider != "vms" || len(g.Ports) != 0 {
		t.Errorf("without probes: %+v", g)
	}
	bp.Spec.Probes = &v1alpha1.ProviderProbes{AllowedPorts: []v1alpha1.PortRange{{Port: 8008}}}
	if g := GrantOf(bp); !g.allows(8008) || g.allows(8009) {
		t.Errorf("allowedPorts [8008]: %+v", g)
	}
}
