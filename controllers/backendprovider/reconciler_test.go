package backendprovider

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backendslice/backendslice/api/v1alpha1"
)

// TestStalledFollowsReady: every False Ready the controller writes is
// Stalled too, with its reason, message and generation, so that kstatus
// reads the provider as Failed; a True one is not.
func TestStalledFollowsReady(t *testing.T) {
	for _, reason := range []string{v1alpha1.ReasonInvalidProvider, v1alpha1.ReasonSecretNotFound,
		v1alpha1.ReasonConnectionFailed, v1alpha1.ReasonUnsupportedProtocol} {
		ready := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: reason, Message: "why " + reason, ObservedGeneration: 4}
		s, ok := stalledCondition(ready)
		want := metav1.Condition{Type: v1alpha1.ConditionStalled, Status: metav1.ConditionTrue, Reason: reason, Message: "why " + reason, ObservedGeneration: 4}
		if !ok || s != want {
			t.Errorf("Ready False/%s: Stalled %+v (%v), want %+v", reason, s, ok, want)
		}
	}
	ready := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonProviderReady, ObservedGeneration: 4}
	if s, ok := stalledCondition(ready); ok {
		t.Errorf("Ready True: Stalled %+v, want none", s)
	}
}
