package externalbackend

import (
	"context"
	"fmt"
	"strings"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/publish"
	"github.com/backendslice/backendslice/internal/tenancy"
	"github.com/backendslice/backendslice/probe"
	"github.com/backendslice/backendslice/providers"
)

// recordingProber is a prober whose every target fails, and which keeps
// the targets it was last given.
type recordingProber struct{ targets []probe.Target }

func (p *recordingProber) Sync(_ types.NamespacedName, targets []probe.Target) { p.targets = targets }
func (p *recordingProber) Passing(probe.Target) bool                           { return false }

// TestProbeTargetsPerBackendBounded: past --max-probe-targets-per-backend a
// backend's endpoints go unprobed (published as their sources say), and the
// Probed condition names the limit.
func TestProbeTargetsPerBackendBounded(t *testing.T) {
	prober := &recordingProber{}
	r := &Reconciler{Prober: prober, Config: Config{MaxProbeTargets: 2}}
	addrs := []string{"192.0.2.1", "192.0.2.2", "192.0.2.3"}
	xb := staticXB()
	xb.Spec.Probe = &v1alpha1.Probe{FailOpen: ptr.To(false)}
	xb.Spec.Service.Ports = []v1alpha1.ServicePort{{Name: "tcp", Port: 5432}}
	var eps []publish.Endpoint
	var found []providers.Endpoint
	for _, a := range addrs {
		eps = append(eps, endpointOn(a, 5432))
		found = append(found, providers.Endpoint{Address: a, Serving: true})
	}
	xb.Spec.Sources = []v1alpha1.Source{{Name: "vms", Static: &v1alpha1.StaticSource{}}}
	res := resolved{results: []publish.SourceResult{{Name: "vms", Endpoints: found}}, admissions: []sourceAdmission{{}}}
	got, out := r.applyProbes(context.Background(), xb, res, eps)
	if len(prober.targets) != 2 {
		t.Fatalf("%d targets probed, want the limit, 2", len(prober.targets))
	}
	ready := 0
	for _, e := range got {
		if e.Serving {
			ready++
		}
	}
	// The two probed endpoints fail and go out of service (failOpen is
	// off); the third, not probed, is published as its source says.
	if ready != 1 {
		t.Errorf("%d endpoint(s) serving, want only the unprobed one", ready)
	}
	c, ok := probedCondition(out)
	want := "1 endpoint(s) past the controller's limit of 2 probe targets per backend (--max-probe-targets-per-backend)"
	if !ok || !strings.Contains(c.Message, want) {
		t.Errorf("Probed = %+v, want a message naming %q", c, want)
	}
}

// endpointOn is a serving IPv4 endpoint published on port.
func endpointOn(address string, port int32) publish.Endpoint {
	return publish.Endpoint{AddressType: discoveryv1.AddressTypeIPv4, Address: address, Serving: true,
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("tcp"), Port: ptr.To(port)}}}
}

// TestProbePortsAreBounded: a probe goes to a port the endpoint is
// published on, or one every provider of the endpoint allows; otherwise
// no target reaches the prober, the endpoint is published as its source
// says, and Probed names the field, who refused and the fix.
func TestProbePortsAreBounded(t *testing.T) {
	const addr = "192.0.2.1"
	vms := tenancy.ProbeGrant{Provider: "vms"}
	health := tenancy.ProbeGrant{Provider: "health", Ports: []v1alpha1.PortRange{{Port: 8008}}}
	for _, c := range []struct {
		name string
		// port is the spec's probe port (0: unset); sourcePort is the
		// port of a probe of the source itself (0: none).
		port, sourcePort int32
		// published is the port the endpoint is published on.
		published int32
		// grants are those of the sources publishing addr, one source each.
		grants []tenancy.ProbeGrant
		// probedOn is the port probed, 0 when refused.
		probedOn int32
		says     []string
	}{
		{name: "unset: the target port", published: 5432, grants: []tenancy.ProbeGrant{vms}, probedOn: 5432},
		{name: "unset: a provider's own port (RDS without targetPort)", published: 3306, grants: []tenancy.ProbeGrant{vms}, probedOn: 3306},
		{name: "the target port named", port: 5432, published: 5432, grants: []tenancy.ProbeGrant{vms}, probedOn: 5432},
		{name: "another port", port: 22, published: 5432, grants: []tenancy.ProbeGrant{vms},
			says: []string{"spec.probe.port: 22 is neither a target port", `not allowed by BackendProvider "vms"`, "spec.probes.allowedPorts", "1 endpoint(s)", "published as their sources say"}},
		{name: "a port the provider allows", port: 8008, published: 5432, grants: []tenancy.ProbeGrant{health}, probedOn: 8008},
		{name: "a port one provider of two allows", port: 8008, published: 5432, grants: []tenancy.ProbeGrant{health, vms},
			says: []string{`not allowed by BackendProvider "vms"`}},
		{name: "trusted mode: target ports only", port: 8008, published: 5432, grants: []tenancy.ProbeGrant{{}},
			says: []string{"spec.probe.port: 8008", "not allowed by a source without providerRef"}},
		{name: "a source's own probe", sourcePort: 9100, published: 5432, grants: []tenancy.ProbeGrant{vms},
			says: []string{"spec.sources[s0].probe.port: 9100"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			prober := &recordingProber{}
			r := &Reconciler{Prober: prober}
			xb := staticXB()
			xb.Spec.Service.Ports = []v1alpha1.ServicePort{{Name: "tcp", Port: 5432}}
			xb.Spec.Probe = &v1alpha1.Probe{FailOpen: ptr.To(false)}
			if c.port != 0 {
				xb.Spec.Probe.Port = ptr.To(c.port)
			}
			var res resolved
			for i, g := range c.grants {
				src := v1alpha1.Source{Name: fmt.Sprintf("s%d", i), Static: &v1alpha1.StaticSource{}}
				if c.sourcePort != 0 {
					src.Probe = &v1alpha1.Probe{Port: ptr.To(c.sourcePort)}
				}
				xb.Spec.Sources = append(xb.Spec.Sources, src)
				res.results = append(res.results, publish.SourceResult{Name: src.Name, Endpoints: []providers.Endpoint{{Address: addr, Serving: true}}})
				res.admissions = append(res.admissions, sourceAdmission{probes: g})
			}
			got, out := r.applyProbes(context.Background(), xb, res, []publish.Endpoint{endpointOn(addr, c.published)})
			cond, _ := probedCondition(out)
			if c.probedOn != 0 {
				if len(prober.targets) != 1 || prober.targets[0].Check.Port != c.probedOn {
					t.Fatalf("targets %+v, want %s on %d", prober.targets, addr, c.probedOn)
				}
				// The recording prober fails every target: failOpen off
				// takes the endpoint out.
				if got[0].Serving || cond.Reason != v1alpha1.ReasonProbesFailing {
					t.Errorf("probed and failing: serving %v, Probed %+v", got[0].Serving, cond)
				}
				return
			}
			if len(prober.targets) != 0 {
				t.Errorf("targets %+v, want none: the port is refused", prober.targets)
			}
			if !got[0].Serving {
				t.Error("a refused probe's endpoint is not served, want it published as its source says")
			}
			if cond.Status != metav1.ConditionFalse || cond.Reason != v1alpha1.ReasonProbePortNotAllowed {
				t.Errorf("Probed %s/%s, want False/%s", cond.Status, cond.Reason, v1alpha1.ReasonProbePortNotAllowed)
			}
			for _, want := range c.says {
				if !strings.Contains(cond.Message, want) {
					t.Errorf("Probed message %q does not say %q", cond.Message, want)
				}
			}
		})
	}
}

// TestStoredBadProbePathIsNotSent: a path admission now refuses, in an
// object stored before it did, is not probed: Probed names the field.
func TestStoredBadProbePathIsNotSent(t *testing.T) {
	prober := &recordingProber{}
	r := &Reconciler{Prober: prober}
	xb := staticXB()
	xb.Spec.Service.Ports = []v1alpha1.ServicePort{{Name: "tcp", Port: 5432}}
	xb.Spec.Probe = &v1alpha1.Probe{HTTP: &v1alpha1.HTTPProbe{Path: "/a b#c"}}
	xb.Spec.Sources = []v1alpha1.Source{{Name: "vms", Static: &v1alpha1.StaticSource{}}}
	res := resolved{results: []publish.SourceResult{{Name: "vms", Endpoints: []providers.Endpoint{{Address: "192.0.2.1", Serving: true}}}},
		admissions: []sourceAdmission{{}}}
	_, out := r.applyProbes(context.Background(), xb, res, []publish.Endpoint{endpointOn("192.0.2.1", 5432)})
	if len(prober.targets) != 0 {
		t.Errorf("targets %+v, want none", prober.targets)
	}
	cond, _ := probedCondition(out)
	if cond.Reason != v1alpha1.ReasonProbeUnavailable || !strings.Contains(cond.Message, "spec.probe.http.path: a path of at most 256 characters") {
		t.Errorf("Probed %+v, want ProbeUnavailable naming spec.probe.http.path", cond)
	}
}
