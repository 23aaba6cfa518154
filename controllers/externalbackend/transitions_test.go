package externalbackend

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backendslice/backendslice/api/v1alpha1"
)

// backendStatus is a status of backend "db" through BackendProvider
// "shared": ready endpoints of total, and the Ready condition (status,
// reason, message); the options change it further.
func backendStatus(ready, total int32, st metav1.ConditionStatus, reason, msg string, options ...func(*v1alpha1.ExternalBackend)) *v1alpha1.ExternalBackend {
	xb := &v1alpha1.ExternalBackend{}
	xb.Name = "db"
	xb.Spec.Sources = []v1alpha1.Source{{Name: "rds", ProviderRef: &v1alpha1.ProviderReference{Name: "shared"}}}
	xb.Status.ServiceName = "db"
	xb.Status.Endpoints = v1alpha1.EndpointCounts{Ready: ready, Total: total}
	xb.Status.Sources = []v1alpha1.SourceStatus{{Name: "rds", Endpoints: total}}
	xb.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: st, Reason: reason, Message: msg}}
	for _, o := range options {
		o(xb)
	}
	return xb
}

// refusedSource marks source rds refused by admission, as sourceStatuses writes it.
func refusedSource(xb *v1alpha1.ExternalBackend) {
	xb.Status.Sources[0] = v1alpha1.SourceStatus{Name: "rds", LastError: "BackendProvider \"shared\" does not admit namespace payments"}
}

// staleSource marks source rds failing, its endpoints kept.
func staleSource(xb *v1alpha1.ExternalBackend) {
	xb.Status.Sources[0].Stale, xb.Status.Sources[0].LastError = true, "timeout"
}

// probed sets the Probed condition.
func probed(st metav1.ConditionStatus, reason string) func(*v1alpha1.ExternalBackend) {
	return func(xb *v1alpha1.ExternalBackend) {
		xb.Status.Conditions = append(xb.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionProbed, Status: st, Reason: reason, Message: reason})
	}
}

// withoutStatus is a backend never reconciled.
func withoutStatus(xb *v1alpha1.ExternalBackend) { xb.Status = v1alpha1.ExternalBackendStatus{} }

func TestTransitionNotices(t *testing.T) {
	const (
		T, F = metav1.ConditionTrue, metav1.ConditionFalse
		rdy  = v1alpha1.ReasonReady
		nap  = v1alpha1.ReasonProviderNotAdmitted
		sf   = v1alpha1.ReasonSourceFailed
	)
	for _, tc := range []struct {
		name          string
		before, after *v1alpha1.ExternalBackend
		// want are the notices' type/reason, in order.
		want []string
	}{{
		name:   "first publication",
		before: backendStatus(0, 0, T, rdy, "", withoutStatus),
		after:  backendStatus(2, 2, T, rdy, "2 of 2"),
		want:   []string{"Normal/Published"},
	}, {
		name:   "first pass with nothing ready",
		before: backendStatus(0, 0, T, rdy, "", withoutStatus),
		after:  backendStatus(0, 2, T, rdy, "0 of 2"),
	}, {
		name:   "quiet: a pass that changed nothing",
		before: backendStatus(2, 2, T, rdy, "2 of 2"),
		after:  backendStatus(2, 2, T, rdy, "2 of 2"),
	}, {
		name:   "counts change while some stay ready",
		before: backendStatus(2, 2, T, rdy, "2 of 2"),
		after:  backendStatus(1, 3, T, rdy, "1 of 3"),
	}, {
		name:   "every endpoint unhealthy: Ready stays True",
		before: backendStatus(2, 2, T, rdy, "2 of 2"),
		after:  backendStatus(0, 2, T, rdy, "0 of 2"),
		want:   []string{"Warning/NoReadyEndpoints"},
	}, {
		name:   "every probe fails: Probed tells it",
		before: backendStatus(2, 2, T, rdy, "2 of 2", probed(T, v1alpha1.ReasonProbesPassing)),
		after:  backendStatus(0, 2, T, rdy, "0 of 2", probed(F, v1alpha1.ReasonProbesFailing)),
		want:   []string{"Warning/ProbesFailing"},
	}, {
		name:   "ready again",
		before: backendStatus(0, 2, T, rdy, "0 of 2"),
		after:  backendStatus(1, 2, T, rdy, "1 of 2"),
		want:   []string{"Normal/Published"},
	}, {
		name:   "revoked: Ready's warning tells it, and that nothing is left",
		before: backendStatus(2, 2, T, rdy, "2 of 2"),
		after:  backendStatus(0, 0, F, nap, "source rds: refused; withdrawn", refusedSource),
		want:   []string{"Warning/ProviderNotAdmitted"},
	}, {
		name:   "refused again for another reason: a new message",
		before: backendStatus(0, 0, F, nap, "source rds: not admitted", refusedSource),
		after:  backendStatus(0, 0, F, nap, "source rds: does not exist", refusedSource),
		want:   []string{"Warning/ProviderNotAdmitted"},
	}, {
		name:   "admitted: one event for the admission, one for the Service, none for Ready",
		before: backendStatus(0, 0, F, nap, "source rds: refused", refusedSource),
		after:  backendStatus(2, 2, T, rdy, "2 of 2"),
		want:   []string{"Normal/ProviderAdmitted", "Normal/Published"},
	}, {
		name:   "admitted but failing",
		before: backendStatus(0, 0, F, nap, "source rds: refused", refusedSource),
		after:  backendStatus(0, 0, F, sf, "source rds: timeout", staleSource),
		want:   []string{"Normal/ProviderAdmitted", "Warning/SourceFailed"},
	}, {
		name:   "a failing source keeps its endpoints: only Ready",
		before: backendStatus(2, 2, T, rdy, "2 of 2"),
		after:  backendStatus(2, 2, F, sf, "source rds: timeout", staleSource),
		want:   []string{"Warning/SourceFailed"},
	}, {
		name:   "recovered with endpoints kept throughout: Ready's recovery",
		before: backendStatus(2, 2, F, sf, "source rds: timeout", staleSource),
		after:  backendStatus(2, 2, T, rdy, "2 of 2"),
		want:   []string{"Normal/Ready"},
	}, {
		name:   "a new source refused at once is no revocation",
		before: backendStatus(2, 2, T, rdy, "2 of 2"),
		after: backendStatus(2, 2, F, nap, "source other: refused", func(xb *v1alpha1.ExternalBackend) {
			xb.Status.Sources = append(xb.Status.Sources, v1alpha1.SourceStatus{Name: "other", LastError: "refused"})
		}),
		want: []string{"Warning/ProviderNotAdmitted"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, n := range transitionNotices(tc.before, tc.after) {
				got = append(got, n.eventType+"/"+n.reason)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("notices %q, want %q", got, tc.want)
			}
		})
	}
}

func TestTransitionNotesNameWhat(t *testing.T) {
	admitted := transitionNotices(backendStatus(0, 0, metav1.ConditionFalse, v1alpha1.ReasonProviderNotAdmitted, "refused", refusedSource),
		backendStatus(3, 4, metav1.ConditionTrue, v1alpha1.ReasonReady, "3 of 4", func(xb *v1alpha1.ExternalBackend) { xb.Status.Slices = 1 }))
	want := []string{
		"source rds is admitted by BackendProvider shared: it is resolved again, and what it finds published",
		"Service db has 3 ready endpoint(s) of 4, in 1 EndpointSlice(s)",
	}
	for i, n := range admitted {
		if i >= len(want) || n.note != want[i] {
			t.Errorf("note %d: %q, want %q", i, n.note, want)
		}
	}
	if len(admitted) != len(want) {
		t.Errorf("%d notices, want %d", len(admitted), len(want))
	}
}
