package consistency

import (
	"fmt"
	"slices"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/publish"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// zoned are healthy endpoints in zones a, b, a, b, ...
func zoned(addrs ...string) []v1alpha1.StaticEndpoint {
	eps := staticEndpoints(addrs...)
	for i := range eps {
		eps[i].Zone = []string{"zone-a", "zone-b"}[i%2]
	}
	return eps
}

// waitHints waits until every endpoint published for svc carries hints
// naming exactly its own zone (want true), or none carries hints.
func waitHints(t *testing.T, ns, svc string, want bool) {
	t.Helper()
	framework.Eventually(t, framework.Timeout, fmt.Sprintf("hints=%t on slices of %s", want, svc), func() error {
		got, err := framework.Published(framework.Slices(t, ns, svc))
		if err != nil {
			return err
		}
		if len(got) == 0 {
			return fmt.Errorf("nothing published")
		}
		for addr, ep := range got {
			var zones []string
			if want && ep.Zone != nil {
				zones = []string{*ep.Zone}
			}
			if h := hintsOf(ep); !slices.Equal(h, zones) {
				return fmt.Errorf("%s (zone %s): hints %v, want %v", addr, ptr.Deref(ep.Zone, ""), h, zones)
			}
		}
		return nil
	})
}

// TestZoneHints checks zone hints on the real API server: set with
// trafficDistribution PreferClose or the topology-mode annotation when every
// ready endpoint has a zone; gone when one ready endpoint has none, or when
// neither asks for them. It passes once publish.ZoneHints is wired into the
// controller.
func TestZoneHints(t *testing.T) {
	ns := framework.Namespace(t)
	startInstance(t)
	eps := zoned(addresses("192.0.2.", 6)...)
	xb := backend(ns, "db", eps)
	xb.Spec.Service.TrafficDistribution = ptr.To("PreferClose")
	framework.Create(t, xb)
	waitHints(t, ns, "db", true)

	// A ready endpoint without a zone: kube-proxy would ignore the hints.
	unzoned := slices.Clone(eps)
	unzoned[0].Zone = ""
	setEndpoints(t, xb, unzoned)
	waitHints(t, ns, "db", false)

	// Not ready, the endpoint without a zone does not count.
	unzoned[0].Health = v1alpha1.HealthUnhealthy
	setEndpoints(t, xb, unzoned)
	waitHints(t, ns, "db", true)

	// The annotation asks for hints as well.
	if err := framework.Update(t, xb, func(cur *v1alpha1.ExternalBackend) {
		cur.Spec.Service.TrafficDistribution = nil
		cur.Spec.Service.Annotations = map[string]string{publish.TopologyModeAnnotation: "Auto"}
	}); err != nil {
		t.Fatal(err)
	}
	waitHints(t, ns, "db", true)

	// Nothing asks for them.
	if err := framework.Update(t, xb, func(cur *v1alpha1.ExternalBackend) {
		cur.Spec.Service.Annotations = nil
	}); err != nil {
		t.Fatal(err)
	}
	waitHints(t, ns, "db", false)
}

// hintsOf is the zones an endpoint's hints name.
func hintsOf(ep discoveryv1.Endpoint) []string {
	if ep.Hints == nil {
		return nil
	}
	out := make([]string, len(ep.Hints.ForZones))
	for i, z := range ep.Hints.ForZones {
		out[i] = z.Name
	}
	return out
}
