package replica

import (
	"context"
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/backendslice/backendslice/test/e2e/framework"
)

// LeaseName is the controller's leader election lease (controllers.NewManager).
const LeaseName = "backendslice-controller.backendslice.io"

// TerminationGrace is the chart's terminationGracePeriodSeconds: a
// SIGTERMed controller still running after it is killed.
const TerminationGrace = 30 * time.Second

// WaitLeader waits until one replica says it leads, and returns it.
func WaitLeader(t *testing.T, replicas []*Replica) *Replica {
	t.Helper()
	var leader *Replica
	framework.Eventually(t, 60*time.Second, "a leader", func() error {
		leader = nil
		for _, r := range replicas {
			m, err := r.Scrape()
			if err != nil {
				return err
			}
			if m.Leader() {
				if leader != nil {
					return fmt.Errorf("%s and %s both say they lead", leader.Name, r.Name)
				}
				leader = r
			}
		}
		if leader == nil {
			return fmt.Errorf("no replica leads yet")
		}
		return nil
	})
	return leader
}

// ReadLease reads the controller's leader election lease in ns.
func ReadLease(t *testing.T, ns string) *coordinationv1.Lease {
	t.Helper()
	l := &coordinationv1.Lease{}
	if err := framework.E().Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: LeaseName}, l); err != nil {
		t.Fatalf("reading lease %s/%s: %v", ns, LeaseName, err)
	}
	return l
}
