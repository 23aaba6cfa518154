package externalbackend

import (
	"time"

	"golang.org/x/time/rate"

	"github.com/backendslice/backendslice/internal/fairshare"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	"github.com/backendslice/backendslice/api/v1alpha1"
)

// Status catch-ups.
//
// A new version of the controller can add a status field derived from
// fields already there (readyEndpoints, the ENDPOINTS column, came after
// 0.2.0), or word a condition's message differently. Its first pass over
// each backend then finds a status change that tells nobody anything new:
// observedGeneration, the conditions' statuses and reasons, the counts and
// the sources are as they were. Written at once, those are as many writes
// as there are backends, right when a new leader takes over, and a health
// flip or an address change of a backend the new leader has not looked at
// yet waits behind them: at the client's 50 requests a second, 200 backends
// kept a flip from its slice for up to 3.4 s in the upgrade benchmark.
//
// So the pass that finds such a change (a catch-up) does not write it: it
// takes a slot from a token bucket all backends share
// (Config.StatusCatchUpRate), and the backend comes back no sooner than
// its slot, at catchUpPriority, behind the cache's initial list and every
// change. A pass at or after the slot writes it; a pass with something
// else to write writes the catch-up with it, in the one patch. Nothing is
// written that would not have been, only later.

// catchUpPriority is the work queue priority of a backend that comes back
// only to write a catch-up: below the initial list's (handler.LowPriority),
// so that a new leader's first look at every backend, which starts the
// sources' watches, goes first.
const catchUpPriority = 2 * handler.LowPriority

// catchUpDelay is the least a catch-up waits after the pass that found it,
// on top of its slot: that pass is one of a burst (a new leader's first
// look at every backend) whose changes are written first.
const catchUpDelay = time.Second

// onlyCatchUp tells whether after differs from before in what is there
// for display alone, if at all: readyEndpoints (endpoints.ready and
// endpoints.total in one string) and the conditions' messages. A field a
// new version adds to status belongs here when it is derived from fields
// an older version wrote.
func onlyCatchUp(before, after *v1alpha1.ExternalBackendStatus) bool {
	return equality.Semantic.DeepEqual(withoutDisplay(before), withoutDisplay(after))
}

// withoutDisplay is a copy of st without the fields onlyCatchUp ignores.
func withoutDisplay(st *v1alpha1.ExternalBackendStatus) *v1alpha1.ExternalBackendStatus {
	c := st.DeepCopy()
	c.ReadyEndpoints = ""
	for i := range c.Conditions {
		c.Conditions[i].Message = ""
	}
	return c
}

// statusTurn is what a pass does with its status: write it or hold a
// catch-up, and when to come back, at which priority.
type statusTurn struct {
	write bool
	// slot is when the held catch-up may be written; zero when none is held.
	slot time.Time
	// requeueAfter is when to look again (zero: on the next event).
	requeueAfter time.Duration
	// priority is the work queue priority to come back at; nil keeps the
	// one the backend came with.
	priority *int
}

// turnOf decides a pass's statusTurn at now. changed says the pass has a
// status change, catchUp that it is a catch-up (onlyCatchUp, and the pass
// is no retry); slot is the one an earlier pass took (zero: none), and
// reserve takes a new one from the shared bucket, returning how long it is
// from now. requeueAfter is when the pass itself wants another look.
func turnOf(now time.Time, changed, catchUp bool, slot time.Time, reserve func() time.Duration, requeueAfter time.Duration) statusTurn {
	if changed && catchUp {
		if slot.IsZero() {
			slot = now.Add(catchUpDelay + reserve())
		}
		if now.Before(slot) {
			back := slot.Sub(now)
			t := statusTurn{slot: slot, requeueAfter: earliest(requeueAfter, back)}
			if t.requeueAfter == back {
				t.priority = ptr.To(catchUpPriority)
			}
			return t
		}
	}
	t := statusTurn{write: changed, requeueAfter: requeueAfter}
	if !slot.IsZero() {
		// The backend may have come back at catchUpPriority: its own next
		// looks (a poll, a drain) go back to the initial list's, above
		// the catch-ups still waiting.
		t.priority = ptr.To(handler.LowPriority)
	}
	return t
}

// newCatchUpBuckets are the token buckets catch-ups take their slots
// from, one per namespace, so that a namespace with thousands of backends
// to catch up does not push another's back: perSecond a second, one at a
// time; no bound when perSecond is zero.
func newCatchUpBuckets(perSecond float64) *fairshare.Buckets {
	if perSecond <= 0 {
		return fairshare.NewBuckets(rate.Inf, 1)
	}
	return fairshare.NewBuckets(rate.Limit(perSecond), 1)
}

// catchUpSlot takes a slot of namespace ns for a catch-up and says how
// far from now it is.
func (r *Reconciler) catchUpSlot(ns string) time.Duration {
	if r.catchUps == nil {
		return 0
	}
	return r.catchUps.Delay(ns)
}
