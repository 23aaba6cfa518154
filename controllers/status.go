package controllers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/controllers/desired"
	"github.com/backendslice/backendslice/providers"
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

// report is what one reconcile found and did, as the steps returned it:
// status, events and the next look are decided from it alone.
type report struct {
	// specErr is set when the spec is invalid; nothing was resolved or written.
	specErr error
	// results of each source, in spec order.
	results []desired.SourceResult
	// publication is what was to be published.
	publication
	// slices is how many slices are ours after the writes.
	slices int32
	// syncErr is set when reading or writing the Service or slices
	// failed; a failed read is an errRead.
	syncErr error
	// served are the families the cluster serves, for messages.
	served sets.Set[corev1.IPFamily]
	// requeueAfter is when a provider, a drain or the coalescing window
	// wants another look.
	requeueAfter time.Duration
}

// finish writes status and events from the report, patches status once,
// and says when to look again: transient failures return an error (retried
// with backoff), terminal ones wait for a change.
func (r *Reconciler) finish(ctx context.Context, before, xb *v1alpha1.ExternalBackend, rep report) (time.Duration, error) {
	wasReady := metav1.ConditionStatus("")
	if c := meta.FindStatusCondition(before.Status.Conditions, v1alpha1.ConditionReady); c != nil {
		wasReady = c.Status
	}
	out := summarize(outcomeOf(xb.Spec.Suspend, rep, wasReady))
	xb.Status.ServiceName = serviceName(xb)
	if !xb.Spec.Suspend && rep.specErr == nil {
		xb.Status.Sources = sourceStatuses(before.Status.Sources, xb.Spec.Sources, rep.results, r.Clock.Now())
		if rep.syncErr == nil {
			xb.Status.Endpoints = countEndpoints(rep.endpoints)
			xb.Status.Endpoints.NotServed = int32(rep.notServed.Total())
			xb.Status.Endpoints.ProbeFailing = int32(rep.probes.Failing)
			xb.Status.Dropped = capList(rep.dropped, maxDropped)
			xb.Status.Draining = capList(rep.draining, maxDraining)
			xb.Status.Slices = rep.slices
		}
	}
	for _, c := range out.conditions {
		c.ObservedGeneration = xb.Generation
		meta.SetStatusCondition(&xb.Status.Conditions, c)
	}
	if out.removeStalled {
		meta.RemoveStatusCondition(&xb.Status.Conditions, v1alpha1.ConditionStalled)
	}
	if c, ok := probedCondition(rep.probes); ok && !xb.Spec.Suspend && rep.specErr == nil {
		c.ObservedGeneration = xb.Generation
		meta.SetStatusCondition(&xb.Status.Conditions, c)
	} else if !ok {
		meta.RemoveStatusCondition(&xb.Status.Conditions, v1alpha1.ConditionProbed)
	}
	if out.final {
		xb.Status.ObservedGeneration = xb.Generation
	}
	log.FromContext(ctx).V(1).Info("reconciled", "endpoints", xb.Status.Endpoints.Total,
		"ready", xb.Status.Endpoints.Ready, "slices", xb.Status.Slices, "requeueAfter", rep.requeueAfter)
	r.announce(before, xb)
	r.Metrics.endpoints(xb)
	if err := r.patchStatus(ctx, before, xb, rep.results); err != nil {
		return 0, errors.Join(out.retry, fmt.Errorf("patching status: %w", err))
	}
	return earliest(rep.requeueAfter, out.recheck), out.retry
}

// patchStatus sends the status change, if there is one: a reconcile that
// changed nothing, such as the one our own slice writes trigger, costs the
// API server no request. A status written anyway carries the sources'
// success times of this pass (results). It has a deadline of its own, so
// that a pass that ran out of time still reports why.
func (r *Reconciler) patchStatus(ctx context.Context, before, after *v1alpha1.ExternalBackend, results []desired.SourceResult) error {
	if equality.Semantic.DeepEqual(before.Status, after.Status) {
		return nil
	}
	refreshSuccessTimes(after.Status.Sources, results, r.Clock.Now())
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), statusPatchTimeout)
	defer cancel()
	if err := r.Status().Patch(ctx, after, client.MergeFrom(before)); err != nil {
		return client.IgnoreNotFound(err)
	}
	r.written.set(client.ObjectKeyFromObject(after), seenStatus(after))
	return nil
}

// statusSeen is a backend's status as this process last wrote or read it
// live: its resourceVersion then, and a digest of the status, so that
// thousands of backends cost a few bytes each.
type statusSeen struct {
	resourceVersion string
	digest          uint64
}

// seenStatus is xb's statusSeen.
func seenStatus(xb *v1alpha1.ExternalBackend) statusSeen {
	return statusSeen{resourceVersion: xb.ResourceVersion, digest: statusDigest(&xb.Status)}
}

// shownBy tells whether a copy of the backend shows this status: it is at
// that version, or at another one (a spec edit since) with the same status.
func (s statusSeen) shownBy(xb *v1alpha1.ExternalBackend) bool {
	return s.resourceVersion == xb.ResourceVersion || s.digest == statusDigest(&xb.Status)
}

// statusDigest hashes the status as the API server stores it (JSON, times
// in seconds), so that a copy read back compares equal to the one written.
func statusDigest(st *v1alpha1.ExternalBackendStatus) uint64 {
	h := fnv.New64a()
	// Encoding a struct of plain fields cannot fail; the digest of a
	// failure would only cost a live read.
	_ = json.NewEncoder(h).Encode(st)
	return h.Sum64()
}

// statusPatchTimeout bounds the status patch that ends every reconcile.
const statusPatchTimeout = 10 * time.Second

// announce emits an event when the Ready or Probed condition, or the set
// of dropped addresses, changes, so that each is told once, not at every
// retry; a backend that is Ready from its first pass gets none.
func (r *Reconciler) announce(before, after *v1alpha1.ExternalBackend) {
	if len(after.Status.Dropped) > 0 && !slices.Equal(before.Status.Dropped, after.Status.Dropped) {
		d := after.Status.Dropped[0]
		r.event(after, corev1.EventTypeWarning, v1alpha1.ReasonAddressesDropped, "Resolve",
			"%d address(es) not published, first %s from source %s: %s; status.dropped lists them",
			len(after.Status.Dropped), d.Address, d.Source, d.Reason)
	}
	if n := after.Status.Endpoints.NotServed; n > 0 && n != before.Status.Endpoints.NotServed {
		r.event(after, corev1.EventTypeWarning, v1alpha1.ReasonFamilyNotServed, "Resolve",
			"%d endpoint(s) not published: this cluster gives Services no addresses of their IP family; the Resolved condition names it", n)
	}
	if now, was := reasonOf(after, v1alpha1.ConditionProbed), reasonOf(before, v1alpha1.ConditionProbed); changedWorthTelling(was, now, false) {
		r.event(after, eventType(now), now.Reason, "Probe", "%s", now.Message)
	}
	if now, was := reasonOf(after, v1alpha1.ConditionReady), reasonOf(before, v1alpha1.ConditionReady); changedWorthTelling(was, now, true) {
		r.event(after, eventType(now), now.Reason, "Reconcile", "%s", now.Message)
	}
}

// changedWorthTelling says whether a condition's change from was to now
// deserves an event: any change to not True, and a recovery to True. A
// condition that starts True says nothing went wrong, which is no news
// worth an API write per new backend. byMessage counts a new message as a
// change.
func changedWorthTelling(was, now *metav1.Condition, byMessage bool) bool {
	switch {
	case now == nil:
		return false
	case was == nil:
		return now.Status != metav1.ConditionTrue
	}
	return was.Status != now.Status || was.Reason != now.Reason || (byMessage && was.Message != now.Message)
}

// eventType is Normal for a True condition, else Warning.
func eventType(c *metav1.Condition) string {
	if c.Status == metav1.ConditionTrue {
		return corev1.EventTypeNormal
	}
	return corev1.EventTypeWarning
}

// probedCondition says what the probes did; false when nothing is probed.
func probedCondition(p probeOutcome) (metav1.Condition, bool) {
	switch {
	case !p.configured:
		return metav1.Condition{}, false
	case p.err != nil:
		return cond(v1alpha1.ConditionProbed, false, v1alpha1.ReasonProbeUnavailable,
			p.err.Error()+"; that source's endpoints are published as it says until the Secret is there"), true
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
	// notServed is the message naming the families left out, or "".
	notServed string
	// nothingServed is true when the cluster serves none of the spec's IP families.
	nothingServed bool
	syncErr       error
	counts        v1alpha1.EndpointCounts
	slices        int32
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

// outcomeOf reduces a report to an outcome.
func outcomeOf(suspended bool, rep report, wasReady metav1.ConditionStatus) outcome {
	o := outcome{
		suspended:  suspended,
		wasReady:   wasReady,
		specErr:    rep.specErr,
		sourceErrs: map[string]*providers.Error{},
		dropped:    len(rep.dropped),
		syncErr:    rep.syncErr,
		counts:     countEndpoints(rep.endpoints),
		slices:     rep.slices,
	}
	if rep.notServed.Total() > 0 {
		o.notServed = notServedMessage(rep.notServed, rep.served)
		o.nothingServed = len(rep.families) == 0
	}
	for _, r := range rep.results {
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

	if errors.Is(o.syncErr, errRecreating) {
		// Nothing went wrong: the next pass creates the Service again.
		return verdict{}
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
	case o.nothingServed:
		return cond(v1alpha1.ConditionResolved, false, v1alpha1.ReasonFamilyNotServed, o.notServed), false, nil
	case o.dropped > 0:
		// Refused addresses come first: they may be an attempt to aim the
		// Service somewhere it must not go.
		msg := fmt.Sprintf("%d address(es) not published; status.dropped says why", o.dropped)
		if o.notServed != "" {
			msg += "; " + o.notServed
		}
		return cond(v1alpha1.ConditionResolved, true, v1alpha1.ReasonAddressesDropped, msg), false, nil
	case o.notServed != "":
		return cond(v1alpha1.ConditionResolved, true, v1alpha1.ReasonFamilyNotServed, o.notServed), false, nil
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
	case errors.As(o.syncErr, new(errRead)):
		return cond(v1alpha1.ConditionSynced, false, v1alpha1.ReasonReadFailed, o.syncErr.Error()+"; retrying"), 0, o.syncErr
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
func refreshSuccessTimes(statuses []v1alpha1.SourceStatus, results []desired.SourceResult, now time.Time) {
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
func sourceStatuses(prev []v1alpha1.SourceStatus, specs []v1alpha1.Source, results []desired.SourceResult, now time.Time) []v1alpha1.SourceStatus {
	old := map[string]v1alpha1.SourceStatus{}
	for _, s := range prev {
		old[s.Name] = s
	}
	out := make([]v1alpha1.SourceStatus, 0, len(results))
	for i, r := range results {
		s := old[r.Name]
		s.Name, s.Kind = r.Name, string(providers.KindOf(specs[i]))
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
