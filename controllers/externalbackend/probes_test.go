package externalbackend

import (
	"context"
	"strings"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/publish"
	"github.com/backendslice/backendslice/probe"
	"github.com/backendslice/backendslice/providers"
)

// recordingProber is a prober whose every target fails, and which keeps
// the targets it was last given.
type recordingProber struct{ targets []probe.Target }

func (p *recordingProber) Sync(_ types.NamespacedName, targets []probe.Target) { p.targets = targets }
func (p *recordingProber) Verdict(probe.Target) (bool, bool)                   { return false, true }

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
		eps = append(eps, publish.Endpoint{AddressType: discoveryv1.AddressTypeIPv4, Address: a, Serving: true})
		found = append(found, providers.Endpoint{Address: a, Serving: true})
	}
	xb.Spec.Sources = []v1alpha1.Source{{Name: "vms", Static: &v1alpha1.StaticSource{}}}
	res := resolved{results: []publish.SourceResult{{Name: "vms", Endpoints: found}}}
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
