package tenancy_test

import (
	"testing"
	"time"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// TestAdmissionEvents: a backend whose namespace its BackendProvider does
// not admit is told so once (the Warning ProviderNotAdmitted); once the
// platform team admits the namespace, ProviderAdmitted and Published are
// told once each, and Ready's recovery is not told again; a revocation is
// told by ProviderNotAdmitted again. Nothing more is told while nothing
// changes.
func TestAdmissionEvents(t *testing.T) {
	t.Parallel()
	const quiet = 3 * time.Second
	ns := newNamespace(t, "admitted", nil)
	bp := uniqueName(ns, "static")
	createProvider(t, bp, admits("", "billing"), staticSpec("192.0.2.0/24"))
	xb := backend(ns, "db", drainHour, staticSource(bp, "192.0.2.81"))
	framework.Create(t, xb)
	waitRefused(t, xb, "namespace "+ns)
	framework.WaitEventCounts(t, xb, quiet, map[string]int32{"Warning/" + v1alpha1.ReasonProviderNotAdmitted: 1})

	editProvider(t, bp, func(p *v1alpha1.BackendProvider) { p.Spec.Namespaces.Names = []string{"billing", ns} })
	waitStates(t, ns, "db", statesOf(ready, "192.0.2.81"))
	framework.WaitReady(t, xb)
	admitted := map[string]int32{
		"Warning/" + v1alpha1.ReasonProviderNotAdmitted: 1,
		"Normal/" + v1alpha1.ReasonProviderAdmitted:     1,
		"Normal/" + v1alpha1.ReasonPublished:            1,
	}
	// The Service of a backend that publishes nothing has every family
	// the cluster has: on a dual-stack cluster it takes its endpoints'
	// one, and gets both back when they are withdrawn. A single-stack
	// cluster's Service has one family all along.
	if framework.DualStack() {
		admitted["Normal/ServiceUpdated"] = 1
	}
	framework.WaitEventCounts(t, xb, quiet, admitted)
	ev := waitEvent(t, xb, "Normal", v1alpha1.ReasonProviderAdmitted, "source fixed", "BackendProvider "+bp)
	if ev.Series != nil {
		t.Errorf("ProviderAdmitted told %d times, want once", ev.Series.Count)
	}

	editProvider(t, bp, func(p *v1alpha1.BackendProvider) { p.Spec.Namespaces.Names = []string{"billing"} })
	waitRefused(t, xb, "namespace "+ns)
	admitted["Warning/"+v1alpha1.ReasonProviderNotAdmitted] = 2
	if framework.DualStack() {
		admitted["Normal/ServiceUpdated"] = 2
	}
	framework.WaitEventCounts(t, xb, quiet, admitted)
}
