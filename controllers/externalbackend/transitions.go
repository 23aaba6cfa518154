package externalbackend

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backendslice/backendslice/api/v1alpha1"
)

// notice is an Event that a change of status tells.
type notice struct {
	eventType, reason, action, note string
}

// transitionNotices are the Events that the change of status from before
// to after tells, one for each transition a user watches:
//   - a source's BackendProvider admits it again (ProviderAdmitted);
//   - Probed changes, under its own reason;
//   - Ready changes (changedWorthTelling), under its own reason: its
//     status or reason, or the message of a failure;
//   - the Service has ready endpoints, for the first time or again
//     (Published), or none any more (NoReadyEndpoints).
//
// Each transition is told once, by the event that says most: a recovery
// of Ready that ProviderAdmitted or Published tells is not told again, and
// nor is a loss of every ready endpoint that a failing Ready or Probed
// explains.
func transitionNotices(before, after *v1alpha1.ExternalBackend) []notice {
	out := admissionNotices(before, after)
	admitted := len(out) > 0
	wasReady, nowReady := before.Status.Endpoints.Ready, after.Status.Endpoints.Ready
	published := wasReady == 0 && nowReady > 0
	failureTold := false
	if was, now := reasonOf(before, v1alpha1.ConditionProbed), reasonOf(after, v1alpha1.ConditionProbed); changedWorthTelling(was, now, false) {
		out = append(out, notice{eventType(now), now.Reason, "Probe", now.Message})
		failureTold = now.Status != metav1.ConditionTrue
	}
	was, now := reasonOf(before, v1alpha1.ConditionReady), reasonOf(after, v1alpha1.ConditionReady)
	// A new message is news for a failure (another source failing), not
	// for Ready True, whose message counts endpoints: Published and
	// NoReadyEndpoints tell the counts that matter.
	failing := now != nil && now.Status != metav1.ConditionTrue
	if changedWorthTelling(was, now, failing) && (failing || !published && !admitted) {
		out = append(out, notice{eventType(now), now.Reason, "Reconcile", now.Message})
		failureTold = failureTold || failing
	}
	switch {
	case published:
		out = append(out, notice{corev1.EventTypeNormal, v1alpha1.ReasonPublished, "Publish", fmt.Sprintf(
			"Service %s has %d ready endpoint(s) of %d, in %d EndpointSlice(s)",
			after.Status.ServiceName, nowReady, after.Status.Endpoints.Total, after.Status.Slices)})
	case wasReady > 0 && nowReady == 0 && !failureTold:
		out = append(out, notice{corev1.EventTypeWarning, v1alpha1.ReasonNoReadyEndpoints, "Publish", fmt.Sprintf(
			"Service %s has no ready endpoint left of %d published: the sources call them unhealthy or their probes fail (status.endpoints)",
			after.Status.ServiceName, after.Status.Endpoints.Total)})
	}
	return out
}

// admissionNotices tell each source that its BackendProvider refused in
// before and admits in after. A source new in after, or admitted in both,
// tells nothing: Published says when its endpoints are served.
func admissionNotices(before, after *v1alpha1.ExternalBackend) []notice {
	refusedBefore := map[string]bool{}
	for _, s := range before.Status.Sources {
		refusedBefore[s.Name] = refusedStatus(s)
	}
	var out []notice
	for _, s := range after.Status.Sources {
		if !refusedBefore[s.Name] || refusedStatus(s) {
			continue
		}
		through := "(it names no BackendProvider)"
		for _, src := range after.Spec.Sources {
			if src.Name == s.Name && src.ProviderRef != nil {
				through = fmt.Sprintf("by BackendProvider %s", src.ProviderRef.Name)
			}
		}
		out = append(out, notice{corev1.EventTypeNormal, v1alpha1.ReasonProviderAdmitted, "Admit",
			fmt.Sprintf("source %s is admitted %s: it is resolved again, and what it finds published", s.Name, through)})
	}
	return out
}

// refusedStatus tells whether a source's status shows admission's refusal:
// sourceStatuses writes a refused source with its error and not stale
// (nothing of it is kept), any other failing source stale.
func refusedStatus(s v1alpha1.SourceStatus) bool {
	return s.LastError != "" && !s.Stale
}
