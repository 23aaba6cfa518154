package controllers

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/backendslice/backendslice/controllers/desired"
)

// coalesce holds back an answer the providers changed a moment ago, while
// the coalescing window (Config.Coalesce) is open: the endpoints already
// published stay, so syncSlices writes nothing but drift repairs, and the
// backend is looked at again when the window closes. A spec change not yet
// handled goes out at once.
func (r *Reconciler) coalesce(ctx context.Context, st *reconcileState) error {
	if !r.Config.Coalesce.Enabled() {
		// Off: not even the fingerprint, a hash of every endpoint, is needed.
		return nil
	}
	key := client.ObjectKeyFromObject(st.xb)
	burst, _ := r.bursts.get(key)
	specChanged := st.xb.Generation != st.xb.Status.ObservedGeneration
	d := r.Config.Coalesce.Decide(&burst, desired.Fingerprint(st.endpoints), r.Clock.Now(), specChanged)
	r.bursts.set(key, burst)
	if d.Publish {
		return nil
	}
	log.FromContext(ctx).V(1).Info("holding a provider change in the coalescing window", "for", d.Wait)
	r.Metrics.heldBack()
	st.endpoints = desired.FromSlices(st.existing)
	st.draining = st.xb.Status.Draining
	st.requeueAfter = earliest(st.requeueAfter, d.Wait)
	return nil
}
