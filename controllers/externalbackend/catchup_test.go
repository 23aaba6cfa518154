package externalbackend

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	"github.com/backendslice/backendslice/api/v1alpha1"
)

func TestOnlyCatchUp(t *testing.T) {
	// base is a status as 0.2.0 wrote it: no readyEndpoints.
	base := func() *v1alpha1.ExternalBackendStatus {
		return &v1alpha1.ExternalBackendStatus{
			ObservedGeneration: 3,
			Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue,
				Reason: v1alpha1.ReasonSynced, Message: "3 endpoints published", ObservedGeneration: 3}},
			Endpoints: v1alpha1.EndpointCounts{Total: 3, Ready: 3, Serving: 3, IPv4: 3},
			Slices:    1,
			Sources:   []v1alpha1.SourceStatus{{Name: "vms", Kind: "static", Endpoints: 3}},
		}
	}
	for _, tc := range []struct {
		name   string
		change func(*v1alpha1.ExternalBackendStatus)
		want   bool
	}{
		{"readyEndpoints filled in", func(s *v1alpha1.ExternalBackendStatus) { s.ReadyEndpoints = "3/3" }, true},
		{"a message reworded", func(s *v1alpha1.ExternalBackendStatus) { s.Conditions[0].Message = "published 3 endpoints" }, true},
		{"both", func(s *v1alpha1.ExternalBackendStatus) {
			s.ReadyEndpoints = "3/3"
			s.Conditions[0].Message = "published 3 endpoints"
		}, true},
		{"nothing", func(*v1alpha1.ExternalBackendStatus) {}, true},
		{"a count", func(s *v1alpha1.ExternalBackendStatus) {
			s.ReadyEndpoints = "2/3"
			s.Endpoints.Ready = 2
		}, false},
		{"observedGeneration", func(s *v1alpha1.ExternalBackendStatus) { s.ObservedGeneration = 4 }, false},
		{"a condition's generation", func(s *v1alpha1.ExternalBackendStatus) { s.Conditions[0].ObservedGeneration = 4 }, false},
		{"a condition's status", func(s *v1alpha1.ExternalBackendStatus) { s.Conditions[0].Status = metav1.ConditionFalse }, false},
		{"a condition's reason", func(s *v1alpha1.ExternalBackendStatus) { s.Conditions[0].Reason = v1alpha1.ReasonSourceFailed }, false},
		{"a condition more", func(s *v1alpha1.ExternalBackendStatus) {
			s.Conditions = append(s.Conditions, metav1.Condition{Type: v1alpha1.ConditionStalled, Status: metav1.ConditionTrue})
		}, false},
		{"a source's error", func(s *v1alpha1.ExternalBackendStatus) { s.Sources[0].LastError = "timeout" }, false},
		{"slices", func(s *v1alpha1.ExternalBackendStatus) { s.Slices = 2 }, false},
		{"draining", func(s *v1alpha1.ExternalBackendStatus) {
			s.Draining = []v1alpha1.DrainingEndpoint{{Address: "192.0.2.1"}}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, after := base(), base()
			tc.change(after)
			if got := onlyCatchUp(before, after); got != tc.want {
				t.Errorf("onlyCatchUp = %t, want %t", got, tc.want)
			}
			if before.ReadyEndpoints != "" || before.Conditions[0].Message != "3 endpoints published" {
				t.Errorf("onlyCatchUp changed its argument: %+v", before)
			}
		})
	}
}

func TestTurnOf(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	const slotIn = 400 * time.Millisecond
	held := now.Add(catchUpDelay + slotIn)
	reserve := func() time.Duration { return slotIn }
	for _, tc := range []struct {
		name           string
		changed, catch bool
		slot           time.Time
		requeueAfter   time.Duration
		want           statusTurn
	}{
		{name: "nothing to write", want: statusTurn{}},
		{name: "a change is written at once", changed: true, requeueAfter: time.Minute,
			want: statusTurn{write: true, requeueAfter: time.Minute}},
		{name: "a catch-up takes a slot and comes back at it, last",
			changed: true, catch: true,
			want: statusTurn{slot: held, requeueAfter: catchUpDelay + slotIn, priority: ptr.To(catchUpPriority)}},
		{name: "a catch-up behind a poll that comes first keeps its priority for the poll",
			changed: true, catch: true, requeueAfter: 500 * time.Millisecond,
			want: statusTurn{slot: held, requeueAfter: 500 * time.Millisecond}},
		{name: "a catch-up before its slot is held again",
			changed: true, catch: true, slot: now.Add(time.Second), requeueAfter: time.Minute,
			want: statusTurn{slot: now.Add(time.Second), requeueAfter: time.Second, priority: ptr.To(catchUpPriority)}},
		{name: "a catch-up at its slot is written, and the polls go back to the initial list's priority",
			changed: true, catch: true, slot: now, requeueAfter: time.Minute,
			want: statusTurn{write: true, requeueAfter: time.Minute, priority: ptr.To(handler.LowPriority)}},
		{name: "a change written with a held catch-up ends the hold",
			changed: true, slot: now.Add(time.Second),
			want: statusTurn{write: true, priority: ptr.To(handler.LowPriority)}},
		{name: "a held catch-up that became nothing ends",
			slot: now.Add(time.Second), requeueAfter: time.Minute,
			want: statusTurn{requeueAfter: time.Minute, priority: ptr.To(handler.LowPriority)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := turnOf(now, tc.changed, tc.catch, tc.slot, reserve, tc.requeueAfter)
			if got.write != tc.want.write || !got.slot.Equal(tc.want.slot) || got.requeueAfter != tc.want.requeueAfter ||
				ptr.Deref(got.priority, 1) != ptr.Deref(tc.want.priority, 1) {
				t.Errorf("turnOf = %+v (priority %v), want %+v (priority %v)", got, ptr.Deref(got.priority, 1), tc.want, ptr.Deref(tc.want.priority, 1))
			}
		})
	}
}

func TestCatchUpBucketSpacesSlots(t *testing.T) {
	r := &Reconciler{catchUps: newCatchUpBuckets(25)}
	var last time.Duration
	for i := range 5 {
		d := r.catchUpSlot("busy")
		if i > 0 && d-last < 30*time.Millisecond {
			t.Fatalf("slot %d is %s after slot %d, want the bucket's 40ms apart", i, d-last, i-1)
		}
		last = d
	}
	// Another namespace's first catch-up does not wait behind them.
	if d := r.catchUpSlot("quiet"); d != 0 {
		t.Fatalf("another namespace's first slot is %s away, want now", d)
	}
	unbounded := &Reconciler{catchUps: newCatchUpBuckets(0)}
	for range 5 {
		if d := unbounded.catchUpSlot("busy"); d != 0 {
			t.Fatalf("an unbounded bucket gave a slot %s away", d)
		}
	}
}
