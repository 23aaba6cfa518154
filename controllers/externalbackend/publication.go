package externalbackend

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/coalesce"
	"github.com/backendslice/backendslice/internal/publish"
)

// publication is what to publish: the endpoints and how they came to be.
type publication struct {
	// endpoints to publish, draining ones included.
	endpoints []publish.Endpoint
	dropped   []v1alpha1.DroppedAddress
	draining  []v1alpha1.DrainingEndpoint
	// notServed counts the endpoints of families the cluster does not serve.
	notServed publish.LeftOut
	// families are the IP families the Service may have: the spec's,
	// less those the cluster does not serve.
	families []v1alpha1.AddressType
	// held is true when the coalescing window kept the published endpoints.
	held bool
	// sources records which sources publish each endpoint, for the
	// slices (publish.SourcesAnnotation); nil for a backend of one source.
	sources publish.Attribution
	// probes is what the probes did to the endpoints.
	probes probeOutcome
	// limit names the endpoints left out past --max-endpoints-per-backend.
	limit string
	// requeueAfter is when a drain ends or the coalescing window closes.
	requeueAfter time.Duration
}

// publication works out what to publish from what the sources said and what
// is published: normalised, limited to the families the cluster serves, with
// vanished endpoints draining, and, while the coalescing window holds a
// provider change back, what is published now.
func (r *Reconciler) publication(ctx context.Context, xb *v1alpha1.ExternalBackend, res resolved, seen observed) publication {
	pol := publish.Policy{
		AddressTypes:   xb.Spec.AddressTypes,
		DeniedPrefixes: r.Config.DeniedPrefixes,
		DeniedNames:    r.Config.DeniedNames,
		ClusterDomain:  r.Config.ClusterDomain,
		Cluster:        seen.cluster,
		Ports:          xb.Spec.Service.Ports,
	}
	current, dropped := publish.Normalize(res.results, pol)
	logClusterAddresses(ctx, dropped, seen.cluster)
	// What must not be published any more leaves at once, whatever the
	// drain period or the coalescing window say: the addresses of refused
	// sources, those dropped this pass (an allowedCIDRs narrowed), and
	// anything the deny list refuses now.
	leaving := sets.New[string]()
	for _, d := range dropped {
		leaving.Insert(publish.CanonicalAddress(d.Address))
	}
	answered := sets.New[string]()
	for _, e := range current {
		answered.Insert(e.Address)
	}
	recorded := publish.SourcesFromSlices(seen.slices)
	withdrawn := func(e publish.Endpoint) bool {
		return !answered.Has(e.Address) &&
			(res.withdrawn.Has(e.Address) || slices.ContainsFunc(recorded[e.Address], res.refused.Has) ||
				leaving.Has(e.Address) || pol.Denies(e) != "" || !res.mayPublish(e))
	}
	served := func(t discoveryv1.AddressType) bool { return seen.served.Has(corev1.IPFamily(t)) }
	current, notServed := publish.OnlyServed(current, served)
	current, probes := r.applyProbes(ctx, xb, res, current)
	key := client.ObjectKeyFromObject(xb)
	var started []v1alpha1.DrainingEndpoint
	r.state.lookup(key, func(b *backendState) { started = b.drains })
	// Status lists the first drains only, and its patch may fail: the
	// slices record every drain start. This process also remembers the ones
	// it started, since the cache may not show its last slice write yet.
	draining := mergeDrains(started, publish.DrainsFromSlices(seen.slices), xb.Status.Draining)
	drained := publish.Drain(publish.DrainInput{
		Current:      current,
		Published:    publish.FromSlices(seen.slices),
		Draining:     draining,
		Now:          r.Clock.Now(),
		Period:       r.drainPeriod(xb),
		HoldVanished: publish.HeldForUnknown(res.unknown, recorded),
		Withdrawn:    withdrawn,
	})
	r.state.update(key, func(b *backendState) { b.drains = drained.Draining })
	pub := publication{
		endpoints:    drained.Endpoints,
		dropped:      dropped,
		draining:     drained.Draining,
		notServed:    notServed,
		sources:      publish.Attribute(res.results, res.unknown, recorded),
		probes:       probes,
		requeueAfter: drained.NextExpiry,
	}
	// Bounded before the coalescing window's fingerprint, so that
	// endpoints coming and going among those left out hold nothing back.
	pub.endpoints, pub.draining, pub.limit = r.limitEndpoints(pub.endpoints, pub.draining)
	for _, t := range xb.Spec.AddressTypes {
		if t != v1alpha1.AddressTypeFQDN && served(discoveryv1.AddressType(t)) {
			pub.families = append(pub.families, t)
		}
	}
	if wait, hold := r.holdBack(xb, pub.endpoints); hold {
		log.FromContext(ctx).V(1).Info("holding a provider change in the coalescing window", "for", wait)
		r.Metrics.heldBack()
		pub.endpoints = slices.DeleteFunc(publish.FromSlices(seen.slices), withdrawn)
		pub.draining = draining
		pub.sources = recorded
		pub.held = true
		pub.requeueAfter = earliest(pub.requeueAfter, wait)
	}
	return pub
}

// logClusterAddresses tells the controller's log, at V(1), whose each
// dropped address of the cluster's own is (a Node and its InternalIP, the
// API server, a ServiceCIDR): status and events say only that it is the
// cluster's, since a tenant must not map the cluster by listing
// candidates, but the platform team may want to know.
func logClusterAddresses(ctx context.Context, dropped []v1alpha1.DroppedAddress, cluster publish.ClusterNetworks) {
	// Offline (render, validate) there is no logger, and no cluster.
	logger, err := logr.FromContext(ctx)
	if err != nil || !logger.V(1).Enabled() {
		return
	}
	logger = logger.V(1)
	for _, d := range dropped {
		if whose := cluster.Whose(d.Address); whose != "" {
			logger.Info("dropped an address of the cluster's own", "source", d.Source, "address", d.Address, "whose", whose)
		}
	}
}

// holdBack asks the coalescing window (Config.Coalesce) whether a provider
// change to eps must wait, and for how long. A spec change not yet handled
// goes out at once.
func (r *Reconciler) holdBack(xb *v1alpha1.ExternalBackend, eps []publish.Endpoint) (time.Duration, bool) {
	if !r.Config.Coalesce.Enabled() {
		// Off: not even the fingerprint, a hash of every endpoint, is needed.
		return 0, false
	}
	key := client.ObjectKeyFromObject(xb)
	fingerprint, now := publish.Fingerprint(eps), r.Clock.Now()
	specChanged := xb.Generation != xb.Status.ObservedGeneration
	var d coalesce.Decision
	r.state.update(key, func(b *backendState) { d = r.Config.Coalesce.Decide(&b.burst, fingerprint, now, specChanged) })
	return d.Wait, !d.Publish
}

// notServedMessage names the families left out, for status and events.
func notServedMessage(left publish.LeftOut, served sets.Set[corev1.IPFamily]) string {
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

// drainPeriod is the spec's drain period, or the controller's default.
func (r *Reconciler) drainPeriod(xb *v1alpha1.ExternalBackend) time.Duration {
	if d := xb.Spec.DrainPeriod; d != nil {
		return d.Duration
	}
	return r.Config.DefaultDrainPeriod
}
