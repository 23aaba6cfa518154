package consistency

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"k8s.io/utils/ptr"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// TestTwoInstancesFlapping runs two controller instances without leader
// election on the same backend while its endpoints flap and grow. Every
// state the slices go through publishes each address once, and each round
// ends with exactly the desired endpoints and conditions.
func TestTwoInstancesFlapping(t *testing.T) {
	ns := framework.Namespace(t)
	dups := watchDuplicates(t, ns, "db")
	startInstance(t)
	startInstance(t)

	r := rand.New(rand.NewPCG(1, 0))
	eps := staticEndpoints(append(addresses("192.0.2.", 100), addresses("198.51.100.", 30)...)...)
	xb := backend(ns, "db", eps)
	framework.Create(t, xb)
	more := addresses("198.51.100.", 130)[30:]
	for round := range 20 {
		if round > 0 {
			for _, i := range r.Perm(len(eps))[:8] {
				eps[i].Health = flip(eps[i].Health)
			}
			if round%5 == 0 {
				eps = append(eps, staticEndpoints(more[:20]...)...)
				more = more[20:]
			}
			setEndpoints(t, xb, eps)
		}
		waitPublished(t, ns, "db", eps)
	}
	dups.check(t)
}

// flip turns a healthy endpoint unhealthy and back.
func flip(h v1alpha1.Health) v1alpha1.Health {
	if h == v1alpha1.HealthUnhealthy {
		return v1alpha1.HealthHealthy
	}
	return v1alpha1.HealthUnhealthy
}

// waitPublished waits until our slices of svc publish exactly eps, each
// ready exactly when healthy.
func waitPublished(t *testing.T, ns, svc string, eps []v1alpha1.StaticEndpoint) {
	t.Helper()
	framework.Eventually(t, framework.Timeout, "slices of "+svc, func() error {
		got, err := framework.Published(framework.Slices(t, ns, svc))
		if err != nil {
			return err
		}
		if len(got) != len(eps) {
			return fmt.Errorf("%d addresses published, want %d", len(got), len(eps))
		}
		for _, e := range eps {
			ep, ok := got[e.Address]
			if !ok {
				return fmt.Errorf("%s not published", e.Address)
			}
			if ready := ptr.Deref(ep.Conditions.Ready, false); ready != (e.Health == v1alpha1.HealthHealthy) {
				return fmt.Errorf("%s ready=%t, health %s", e.Address, ready, e.Health)
			}
		}
		return nil
	})
}
