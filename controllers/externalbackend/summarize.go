package externalbackend

import (
	"errors"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/publish"
	"github.com/backendslice/backendslice/providers"
	"k8s.io/apimachinery/pkg/api/meta"
)

// conflictRecheck is how often a Service conflict is looked at again: the
// Service that holds the name is not ours, so no watch tells when it goes.
const conflictRecheck = time.Minute

// terminalRecheck is how often a source that failed terminally is asked again.
const terminalRecheck = 5 * time.Minute

// accessRecheck is how often a source refused for its identity (AccessDenied,
// NoCredentials) is asked again: its last known endpoints are held, and
// they must follow the backend again soon once the identity is let in.
const accessRecheck = 15 * time.Second

// adoptedCondition says how an adoption goes; false when none is asked
// for (spec.service.adopt unset).
func adoptedCondition(a adoption) (metav1.Condition, bool) {
	switch {
	case !a.active:
		return metav1.Condition{}, false
	case a.done:
		return cond(v1alpha1.ConditionAdopted, true, v1alpha1.ReasonAdopted,
			"the Service is this backend's; no hand-written EndpointSlice or Endpoints is left"), true
	}
	return cond(v1alpha1.ConditionAdopted, false, v1alpha1.ReasonAdopting,
		"keeping "+strings.Join(a.waiting, "; ")), true
}

// reconcilingCondition is kstatus's Reconciling condition: True while an
// adoption waits for this backend's slices to carry what the hand-written
// objects publish, which the controller finishes by itself; false (the
// condition removed) otherwise, and whenever writing failed (Ready says
// why) or the adoption was refused (Stalled says why): kstatus reads the
// first of Reconciling and Stalled it finds.
func reconcilingCondition(a adoption, syncErr error) (metav1.Condition, bool) {
	if !a.active || a.done || syncErr != nil {
		return metav1.Condition{}, false
	}
	return cond(v1alpha1.ConditionReconciling, true, v1alpha1.ReasonAdopting,
		"handing the Service over: keeping "+strings.Join(a.waiting, "; ")), true
}

// probedCondition says what the probes did; false when nothing is probed.
func probedCondition(p probeOutcome) (metav1.Condition, bool) {
	c, ok := probedVerdict(p)
	if ok && p.limit != "" {
		c.Message += "; " + p.limit
	}
	return c, ok
}

// probedVerdict is the Probed condition before the limit note.
func probedVerdict(p probeOutcome) (metav1.Condition, bool) {
	switch {
	case !p.configured:
		return metav1.Condition{}, false
	case p.refused != "":
		msg := p.refused
		if p.err != nil {
			msg += "; " + p.err.Error()
		}
		return cond(v1alpha1.ConditionProbed, false, v1alpha1.ReasonProbePortNotAllowed, msg), true
	case p.err != nil:
		return cond(v1alpha1.ConditionProbed, false, v1alpha1.ReasonProbeUnavailable,
			p.err.Error()+"; that source's endpoints are published as it says until its probe can run"), true
	case p.FailedOpen:
		return cond(v1alpha1.ConditionProbed, false, v1alpha1.ReasonFailOpen, fmt.Sprintf(
			"every one of the %d endpoint(s) the sources call ready fails its probe: failOpen publishes them as the sources say (sending to all beats sending to none); check the backends, or the probe, from the controller's network",
			p.Failing)), true
	case p.Failing > 0 && p.Failing == p.Candidates:
		return cond(v1alpha1.ConditionProbed, false, v1alpha1.ReasonProbesFailing, fmt.Sprintf(
			"every one of the %d endpoint(s) the sources call ready fails its probe and failOpen is false: none is ready", p.Failing)), true
	}
	return cond(v1alpha1.ConditionProbed, true, v1alpha1.ReasonProbesPassing, fmt.Sprintf(
		"%d of %d probed endpoint(s) the sources call ready pass; those failing are published not ready", p.Candidates-p.Failing, p.Candidates)), true
}

// reasonOf is the condition of type t, or nil.
func reasonOf(xb *v1alpha1.ExternalBackend, t string) *metav1.Condition {
	return meta.FindStatusCondition(xb.Status.Conditions, t)
}

// statusFacts is what a reconcile found, reduced to what conditions depend on.
type statusFacts struct {
	suspended bool
	// wasReady is the Ready status before this reconcile.
	wasReady metav1.ConditionStatus
	specErr  error
	// sourceErrs are the failures of sources, by source name.
	sourceErrs map[string]*providers.Error
	// sourceOrder is the spec order of the failing sources.
	sourceOrder []string
	// fates say what became of what each failing source published, as
	// resolving decided; see fateOf.
	fates   map[string]fate
	dropped int
	// notServed is the message naming the families left out, or "".
	notServed string
	// nothingServed is true when the cluster serves none of the spec's IP families.
	nothingServed bool
	syncErr       error
	counts        v1alpha1.EndpointCounts
	slices        int32
	// limits name the controller's limits applied to the spec.
	limits []string
}

// statusPlan is what to write and whether to retry.
type statusPlan struct {
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

// factsOf reduces a report to an outcome.
func factsOf(suspended bool, pass passResult, wasReady metav1.ConditionStatus) statusFacts {
	facts := statusFacts{
		suspended:  suspended,
		wasReady:   wasReady,
		specErr:    pass.specErr,
		sourceErrs: map[string]*providers.Error{},
		fates:      pass.fates,
		dropped:    len(pass.Dropped),
		syncErr:    pass.syncErr,
		counts:     countEndpoints(pass.Endpoints),
		slices:     pass.slices,
		limits:     pass.limits,
	}
	if pass.NotServed.Total() > 0 {
		facts.notServed = notServedMessage(pass.NotServed, pass.served)
		facts.nothingServed = len(pass.Families) == 0
	}
	for _, r := range pass.results {
		if r.Err != nil {
			facts.sourceErrs[r.Name] = providers.AsError(r.Err)
			facts.sourceOrder = append(facts.sourceOrder, r.Name)
		}
	}
	return facts
}

// cond builds a condition of type t that is True when ok.
func cond(t string, ok bool, reason, msg string) metav1.Condition {
	s := metav1.ConditionFalse
	if ok {
		s = metav1.ConditionTrue
	}
	return metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg}
}

// summarize maps an statusFacts to conditions. It is pure so that every case
// is checked in a table.
func summarize(facts statusFacts) statusPlan {
	if facts.suspended {
		st := facts.wasReady
		if st == "" {
			st = metav1.ConditionUnknown
		}
		return statusPlan{final: true, removeStalled: true, conditions: []metav1.Condition{{
			Type: v1alpha1.ConditionReady, Status: st, Reason: v1alpha1.ReasonSuspended,
			Message: "spec.suspend is true: nothing is resolved or written, published endpoints stay as they are",
		}}}
	}
	if facts.specErr != nil {
		msg := facts.specErr.Error()
		return statusPlan{final: true, conditions: []metav1.Condition{
			cond(v1alpha1.ConditionResolved, false, v1alpha1.ReasonInvalidSpec, msg),
			cond(v1alpha1.ConditionReady, false, v1alpha1.ReasonInvalidSpec, msg),
			cond(v1alpha1.ConditionStalled, true, v1alpha1.ReasonInvalidSpec, msg),
		}}
	}

	if errors.Is(facts.syncErr, errRecreating) {
		// Nothing went wrong: the next pass creates the Service again.
		return statusPlan{}
	}

	resolved, resolveStalled, resolveRetry := resolvedCondition(facts)
	synced, recheck, syncRetry := syncedCondition(facts)
	ready := cond(v1alpha1.ConditionReady, true, v1alpha1.ReasonReady,
		fmt.Sprintf("%d of %d endpoint(s) ready in %d EndpointSlice(s)", facts.counts.Ready, facts.counts.Total, facts.slices))
	switch {
	case synced.Status != metav1.ConditionTrue:
		ready = cond(v1alpha1.ConditionReady, false, synced.Reason, synced.Message)
	case resolved.Status != metav1.ConditionTrue:
		ready = cond(v1alpha1.ConditionReady, false, resolved.Reason, resolved.Message)
	}
	v := statusPlan{
		conditions: []metav1.Condition{resolved, synced, ready},
		retry:      errors.Join(resolveRetry, syncRetry),
		recheck:    recheck,
	}
	// Stalled means retrying will not help: not while something is retried.
	switch {
	case v.retry != nil:
		v.removeStalled = true
	case synced.Reason == v1alpha1.ReasonServiceConflict || synced.Reason == v1alpha1.ReasonAdoptionRefused:
		v.conditions = append(v.conditions, cond(v1alpha1.ConditionStalled, true, synced.Reason, synced.Message))
	case resolveStalled:
		v.conditions = append(v.conditions, cond(v1alpha1.ConditionStalled, true, resolved.Reason, resolved.Message))
		// What a terminal failure depends on can change outside the spec
		// (an IAM policy, a deleted instance created again): look again,
		// slowly, and sooner for a refused identity, which is the usual
		// outage of a cloud provider (a policy or a credential rotated).
		v.recheck = terminalRecheck
		if resolved.Reason == v1alpha1.ReasonAccessDenied || resolved.Reason == v1alpha1.ReasonNoCredentials {
			v.recheck = accessRecheck
		}
	default:
		v.removeStalled = true
	}
	v.final = v.retry == nil
	return v
}

// resolvedCondition says how the sources answered; stalled when only
// terminal failures occurred, and a retry error when a transient one did.
// Each failing source's line says what became of what it published, so
// that a message never says endpoints are kept that were withdrawn.
func resolvedCondition(facts statusFacts) (c metav1.Condition, stalled bool, retry error) {
	var terminal, transient, retried []string
	var terminalReason string
	for _, name := range facts.sourceOrder {
		e := facts.sourceErrs[name]
		line := fmt.Sprintf("source %s: %s; %s", name, e.Error(), facts.fateOf(name).told(name))
		if !e.Terminal {
			transient = append(transient, line)
			if !errors.Is(e, errNoAnswerYet) {
				// A call still running wakes the backend when it answers.
				retried = append(retried, fmt.Sprintf("source %s: %s", name, e.Error()))
			}
			continue
		}
		terminal = append(terminal, line)
		if terminalReason == "" {
			terminalReason = e.Reason
		}
	}
	if len(retried) > 0 {
		retry = errors.New(strings.Join(retried, "; "))
	}
	failures := strings.Join(append(terminal, transient...), "; ")
	switch {
	case len(terminal) > 0:
		return cond(v1alpha1.ConditionResolved, false, terminalReason, failures), len(transient) == 0, retry
	case len(transient) > 0:
		return cond(v1alpha1.ConditionResolved, false, v1alpha1.ReasonSourceFailed, failures+"; retrying"), false, retry
	case facts.nothingServed:
		return cond(v1alpha1.ConditionResolved, false, v1alpha1.ReasonFamilyNotServed, facts.notServed), false, nil
	case facts.dropped > 0:
		// Refused addresses come first: they may be an attempt to aim the
		// Service somewhere it must not go.
		msg := fmt.Sprintf("%d address(es) not published, and withdrawn at once (not drained) where they were; status.dropped says why", facts.dropped)
		if facts.notServed != "" {
			msg += "; " + facts.notServed
		}
		return cond(v1alpha1.ConditionResolved, true, v1alpha1.ReasonAddressesDropped, msg), false, nil
	case facts.notServed != "":
		return cond(v1alpha1.ConditionResolved, true, v1alpha1.ReasonFamilyNotServed, facts.notServed), false, nil
	}
	return cond(v1alpha1.ConditionResolved, true, v1alpha1.ReasonResolved, "every source answered"), false, nil
}

// fate is what became of the endpoints a failing source published, as
// the status messages tell it.
type fate int

const (
	// fateKept: published as before (its last answer, or what the slices
	// record for it), for as long as the failure lasts.
	fateKept fate = iota + 1
	// fateWithdrawn: admission refused the source (a provider deleted or
	// narrowed, a namespace no longer admitted): what it published left
	// at once, not drained.
	fateWithdrawn
	// fateDrains: the backend is gone (or, with a consent tag, no longer
	// consents, which must look the same): what the source published
	// drains for the drain period, then leaves.
	fateDrains
	// fateEdited: the source was edited while failing: what its earlier
	// spec published drains.
	fateEdited
)

// told says the fate of source's endpoints in a message.
func (f fate) told(source string) string {
	switch f {
	case fateWithdrawn:
		return fmt.Sprintf("nothing is published for source %s: what it published was withdrawn at once, not drained", source)
	case fateDrains:
		return fmt.Sprintf("what source %s published drains for the drain period, then leaves", source)
	case fateEdited:
		return fmt.Sprintf("what source %s published for its earlier spec drains for the drain period, then leaves", source)
	}
	return fmt.Sprintf("what source %s published before stays published while it fails", source)
}

// fateOf is the fate of the endpoints of failing source name: as
// resolving recorded it, else as its failure implies (a refusal
// withdraws, a gone backend drains, any other failure keeps).
func (facts statusFacts) fateOf(name string) fate {
	if f, ok := facts.fates[name]; ok {
		return f
	}
	switch e := facts.sourceErrs[name]; {
	case e.Reason == v1alpha1.ReasonProviderNotAdmitted:
		return fateWithdrawn
	case e.Gone:
		return fateDrains
	}
	return fateKept
}

// syncedCondition says how writing the Service and slices went, when to look
// again without a failure (a conflict we cannot watch), and what to retry.
func syncedCondition(facts statusFacts) (c metav1.Condition, recheck time.Duration, retry error) {
	var conflict errServiceConflict
	var refused errAdoptionRefused
	switch {
	case errors.As(facts.syncErr, &conflict):
		return cond(v1alpha1.ConditionSynced, false, v1alpha1.ReasonServiceConflict, conflict.msg), conflictRecheck, nil
	case errors.As(facts.syncErr, &refused):
		return cond(v1alpha1.ConditionSynced, false, v1alpha1.ReasonAdoptionRefused, refused.msg), conflictRecheck, nil
	case errors.As(facts.syncErr, new(errRead)):
		return cond(v1alpha1.ConditionSynced, false, v1alpha1.ReasonReadFailed, facts.syncErr.Error()+"; retrying"), 0, facts.syncErr
	case facts.syncErr != nil:
		return cond(v1alpha1.ConditionSynced, false, v1alpha1.ReasonWriteFailed, facts.syncErr.Error()+"; retrying"), 0, facts.syncErr
	}
	msg := fmt.Sprintf("%d endpoint(s) in %d EndpointSlice(s)", facts.counts.Total, facts.slices)
	for _, l := range facts.limits {
		msg += "; " + l
	}
	return cond(v1alpha1.ConditionSynced, true, v1alpha1.ReasonSynced, msg), 0, nil
}

// readyOfTotal is what the ENDPOINTS printer column shows: the ready
// endpoints of those published, "1/2" while one of two drains.
func readyOfTotal(c v1alpha1.EndpointCounts) string {
	return fmt.Sprintf("%d/%d", c.Ready, c.Total)
}

// countEndpoints counts endpoints by family and condition.
func countEndpoints(eps []publish.Endpoint) v1alpha1.EndpointCounts {
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

// How many entries the status lists hold (the CRD's MaxItems): a status
// patch past them would be refused, and with it every other status change.
const (
	maxDropped  = 20
	maxDraining = 100
)

// capList keeps the first n entries: counts on status tell how many there are.
func capList[T any](l []T, n int) []T {
	if len(l) > n {
		return l[:n]
	}
	return l
}

// refused tells whether err is admission's refusal of a source.
func refused(err error) bool {
	e := providers.AsError(err)
	return e != nil && e.Reason == v1alpha1.ReasonProviderNotAdmitted
}

// refreshSuccessTimes sets lastSuccessTime to now for every source that
// answered in this pass, for a status that is written anyway: the time
// then costs no write of its own.
func refreshSuccessTimes(statuses []v1alpha1.SourceStatus, results []publish.SourceResult, now time.Time) {
	answered := map[string]bool{}
	for _, r := range results {
		answered[r.Name] = r.Err == nil
	}
	for i := range statuses {
		if answered[statuses[i].Name] {
			t := metav1.NewTime(now)
			statuses[i].LastSuccessTime = &t
		}
	}
}

// sourceStatuses is the per-source state: what each found, when it last
// answered, and its last error. A failing source keeps its last success
// time and count, and is marked stale.
func sourceStatuses(kinds providers.Kinds, prev []v1alpha1.SourceStatus, specs []v1alpha1.Source, results []publish.SourceResult, now time.Time) []v1alpha1.SourceStatus {
	old := map[string]v1alpha1.SourceStatus{}
	for _, s := range prev {
		old[s.Name] = s
	}
	out := make([]v1alpha1.SourceStatus, 0, len(results))
	for i, r := range results {
		s := old[r.Name]
		s.Name, s.Kind = r.Name, string(kinds.KindOf(specs[i]))
		switch {
		case r.Err != nil && refused(r.Err):
			// Nothing is kept of a source admission refuses.
			s.Stale, s.Endpoints, s.LastError = false, 0, r.Err.Error()
		case r.Err != nil:
			s.Stale, s.LastError = true, r.Err.Error()
		default:
			// Only a change is a reason to write: a time refreshed for its
			// own sake would make every resync, restart or leader change
			// write the status of every backend (7,413 patches, 100 s of
			// the API server's CPU, when a controller of 20,000 restarted).
			changed := s.Stale || s.LastError != "" || s.Endpoints != int32(len(r.Endpoints))
			if changed || s.LastSuccessTime == nil {
				t := metav1.NewTime(now)
				s.LastSuccessTime = &t
			}
			s.Endpoints, s.Stale, s.LastError = int32(len(r.Endpoints)), false, ""
		}
		out = append(out, s)
	}
	return out
}
