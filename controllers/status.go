package controllers

import (
	"errors"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/controllers/desired"
	"github.com/backendslice/backendslice/providers"
)

// conflictRecheck is how often a Service conflict is looked at again: the
// Service that holds the name is not ours, so no watch tells when it goes.
const conflictRecheck = time.Minute

// terminalRecheck is how often a source that failed terminally is asked again.
const terminalRecheck = 5 * time.Minute

// requeueSoon is the wait before a pass that found the cache behind the API
// server looks again: long enough for the watch to deliver what it missed.
const requeueSoon = 50 * time.Millisecond

// outcome is what a reconcile found, reduced to what conditions depend on.
type outcome struct {
	suspended bool
	// wasReady is the Ready status before this reconcile.
	wasReady metav1.ConditionStatus
	specErr  error
	// sourceErrs are the failures of sources, by source name.
	sourceErrs map[string]*providers.Error
	// sourceOrder is the spec order of the failing sources.
	sourceOrder []string
	dropped     int
	syncErr     error
	counts      v1alpha1.EndpointCounts
	slices      int32
}

// verdict is what to write and whether to retry.
type verdict struct {
	conditions []metav1.Condition
	// removeStalled drops the Stalled condition: nothing is terminally wrong.
	removeStalled bool
	// final means this generation's spec was handled, well or terminally
	// badly, so observedGeneration may say so.
	final bool
	// retry is a transient failure to return, so the work queue backs off.
	retry error
	// recheck asks for a later look although nothing transient failed.
	recheck time.Duration
}

// outcomeOf reduces the reconcile state to an outcome.
func outcomeOf(st *reconcileState, wasReady metav1.ConditionStatus) outcome {
	o := outcome{
		suspended:  st.xb.Spec.Suspend,
		wasReady:   wasReady,
		specErr:    st.specErr,
		sourceErrs: map[string]*providers.Error{},
		dropped:    len(st.dropped),
		syncErr:    st.syncErr,
		counts:     countEndpoints(st.endpoints),
		slices:     st.slices,
	}
	for _, r := range st.results {
		if r.Err != nil {
			o.sourceErrs[r.Name] = providers.AsError(r.Err)
			o.sourceOrder = append(o.sourceOrder, r.Name)
		}
	}
	return o
}

// cond builds a condition of type t that is True when ok.
func cond(t string, ok bool, reason, msg string) metav1.Condition {
	s := metav1.ConditionFalse
	if ok {
		s = metav1.ConditionTrue
	}
	return metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg}
}

// summarize maps an outcome to conditions. It is pure so that every case
// is checked in a table.
func summarize(o outcome) verdict {
	if o.suspended {
		st := o.wasReady
		if st == "" {
			st = metav1.ConditionUnknown
		}
		return verdict{final: true, removeStalled: true, conditions: []metav1.Condition{{
			Type: v1alpha1.ConditionReady, Status: st, Reason: v1alpha1.ReasonSuspended,
			Message: "spec.suspend is true: nothing is resolved or written, published endpoints stay as they are",
		}}}
	}
	if o.specErr != nil {
		msg := o.specErr.Error()
		return verdict{final: true, conditions: []metav1.Condition{
			cond(v1alpha1.ConditionResolved, false, v1alpha1.ReasonInvalidSpec, msg),
			cond(v1alpha1.ConditionReady, false, v1alpha1.ReasonInvalidSpec, msg),
			cond(v1alpha1.ConditionStalled, true, v1alpha1.ReasonInvalidSpec, msg),
		}}
	}

	if errors.Is(o.syncErr, errRequeue) {
		// Nothing went wrong: another pass decides, with a fresher cache.
		return verdict{recheck: requeueSoon}
	}

	resolved, resolveStalled, resolveRetry := resolvedCondition(o)
	synced, recheck, syncRetry := syncedCondition(o)
	ready := cond(v1alpha1.ConditionReady, true, v1alpha1.ReasonReady,
		fmt.Sprintf("%d of %d endpoint(s) ready in %d EndpointSlice(s)", o.counts.Ready, o.counts.Total, o.slices))
	switch {
	case synced.Status != metav1.ConditionTrue:
		ready = cond(v1alpha1.ConditionReady, false, synced.Reason, synced.Message)
	case resolved.Status != metav1.ConditionTrue:
		ready = cond(v1alpha1.ConditionReady, false, resolved.Reason, resolved.Message)
	}
	v := verdict{
		conditions: []metav1.Condition{resolved, synced, ready},
		retry:      errors.Join(resolveRetry, syncRetry),
		recheck:    recheck,
	}
	// Stalled means retrying will not help: not while something is retried.
	switch {
	case v.retry != nil:
		v.removeStalled = true
	case synced.Reason == v1alpha1.ReasonServiceConflict:
		v.conditions = append(v.conditions, cond(v1alpha1.ConditionStalled, true, synced.Reason, synced.Message))
	case resolveStalled:
		v.conditions = append(v.conditions, cond(v1alpha1.ConditionStalled, true, resolved.Reason, resolved.Message))
		// What a terminal failure depends on can change outside the spec
		// (an IAM policy, a deleted instance created again): look again, slowly.
		v.recheck = terminalRecheck
	default:
		v.removeStalled = true
	}
	v.final = v.retry == nil
	return v
}

// resolvedCondition says how the sources answered; stalled when only
// terminal failures occurred, and a retry error when a transient one did.
func resolvedCondition(o outcome) (c metav1.Condition, stalled bool, retry error) {
	var terminal, transient []string
	var terminalReason string
	for _, name := range o.sourceOrder {
		e := o.sourceErrs[name]
		line := fmt.Sprintf("source %s: %s", name, e.Error())
		if !e.Terminal {
			transient = append(transient, line)
			continue
		}
		terminal = append(terminal, line)
		if terminalReason == "" {
			terminalReason = e.Reason
		}
	}
	if len(transient) > 0 {
		retry = errors.New(strings.Join(transient, "; "))
	}
	failures := strings.Join(append(terminal, transient...), "; ")
	switch {
	case len(terminal) > 0:
		return cond(v1alpha1.ConditionResolved, false, terminalReason, failures+"; "+keptOrDrained(o)),
			len(transient) == 0, retry
	case len(transient) > 0:
		return cond(v1alpha1.ConditionResolved, false, v1alpha1.ReasonSourceFailed,
			failures+"; endpoints published before are kept, retrying"), false, retry
	case o.dropped > 0:
		return cond(v1alpha1.ConditionResolved, true, v1alpha1.ReasonAddressesDropped,
			fmt.Sprintf("%d address(es) not published; status.dropped says why", o.dropped)), false, nil
	}
	return cond(v1alpha1.ConditionResolved, true, v1alpha1.ReasonResolved, "every source answered"), false, nil
}

// keptOrDrained says what happens to the endpoints of terminally failing
// sources: a gone backend's drain, any other's are kept.
func keptOrDrained(o outcome) string {
	for _, e := range o.sourceErrs {
		if e.Terminal && !e.Gone {
			return "endpoints published before are kept"
		}
	}
	return "its endpoints drain and leave"
}

// syncedCondition says how writing the Service and slices went, when to look
// again without a failure (a conflict we cannot watch), and what to retry.
func syncedCondition(o outcome) (c metav1.Condition, recheck time.Duration, retry error) {
	var conflict errServiceConflict
	switch {
	case errors.As(o.syncErr, &conflict):
		return cond(v1alpha1.ConditionSynced, false, v1alpha1.ReasonServiceConflict, conflict.msg), conflictRecheck, nil
	case o.syncErr != nil:
		return cond(v1alpha1.ConditionSynced, false, v1alpha1.ReasonWriteFailed, o.syncErr.Error()+"; retrying"), 0, o.syncErr
	}
	return cond(v1alpha1.ConditionSynced, true, v1alpha1.ReasonSynced,
		fmt.Sprintf("%d endpoint(s) in %d EndpointSlice(s)", o.counts.Total, o.slices)), 0, nil
}

// countEndpoints counts endpoints by family and condition.
func countEndpoints(eps []desired.Endpoint) v1alpha1.EndpointCounts {
	var c v1alpha1.EndpointCounts
	for _, e := range eps {
		c.Total++
		if e.Ready() {
			c.Ready++
		}
		if e.Serving {
			c.Serving++
		}
		if e.Terminating {
			c.Terminating++
		}
		switch e.AddressType {
		case "IPv4":
			c.IPv4++
		case "IPv6":
			c.IPv6++
		case "FQDN":
			c.FQDN++
		}
	}
	return c
}

// maxDropped is how many dropped addresses status lists.
const maxDropped = 20

// capDropped keeps status small when a source returns many bad addresses.
func capDropped(d []v1alpha1.DroppedAddress) []v1alpha1.DroppedAddress {
	if len(d) > maxDropped {
		return d[:maxDropped]
	}
	return d
}

// successRefresh is how stale lastSuccessTime may grow while nothing else
// about a source changes: refreshing it on every resync would write status
// on every resync.
const successRefresh = 5 * time.Minute

// sourceStatuses is the per-source state: what each found, when it last
// answered, and its last error. A failing source keeps its last success
// time and count, and is marked stale.
func sourceStatuses(prev []v1alpha1.SourceStatus, specs []v1alpha1.Source, results []desired.SourceResult, now time.Time) []v1alpha1.SourceStatus {
	old := map[string]v1alpha1.SourceStatus{}
	for _, s := range prev {
		old[s.Name] = s
	}
	out := make([]v1alpha1.SourceStatus, 0, len(results))
	for i, r := range results {
		s := old[r.Name]
		s.Name, s.Kind = r.Name, string(providers.KindOf(specs[i]))
		if r.Err != nil {
			s.Stale, s.LastError = true, r.Err.Error()
		} else {
			changed := s.Stale || s.LastError != "" || s.Endpoints != int32(len(r.Endpoints))
			if changed || s.LastSuccessTime == nil || now.Sub(s.LastSuccessTime.Time) >= successRefresh {
				t := metav1.NewTime(now)
				s.LastSuccessTime = &t
			}
			s.Endpoints, s.Stale, s.LastError = int32(len(r.Endpoints)), false, ""
		}
		out = append(out, s)
	}
	return out
}
