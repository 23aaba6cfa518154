package externalbackend

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/publish"
	"github.com/backendslice/backendslice/internal/speccheck"
)

// passResult is what one reconcile found and did, as the steps returned it:
// status, events and the next look are decided from it alone.
type passResult struct {
	// specErr is set when the spec is invalid; nothing was resolved or written.
	specErr error
	// results of each source, in spec order.
	results []publish.SourceResult
	// publication is what was to be published.
	publication
	// slices is how many slices are ours after the writes.
	slices int32
	// syncErr is set when reading or writing the Service or slices
	// failed; a failed read is an errRead.
	syncErr error
	// adoption is what the adoption step found (spec.service.adopt).
	adoption adoption
	// served are the families the cluster serves, for messages.
	served sets.Set[corev1.IPFamily]
	// requeueAfter is when a provider, a drain or the coalescing window
	// wants another look.
	requeueAfter time.Duration
	// limits name the controller's limits this pass applied (a slice size
	// raised to the floor, a provider's answer cut short), for the Synced
	// message.
	limits []string
	// fates say what became of what each failing source published.
	fates map[string]fate
}

// writeStatus writes status and events from what the pass found and did
// (pass), patches status once (or holds a catch-up), and says when to look
// again and at which priority: transient failures return an error
// (retried with backoff), terminal ones wait for a change.
func (r *Reconciler) writeStatus(ctx context.Context, before, xb *v1alpha1.ExternalBackend, pass passResult) (ctrl.Result, error) {
	wasReady := metav1.ConditionStatus("")
	if c := meta.FindStatusCondition(before.Status.Conditions, v1alpha1.ConditionReady); c != nil {
		wasReady = c.Status
	}
	plan := summarize(factsOf(xb.Spec.Suspend, pass, wasReady))
	xb.Status.ServiceName = speccheck.ServiceName(xb)
	if !xb.Spec.Suspend && pass.specErr == nil {
		xb.Status.Sources = sourceStatuses(r.kinds(), before.Status.Sources, xb.Spec.Sources, pass.results, r.Clock.Now())
		if pass.syncErr == nil {
			xb.Status.Endpoints = countEndpoints(pass.Endpoints)
			xb.Status.Endpoints.NotServed = int32(pass.NotServed.Total())
			xb.Status.Endpoints.ProbeFailing = int32(pass.probes.Failing)
			xb.Status.ReadyEndpoints = readyOfTotal(xb.Status.Endpoints)
			xb.Status.Dropped = capList(pass.Dropped, maxDropped)
			xb.Status.Draining = capList(pass.Draining, maxDraining)
			xb.Status.Slices = pass.slices
		}
	}
	for _, c := range plan.conditions {
		c.ObservedGeneration = xb.Generation
		meta.SetStatusCondition(&xb.Status.Conditions, c)
	}
	if plan.removeStalled {
		meta.RemoveStatusCondition(&xb.Status.Conditions, v1alpha1.ConditionStalled)
	}
	pass.requeueAfter = earliest(pass.requeueAfter, setStepConditions(xb, pass))
	if plan.final {
		xb.Status.ObservedGeneration = xb.Generation
	}
	turn := r.statusTurn(before, xb, plan.retry == nil, earliest(pass.requeueAfter, plan.recheck))
	log.FromContext(ctx).V(1).Info("reconciled", "endpoints", xb.Status.Endpoints.Total,
		"ready", xb.Status.Endpoints.Ready, "slices", xb.Status.Slices, "requeueAfter", turn.requeueAfter,
		"catchUpHeld", !turn.slot.IsZero())
	r.Metrics.backend(xb, !xb.Spec.Suspend && pass.specErr == nil, pass.results, r.Clock.Now())
	if turn.write {
		r.announce(before, xb)
		if err := r.patchStatus(ctx, before, xb, pass.results); err != nil {
			return ctrl.Result{}, errors.Join(plan.retry, fmt.Errorf("patching status: %w", err))
		}
	}
	return ctrl.Result{RequeueAfter: turn.requeueAfter, Priority: turn.priority}, plan.retry
}

// statusTurn decides whether the pass writes its status now or holds it as
// a catch-up (see catchup.go), and keeps the backend's slot. A retry
// (settled false) holds nothing: its status says what failed.
func (r *Reconciler) statusTurn(before, after *v1alpha1.ExternalBackend, settled bool, requeueAfter time.Duration) statusTurn {
	changed := !equality.Semantic.DeepEqual(before.Status, after.Status)
	catchUp := settled && changed && onlyCatchUp(&before.Status, &after.Status)
	var turn statusTurn
	r.state.update(client.ObjectKeyFromObject(after), func(b *backendState) {
		turn = turnOf(r.Clock.Now(), changed, catchUp, b.catchUpAt, func() time.Duration { return r.catchUpSlot(after.Namespace) }, requeueAfter)
		b.catchUpAt = turn.slot
	})
	return turn
}

// setStepConditions sets the conditions of the steps that only some
// backends take (Probed, Adopted) and Reconciling, stamped with the
// generation, and removes those that no longer apply. It returns when to
// look again for an adoption that waits, or 0.
func setStepConditions(xb *v1alpha1.ExternalBackend, pass passResult) time.Duration {
	var again time.Duration
	handled := !xb.Spec.Suspend && pass.specErr == nil
	set := func(c metav1.Condition) {
		c.ObservedGeneration = xb.Generation
		meta.SetStatusCondition(&xb.Status.Conditions, c)
	}
	if c, ok := probedCondition(pass.probes); ok && handled {
		set(c)
	} else if !ok {
		meta.RemoveStatusCondition(&xb.Status.Conditions, v1alpha1.ConditionProbed)
	}
	switch c, ok := adoptedCondition(pass.adoption); {
	case xb.Spec.Service.Adopt == nil:
		meta.RemoveStatusCondition(&xb.Status.Conditions, v1alpha1.ConditionAdopted)
	case ok && pass.syncErr == nil:
		set(c)
		if !pass.adoption.done {
			// What is kept is not in the cache: no event says it changed.
			again = adoptionPoll
		}
	}
	if c, ok := reconcilingCondition(pass.adoption, pass.syncErr); ok && handled {
		set(c)
	} else {
		meta.RemoveStatusCondition(&xb.Status.Conditions, v1alpha1.ConditionReconciling)
	}
	return again
}

// patchStatus sends the status change, if there is one: a reconcile that
// changed nothing, such as the one our own slice writes trigger, costs the
// API server no request. A status written anyway carries the sources'
// success times of this pass (results). It has a deadline of its own, so
// that a pass that ran out of time still reports why.
func (r *Reconciler) patchStatus(ctx context.Context, before, after *v1alpha1.ExternalBackend, results []publish.SourceResult) error {
	if equality.Semantic.DeepEqual(before.Status, after.Status) {
		return nil
	}
	refreshSuccessTimes(after.Status.Sources, results, r.Clock.Now())
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), statusPatchTimeout)
	defer cancel()
	if err := r.Status().Patch(ctx, after, client.MergeFrom(before)); err != nil {
		return client.IgnoreNotFound(err)
	}
	r.store.SawStatus(after)
	return nil
}

// statusPatchTimeout bounds the status patch that ends every reconcile.
const statusPatchTimeout = 10 * time.Second

// LongestReconcile is the longest a reconcile that honours its deadlines
// takes with reconcileTimeout (--reconcile-timeout): the pass, then the
// status patch. One still running after that is stuck.
func LongestReconcile(reconcileTimeout time.Duration) time.Duration {
	return reconcileTimeout + statusPatchTimeout
}

// announce emits an event when the set of dropped addresses changes, and
// at the transitions of transitionNotices (Ready and Probed among them), so
// that each is told once, not at every retry.
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
	for _, n := range transitionNotices(before, after) {
		r.event(after, n.eventType, n.reason, n.action, "%s", n.note)
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
