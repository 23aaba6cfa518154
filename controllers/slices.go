package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/controllers/desired"
	"github.com/backendslice/backendslice/controllers/endpointslices"
)

// sliceLabels are the labels every slice of ours carries: the spec's, the
// ones kube-proxy and meshes select on, and ours.
func sliceLabels(xb *v1alpha1.ExternalBackend, service string) map[string]string {
	l := ourLabels(xb.Spec.Service.Labels, xb.Name)
	l[discoveryv1.LabelServiceName] = service
	l[discoveryv1.LabelManagedBy] = ManagedByValue
	if xb.Spec.Service.Type == v1alpha1.ServiceTypeHeadless {
		l[corev1.IsHeadlessService] = ""
	}
	return l
}

// syncSlices plans the fewest slice writes and makes them: creates first,
// then updates, then deletes, so that an endpoint moving between slices is
// never missing from all of them.
func (r *Reconciler) syncSlices(ctx context.Context, st *reconcileState) error {
	plan := endpointslices.Compute(endpointslices.Input{
		Template: endpointslices.Template{
			Namespace:   st.xb.Namespace,
			ServiceName: st.serviceName,
			Labels:      sliceLabels(st.xb, st.serviceName),
			Owner:       ownerRef(st.service, corev1.SchemeGroupVersion.WithKind("Service")),
		},
		Desired:              desired.ZoneHints(desired.Groups(st.endpoints), st.xb.Spec.Service.TrafficDistribution, st.xb.Spec.Service.Annotations),
		Existing:             st.existing,
		TakenNames:           sets.KeySet(st.sliceNames),
		MaxEndpointsPerSlice: int(r.maxPerSlice(st)),
	})
	st.slices = int32(len(st.existing) + len(plan.Create) - len(plan.Delete))
	if plan.Places(st.existing) {
		if err := r.checkCacheFresh(ctx, st); err != nil {
			return err
		}
	}
	for _, s := range plan.Create {
		if err := r.createSlice(ctx, s); err != nil {
			return err
		}
	}
	for _, s := range plan.Update {
		if err := r.update(ctx, s, kindEndpointSlice); err != nil {
			return fmt.Errorf("updating EndpointSlice %s: %w", s.Name, err)
		}
	}
	for _, s := range plan.Delete {
		err := r.remove(ctx, s, kindEndpointSlice, client.Preconditions{UID: &s.UID, ResourceVersion: &s.ResourceVersion})
		if client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting EndpointSlice %s: %w", s.Name, err)
		}
	}
	// No event per sync: it would be a second API write for every slice
	// write, the very load the planner saves. Status and metrics count them.
	return nil
}

// createSlice creates a slice. Slice names are deterministic, so a slice we
// created that the cache has not shown yet makes Create fail rather than
// publish the same endpoints twice; if that slice is ours it is updated, and
// if it is someone else's, ours gets a generated name.
func (r *Reconciler) createSlice(ctx context.Context, s *discoveryv1.EndpointSlice) error {
	err := r.create(ctx, s, kindEndpointSlice)
	if err == nil {
		return nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating EndpointSlice %s: %w", s.Name, err)
	}
	live := &discoveryv1.EndpointSlice{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(s), live); err != nil {
		return fmt.Errorf("reading EndpointSlice %s that holds our slice's name: %w", s.Name, err)
	}
	owner := metav1.GetControllerOf(live)
	if owner == nil || owner.UID != s.OwnerReferences[0].UID || live.AddressType != s.AddressType {
		// Someone else's slice holds the name (our cache does not show
		// slices without our label). Never take it over: let the API
		// server pick a free name for ours instead.
		s.GenerateName, s.Name = s.Name+"-", ""
		if err := r.create(ctx, s, kindEndpointSlice); err != nil {
			return fmt.Errorf("creating EndpointSlice %s*: %w", s.GenerateName, err)
		}
		return nil
	}
	s.ResourceVersion = live.ResourceVersion
	s.UID = live.UID
	if err := r.update(ctx, s, kindEndpointSlice); err != nil {
		return fmt.Errorf("updating EndpointSlice %s the cache had not shown yet: %w", s.Name, err)
	}
	return nil
}

// checkCacheFresh reads our slices past the cache before a plan places
// endpoints: a cache that misses a slice another writer (or our own last
// pass) made would let the plan put an endpoint that slice holds into a
// second one. A stale cache means another pass once it has caught up. The
// read is a consistent list, which waits for the API server's watch cache
// to catch up with etcd (up to about 100 ms after a write of another kind),
// so it is skipped for plans that only change endpoints in place.
func (r *Reconciler) checkCacheFresh(ctx context.Context, st *reconcileState) error {
	var live discoveryv1.EndpointSliceList
	if err := r.APIReader.List(ctx, &live, client.InNamespace(st.xb.Namespace), client.MatchingLabels{
		discoveryv1.LabelServiceName: st.serviceName,
		discoveryv1.LabelManagedBy:   ManagedByValue,
	}); err != nil {
		return fmt.Errorf("listing EndpointSlices of Service %s: %w", st.serviceName, err)
	}
	cached := map[string]string{}
	for _, s := range st.existing {
		cached[s.Name] = s.ResourceVersion
	}
	if len(live.Items) != len(cached) {
		return errRequeue
	}
	for _, s := range live.Items {
		if cached[s.Name] != s.ResourceVersion {
			return errRequeue
		}
	}
	return nil
}

// maxPerSlice is the spec's limit or the controller's default.
func (r *Reconciler) maxPerSlice(st *reconcileState) int32 {
	return ptr.Deref(st.xb.Spec.MaxEndpointsPerSlice, r.Config.MaxEndpointsPerSlice)
}
