package controllers

import (
	"context"
	"fmt"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/controllers/desired"
	"github.com/backendslice/backendslice/providers"
)

// resolve asks every source for its endpoints and works out what to
// publish: normalised, filtered by policy, with vanished endpoints draining.
// A failed source does not stop the others; what it published before stays.
func (r *Reconciler) resolve(ctx context.Context, st *reconcileState) error {
	xb := st.xb
	key := client.ObjectKeyFromObject(xb)
	previous, _ := r.known.get(key)
	answers := map[string][]providers.Endpoint{}
	unknown := false
	for _, src := range xb.Spec.Sources {
		rctx, cancel := context.WithTimeout(ctx, r.Config.ResolveTimeout)
		res, err := r.Providers.Resolve(rctx, providers.Request{
			Namespace: xb.Namespace, Backend: xb.Name, Source: src, AddressTypes: xb.Spec.AddressTypes,
		})
		cancel()
		result := desired.SourceResult{Name: src.Name, Endpoints: res.Endpoints, Err: err}
		switch {
		case err == nil:
			answers[src.Name] = res.Endpoints
		case providers.AsError(err).Gone:
			// The backend is gone: what it published drains.
		default:
			// Keep what the source last said; after a restart nothing is
			// known, so then every vanished endpoint is held instead.
			last, ok := previous[src.Name]
			result.Endpoints, result.Held = last, ok
			answers[src.Name] = last
			unknown = unknown || !ok
		}
		if err == nil || providers.AsError(err).Gone {
			// A gone backend may come back: look again when the provider says.
			st.requeueAfter = earliest(st.requeueAfter, res.RefreshAfter)
		}
		st.results = append(st.results, result)
	}
	r.known.set(key, answers)
	names := make([]string, 0, len(xb.Spec.Sources))
	for _, src := range xb.Spec.Sources {
		names = append(names, src.Name)
	}
	r.Providers.Forget(key, names...)
	current, dropped := desired.Normalize(st.results, desired.Policy{
		AddressTypes:   xb.Spec.AddressTypes,
		DeniedPrefixes: r.Config.DeniedPrefixes,
		DeniedNames:    r.Config.DeniedNames,
		Ports:          xb.Spec.Service.Ports,
	})
	existing, err := r.ourSlices(ctx, st)
	if err != nil {
		return err
	}
	drained := desired.Drain(desired.DrainInput{
		Current:      current,
		Published:    desired.FromSlices(existing),
		Draining:     xb.Status.Draining,
		Now:          r.Clock.Now(),
		Period:       r.drainPeriod(st),
		HoldVanished: unknown,
	})
	st.endpoints, st.dropped, st.draining = drained.Endpoints, dropped, drained.Draining
	st.requeueAfter = earliest(st.requeueAfter, drained.NextExpiry)
	return nil
}

// drainPeriod is the spec's drain period, or the controller's default.
func (r *Reconciler) drainPeriod(st *reconcileState) time.Duration {
	if d := st.xb.Spec.DrainPeriod; d != nil {
		return d.Duration
	}
	return r.Config.DefaultDrainPeriod
}

// ourSlices lists the EndpointSlices we manage for the backend's Service.
func (r *Reconciler) ourSlices(ctx context.Context, st *reconcileState) ([]discoveryv1.EndpointSlice, error) {
	var list discoveryv1.EndpointSliceList
	if err := r.List(ctx, &list, client.InNamespace(st.xb.Namespace), client.MatchingLabels{
		discoveryv1.LabelServiceName: st.serviceName,
		BackendLabel:                 st.xb.Name,
	}); err != nil {
		return nil, fmt.Errorf("listing EndpointSlices of Service %s: %w", st.serviceName, err)
	}
	st.sliceNames = map[string]bool{}
	var ours []discoveryv1.EndpointSlice
	for _, s := range list.Items {
		st.sliceNames[s.Name] = true
		if s.Labels[discoveryv1.LabelManagedBy] == ManagedByValue {
			ours = append(ours, s)
		}
	}
	st.existing = ours
	return ours, nil
}

// earliest is the sooner of two delays, where zero means never.
func earliest(a, b time.Duration) time.Duration {
	if a == 0 || (b != 0 && b < a) {
		return b
	}
	return a
}
