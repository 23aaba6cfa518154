package controllers

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/controllers/desired"
)

// observed is what is published now, as the cache shows it.
type observed struct {
	// service is our Service, or nil when the cache holds none of its name.
	service *corev1.Service
	// slices are the slices of the Service that are ours (see ownedBy).
	slices []discoveryv1.EndpointSlice
	// taken are the names of every cached slice of the Service, ours or not.
	taken sets.Set[string]
	// served are the IP families the cluster gives Services addresses of.
	served sets.Set[corev1.IPFamily]
	// clusterRanges are the cluster's Service (and Pod) ranges: no endpoint may be there.
	clusterRanges []netip.Prefix
}

// observe reads the Service, our slices and the cluster's families from the cache.
func (r *Reconciler) observe(ctx context.Context, xb *v1alpha1.ExternalBackend) (observed, error) {
	name := serviceName(xb)
	var seen observed
	svc := &corev1.Service{}
	switch err := r.Get(ctx, client.ObjectKey{Namespace: xb.Namespace, Name: name}, svc); {
	case err == nil:
		seen.service = svc
	case !apierrors.IsNotFound(err):
		return seen, readFailed("reading Service "+name, err)
	}
	var list discoveryv1.EndpointSliceList
	if err := r.List(ctx, &list, client.InNamespace(xb.Namespace), client.MatchingFields{BackendIndex: xb.Name}); err != nil {
		return seen, readFailed("listing EndpointSlices of Service "+name, err)
	}
	of := slices.DeleteFunc(list.Items, func(s discoveryv1.EndpointSlice) bool {
		return s.Labels[discoveryv1.LabelServiceName] != name
	})
	seen.slices, seen.taken = ownedBy(of, name, seen.service)
	net, err := r.families.read(ctx)
	if err != nil {
		return seen, errRead{err}
	}
	seen.served, seen.clusterRanges = net.served, net.ranges
	return seen, nil
}

// ownedBy picks the slices of Service name that are ours, and returns the
// names of all of them (see owns).
func ownedBy(all []discoveryv1.EndpointSlice, name string, svc *corev1.Service) ([]discoveryv1.EndpointSlice, sets.Set[string]) {
	taken := sets.New[string]()
	var ours []discoveryv1.EndpointSlice
	for _, s := range all {
		taken.Insert(s.Name)
		if owns(&s, name, uidOf(svc)) {
			ours = append(ours, s)
		}
	}
	return ours, taken
}

// uidOf is the Service's UID, or "" when there is none yet.
func uidOf(svc *corev1.Service) types.UID {
	if svc == nil {
		return ""
	}
	return svc.UID
}

// owns tells whether the slice belongs to the Service name whose UID is uid
// ("" while the Service is not known). Ours are the slices the Service
// controls, and two kinds of slice our field manager wrote: one whose owner
// reference someone stripped, and one of an earlier Service of this name
// (deleted and created again), handed over to the new one rather than left
// to publish its endpoints a second time until garbage collection. A slice
// that carries our labels but that we never wrote (made by hand, or by
// another tool) is never ours: never adopted, rewritten or deleted.
func owns(s *discoveryv1.EndpointSlice, name string, uid types.UID) bool {
	ref := metav1.GetControllerOf(s)
	switch {
	case ref == nil:
		return s.Labels[discoveryv1.LabelServiceName] == name && wroteByUs(s)
	case ref.Kind != "Service" || ref.Name != name:
		return false
	case uid == "" || ref.UID == uid:
		return true
	}
	return wroteByUs(s)
}

// wroteByUs tells whether our field manager ever wrote the object. An
// object we never wrote is never taken over, whatever labels it carries.
func wroteByUs(o metav1.Object) bool {
	return slices.ContainsFunc(o.GetManagedFields(), func(f metav1.ManagedFieldsEntry) bool {
		return f.Manager == FieldManager
	})
}

// publication is what to publish: the endpoints and how they came to be.
type publication struct {
	// endpoints to publish, draining ones included.
	endpoints []desired.Endpoint
	dropped   []v1alpha1.DroppedAddress
	draining  []v1alpha1.DrainingEndpoint
	// notServed counts the endpoints of families the cluster does not serve.
	notServed desired.LeftOut
	// families are the IP families the Service may have: the spec's,
	// less those the cluster does not serve.
	families []v1alpha1.AddressType
	// held is true when the coalescing window kept the published endpoints.
	held bool
	// probes is what the probes did to the endpoints.
	probes probeOutcome
	// requeueAfter is when a drain ends or the coalescing window closes.
	requeueAfter time.Duration
}

// publication works out what to publish from what the sources said and what
// is published: normalised, limited to the families the cluster serves, with
// vanished endpoints draining, and, while the coalescing window holds a
// provider change back, what is published now.
func (r *Reconciler) publication(ctx context.Context, xb *v1alpha1.ExternalBackend, res resolved, seen observed) publication {
	pol := desired.Policy{
		AddressTypes:   xb.Spec.AddressTypes,
		DeniedPrefixes: r.Config.DeniedPrefixes,
		DeniedNames:    r.Config.DeniedNames,
		ClusterDomain:  r.Config.ClusterDomain,
		ClusterRanges:  seen.clusterRanges,
		Ports:          xb.Spec.Service.Ports,
	}
	current, dropped := desired.Normalize(res.results, pol)
	// What must not be published any more leaves at once, whatever the
	// drain period or the coalescing window say: the addresses of refused
	// sources, those dropped this pass (an allowedCIDRs narrowed), and
	// anything the deny list refuses now.
	leaving := sets.New[string]()
	for _, d := range dropped {
		leaving.Insert(canonicalAddress(d.Address))
	}
	answered := sets.New[string]()
	for _, e := range current {
		answered.Insert(e.Address)
	}
	withdrawn := func(e desired.Endpoint) bool {
		return !answered.Has(e.Address) &&
			(res.withdrawn.Has(e.Address) || leaving.Has(e.Address) || pol.Denies(e) != "" || !res.mayPublish(e))
	}
	served := func(t discoveryv1.AddressType) bool { return seen.served.Has(corev1.IPFamily(t)) }
	current, notServed := desired.OnlyServed(current, served)
	current, probes := r.applyProbes(ctx, xb, res, current)
	key := client.ObjectKeyFromObject(xb)
	started, _ := r.drains.get(key)
	// Status lists the first drains only, and its patch may fail: the
	// slices record every drain start. This process also remembers the ones
	// it started, since the cache may not show its last slice write yet.
	draining := mergeDrains(started, desired.DrainsFromSlices(seen.slices), xb.Status.Draining)
	drained := desired.Drain(desired.DrainInput{
		Current:      current,
		Published:    desired.FromSlices(seen.slices),
		Draining:     draining,
		Now:          r.Clock.Now(),
		Period:       r.drainPeriod(xb),
		HoldVanished: res.holdVanished,
		Withdrawn:    withdrawn,
	})
	r.drains.set(key, drained.Draining)
	pub := publication{
		endpoints:    drained.Endpoints,
		dropped:      dropped,
		draining:     drained.Draining,
		notServed:    notServed,
		probes:       probes,
		requeueAfter: drained.NextExpiry,
	}
	for _, t := range xb.Spec.AddressTypes {
		if t != v1alpha1.AddressTypeFQDN && served(discoveryv1.AddressType(t)) {
			pub.families = append(pub.families, t)
		}
	}
	if wait, hold := r.holdBack(xb, pub.endpoints); hold {
		log.FromContext(ctx).V(1).Info("holding a provider change in the coalescing window", "for", wait)
		r.Metrics.heldBack()
		pub.endpoints = slices.DeleteFunc(desired.FromSlices(seen.slices), withdrawn)
		pub.draining = draining
		pub.held = true
		pub.requeueAfter = earliest(pub.requeueAfter, wait)
	}
	return pub
}

// holdBack asks the coalescing window (Config.Coalesce) whether a provider
// change to eps must wait, and for how long. A spec change not yet handled
// goes out at once.
func (r *Reconciler) holdBack(xb *v1alpha1.ExternalBackend, eps []desired.Endpoint) (time.Duration, bool) {
	if !r.Config.Coalesce.Enabled() {
		// Off: not even the fingerprint, a hash of every endpoint, is needed.
		return 0, false
	}
	key := client.ObjectKeyFromObject(xb)
	burst, _ := r.bursts.get(key)
	specChanged := xb.Generation != xb.Status.ObservedGeneration
	d := r.Config.Coalesce.Decide(&burst, desired.Fingerprint(eps), r.Clock.Now(), specChanged)
	r.bursts.set(key, burst)
	return d.Wait, !d.Publish
}

// notServedMessage names the families left out, for status and events.
func notServedMessage(left desired.LeftOut, served sets.Set[corev1.IPFamily]) string {
	fams := slices.Sorted(func(yield func(string) bool) {
		for f := range left {
			if !yield(string(f)) {
				return
			}
		}
	})
	return fmt.Sprintf("%d endpoint(s) of family %v not published: this cluster gives Services addresses of %v only (its ServiceCIDRs); add a ServiceCIDR of the family or drop it from spec.addressTypes",
		left.Total(), fams, sets.List(served))
}

// mergeDrains is every drain start known, each address once, the first
// list that has it winning: memory, then the slices, then status.
func mergeDrains(lists ...[]v1alpha1.DrainingEndpoint) []v1alpha1.DrainingEndpoint {
	var out []v1alpha1.DrainingEndpoint
	known := map[string]bool{}
	for _, l := range lists {
		for _, d := range l {
			if !known[d.Address] {
				known[d.Address] = true
				out = append(out, d)
			}
		}
	}
	return out
}
