package e2e

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// The Events that must not come are watched for quietPeriod (tamper_test.go)
// after the reconcile that could have told them.

// TestTransitionEvents: a backend tells its transitions once each: the
// first publication (Published), every endpoint turning unhealthy while
// Ready stays True (NoReadyEndpoints), and ready endpoints again
// (Published, the series' second); and nothing while the status changes
// in ways no one watches: a spec edit that publishes the same, and one
// that adds an unhealthy endpoint (Ready's message counts it).
func TestTransitionEvents(t *testing.T) {
	t.Parallel()
	xb, _ := readyBackend(t, []string{"192.0.2.41", "192.0.2.42"})
	framework.WaitEventCounts(t, xb, 0, map[string]int32{"Normal/Published": 1})

	mustUpdate(t, xb, withDrainPeriod("45s"))
	handled(t, xb, "the new drain period")
	mustUpdate(t, xb, func(xb *v1alpha1.ExternalBackend) {
		addEndpoint("192.0.2.43")(xb)
		withHealth("192.0.2.43", v1alpha1.HealthUnhealthy)(xb)
	})
	cur := handled(t, xb, "an unhealthy endpoint added")
	if c := cur.Status.Endpoints; c.Ready != 2 || c.Total != 3 {
		t.Fatalf("endpoints %+v, want 2 of 3 ready", c)
	}
	framework.WaitEventCounts(t, xb, quietPeriod, map[string]int32{"Normal/Published": 1})

	mustUpdate(t, xb, func(xb *v1alpha1.ExternalBackend) {
		withHealth("192.0.2.41", v1alpha1.HealthUnhealthy)(xb)
		withHealth("192.0.2.42", v1alpha1.HealthUnhealthy)(xb)
	})
	expectCondition(t, handled(t, xb, "every endpoint unhealthy"), v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
	framework.WaitEventCounts(t, xb, quietPeriod, map[string]int32{"Normal/Published": 1, "Warning/NoReadyEndpoints": 1})

	mustUpdate(t, xb, withHealth("192.0.2.41", v1alpha1.HealthHealthy))
	framework.WaitEventCounts(t, xb, quietPeriod, map[string]int32{"Normal/Published": 2, "Warning/NoReadyEndpoints": 1})
}

// TestAdoptedEventOnce: adopting a hand-written Service tells each step
// once (the Service taken over, published, the hand-written slice removed)
// and Adopted when the last hand-written object goes, never again at the
// reconciles after it.
func TestAdoptedEventOnce(t *testing.T) {
	t.Parallel()
	ns := framework.Namespace(t)
	handWrittenService(t, ns, nil)
	handWrittenSlice(t, ns, "db-manual", "", "192.0.2.51")
	xb := adopting(ns, "192.0.2.51")
	framework.Create(t, xb)
	waitCondition(t, xb, v1alpha1.ConditionAdopted, metav1.ConditionTrue, v1alpha1.ReasonAdopted)
	want := map[string]int32{
		"Normal/ServiceAdopted": 1, "Normal/Published": 1, "Normal/HandWrittenRemoved": 1, "Normal/" + v1alpha1.ReasonAdopted: 1,
	}
	framework.WaitEventCounts(t, xb, 0, want)
	mustUpdate(t, xb, withDrainPeriod("45s"))
	handled(t, xb, "the new drain period")
	framework.WaitEventCounts(t, xb, quietPeriod, want)
}

// handled waits until xb's status is written for its current generation,
// and returns it.
func handled(t *testing.T, xb *v1alpha1.ExternalBackend, what string) *v1alpha1.ExternalBackend {
	t.Helper()
	return waitStatus(t, xb, what, func(cur *v1alpha1.ExternalBackend) error {
		if cur.Status.ObservedGeneration != cur.Generation {
			return fmt.Errorf("status of generation %d, want %d", cur.Status.ObservedGeneration, cur.Generation)
		}
		return nil
	})
}
