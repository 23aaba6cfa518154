package dns_test

import (
	"fmt"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// deniedZones are zones the test server is authoritative for besides
// zone, so that a CNAME into them would be followed to an address if
// nothing stopped it: the cluster's DNS domain, localhost and the zone of
// GCE's metadata name.
var deniedZones = []string{"cluster.local", "localhost", "google.internal"}

// TestCNAMEIntoDeniedNames: a tenant's name that published addresses is
// changed into a CNAME chain of two hops that ends in another namespace's
// Service (cluster.local), in localhost, or in GCE's metadata name or a
// name under it, each of which answers with an address. The source fails (SourceFailed, stale),
// naming only its own name; the last known endpoints stay and nothing of
// the answer is published; the denied name is never asked; status and
// events name neither hop. When the name points outside again, its
// addresses are published.
func TestCNAMEIntoDeniedNames(t *testing.T) {
	t.Parallel()
	for i, c := range []struct{ name, target, addr string }{
		{"cluster", "db.victim.svc.cluster.local", "198.51.100.91"},
		{"localhost", "db.localhost", "198.51.100.92"},
		{"metadata", "metadata.google.internal", "198.51.100.93"},
		// Under a metadata name: the CRD refuses it as a source's own
		// name, the controller as every name, also in a chain.
		{"under-metadata", "x.metadata.google.internal", "198.51.100.94"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			name, hop := host("chain-"+c.name), host("hop-"+c.name)
			lastGood := []string{fmt.Sprintf("192.0.2.9%d", i+1), fmt.Sprintf("2001:db8::9%d", i+1)}
			setAddrs(name, 1, lastGood...)
			ns, xb := create(t, name, func(xb *v1alpha1.ExternalBackend) { xb.Spec.DrainPeriod = &metav1.Duration{} })
			waitStates(t, ns, allReady(lastGood...))
			framework.WaitReady(t, xb)
			// The test server is authoritative for the target's zone: it
			// answers with an address, which a lookup that followed the
			// chain would publish.
			setAddrs(c.target, 60, c.addr, fmt.Sprintf("2001:db8::9%d", i+4))

			setAddrs(name, 1)
			server.Set(name, mdns.TypeCNAME, 1, hop+".")
			server.Set(hop, mdns.TypeCNAME, 1, c.target+".")
			cur := framework.WaitCondition(t, xb, v1alpha1.ConditionResolved, metav1.ConditionFalse, v1alpha1.ReasonSourceFailed)
			expectMessage(t, cur, v1alpha1.ConditionResolved, "spec.sources[lookup].dns.name: "+name+": its CNAME chain leads into a name that can't be followed")
			if src := sourceStatus(t, cur, "lookup"); !src.Stale {
				t.Errorf("status.sources[lookup] = %+v, want stale", src)
			}
			// Looked up every second: several passes end the same way.
			holdFor(t, ns, allReady(lastGood...), 3*time.Second)
			if q := server.Queries(c.target); len(q) != 0 {
				t.Errorf("%s was asked %d time(s), want never", c.target, len(q))
			}
			framework.ExpectNotNamed(t, framework.Get(t, xb), hop, c.target, c.addr)

			server.Set(hop, mdns.TypeCNAME, 1, host("outside-"+c.name)+".")
			setAddrs(host("outside-"+c.name), 1, fmt.Sprintf("192.0.2.10%d", i))
			waitStates(t, ns, allReady(fmt.Sprintf("192.0.2.10%d", i)))
			framework.WaitReady(t, xb)
		})
	}
}
