package externalbackend

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/decide"
	"github.com/backendslice/backendslice/internal/publish"
	"github.com/backendslice/backendslice/internal/sliceplan"
)

// sliceLabels are the labels every slice of ours carries: the spec's, the
// ones kube-proxy and meshes select on, and ours.
func sliceLabels(xb *v1alpha1.ExternalBackend, service string) map[string]string {
	l := ourLabels(xb.Spec.Service.Labels, xb.Name)
	l[discoveryv1.LabelServiceName] = service
	l[discoveryv1.LabelManagedBy] = v1alpha1.ManagedByValue
	if xb.Spec.Service.Type == v1alpha1.ServiceTypeHeadless {
		l[corev1.IsHeadlessService] = ""
	}
	return l
}

// planInput is what the slice planner is given for xb's Service svc and
// publication pub, before the slices already there: the one input that the
// controller (syncSlices) and Render both plan from.
func (c Config) planInput(xb *v1alpha1.ExternalBackend, svc *corev1.Service, pub decide.Publication) sliceplan.Input {
	return sliceplan.Input{
		Template: sliceplan.Template{
			Namespace:   xb.Namespace,
			ServiceName: svc.Name,
			Labels:      sliceLabels(xb, svc.Name),
			Owner:       ownerRef(svc, corev1.SchemeGroupVersion.WithKind("Service")),
			Annotate:    publish.Annotators(publish.DrainAnnotator(pub.Draining), publish.SourceAnnotator(pub.Sources)),
		},
		Desired:              publish.ZoneHints(publish.Groups(pub.Endpoints), xb.Spec.Service.TrafficDistribution, xb.Spec.Service.Annotations),
		MaxEndpointsPerSlice: int(c.maxPerSlice(xb).size),
		MaxSlices:            c.MaxSlicesPerBackend,
	}
}

// syncSlices plans the fewest slice writes and makes them: creates first,
// then updates, then deletes, so that an endpoint moving between slices is
// never missing from all of them. It returns how many slices are ours
// after, and what the bound on slices made of the plan. created says this
// pass created svc.
func (r *Reconciler) syncSlices(ctx context.Context, xb *v1alpha1.ExternalBackend, svc *corev1.Service, created bool, pub publication, seen observed) (int32, sliceBound, error) {
	in := r.Config.planInput(xb, svc, pub.Publication)
	in.Existing, in.TakenNames = onlyOwned(seen.slices, svc), seen.taken
	key := client.ObjectKeyFromObject(xb)
	history := r.volatility(key, &in)
	plan := sliceplan.Compute(in)
	if created {
		// A Service this pass created owns no slice yet: none of ours can
		// hide from the cache. (A second instance placing the same
		// endpoints at the same moment makes the same deterministically
		// named slices: its create or ours fails, and createSlice updates
		// the one that exists instead of adding another.)
		r.store.Trust(key, nil, in.Existing)
	}
	if plan.Places(in.Existing) && !created && !r.cacheSeesAll(key, in.Existing) {
		// A cache that misses a slice another writer (or our own last pass)
		// made, or one whose label someone stripped, would let the plan put
		// an endpoint that slice holds into a second one: plan again from
		// the API server's own list when it differs.
		live, taken, err := r.liveSlices(ctx, svc)
		if err != nil {
			return 0, sliceBound{}, err
		}
		r.store.Trust(key, live, in.Existing)
		if !sameVersions(live, in.Existing) {
			in.Existing, in.TakenNames = live, taken.Union(seen.taken)
			plan = sliceplan.Compute(in)
		}
	}
	for _, s := range plan.Create {
		if err := r.createSlice(ctx, s); err != nil {
			return 0, sliceBound{}, err
		}
	}
	for _, s := range plan.Update {
		if err := r.update(ctx, s, kindEndpointSlice); err != nil {
			return 0, sliceBound{}, fmt.Errorf("updating EndpointSlice %s: %w", s.Name, err)
		}
	}
	for _, s := range plan.Delete {
		err := r.remove(ctx, s, kindEndpointSlice, client.Preconditions{UID: &s.UID, ResourceVersion: &s.ResourceVersion})
		if client.IgnoreNotFound(err) != nil {
			return 0, sliceBound{}, fmt.Errorf("deleting EndpointSlice %s: %w", s.Name, err)
		}
	}
	// The changes are counted once written: a pass that failed and is
	// retried sees them again.
	r.state.update(key, func(b *backendState) { b.churn = history })
	// No event per sync: it would be a second API write for every slice
	// write, the very load the planner saves. Status and metrics count them.
	bound := r.sliceBoundOf(in, plan, r.Config.maxPerSlice(xb).size)
	return int32(len(in.Existing) + len(plan.Create) - len(plan.Delete)), bound, nil
}

// volatility sets in.Volatile to the endpoints of the backend that change
// often, counting the changes in's plan makes, and returns the history to
// keep once they are written.
func (r *Reconciler) volatility(key client.ObjectKey, in *sliceplan.Input) sliceplan.History {
	if r.Config.Churn.Window <= 0 {
		return nil
	}
	var history sliceplan.History
	r.state.lookup(key, func(b *backendState) { history = b.churn })
	now := r.Clock.Now()
	history = r.Config.Churn.Observe(history, sliceplan.Changed(*in), now)
	in.Volatile = r.Config.Churn.Volatile(history, now)
	return history
}

// cacheSeesAll tells whether cached, the backend's slices in the cache,
// are all the slices that can hold its endpoints. Only a sole writer can
// know (by its ledger of its own writes); without leader election another
// instance may have written a slice the cache does not show yet.
func (r *Reconciler) cacheSeesAll(key client.ObjectKey, cached []discoveryv1.EndpointSlice) bool {
	return r.Config.SoleWriter && r.store.ShowsAll(key, cached)
}

// onlyOwned keeps the slices that svc, as written, owns: a Service created
// in this pass owns none of the slices a former Service of its name left.
func onlyOwned(sl []discoveryv1.EndpointSlice, svc *corev1.Service) []discoveryv1.EndpointSlice {
	out := make([]discoveryv1.EndpointSlice, 0, len(sl))
	for i := range sl {
		if owns(&sl[i], svc.Name, svc.UID) {
			out = append(out, sl[i])
		}
	}
	return out
}

// liveSlices lists the Service's slices past the cache: those that are ours,
// and the names of all. The read is a consistent list, which waits for the
// API server's watch cache to catch up with etcd, so it is made only for
// plans that place endpoints.
func (r *Reconciler) liveSlices(ctx context.Context, svc *corev1.Service) ([]discoveryv1.EndpointSlice, sets.Set[string], error) {
	var live discoveryv1.EndpointSliceList
	if err := r.APIReader.List(ctx, &live, client.InNamespace(svc.Namespace),
		client.MatchingLabels{discoveryv1.LabelServiceName: svc.Name}); err != nil {
		return nil, nil, readFailed("listing EndpointSlices of Service "+svc.Name, err)
	}
	ours, taken := ownedBy(live.Items, svc.Name, svc)
	return ours, taken, nil
}

// sameVersions tells whether two lists hold the same slices at the same
// resource versions.
func sameVersions(a, b []discoveryv1.EndpointSlice) bool {
	if len(a) != len(b) {
		return false
	}
	versions := make(map[string]string, len(b))
	for _, s := range b {
		versions[s.Name] = s.ResourceVersion
	}
	for _, s := range a {
		if v, ok := versions[s.Name]; !ok || v != s.ResourceVersion {
			return false
		}
	}
	return true
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
		return readFailed("reading EndpointSlice "+s.Name+" that holds our slice's name", err)
	}
	owner := s.OwnerReferences[0]
	if !owns(live, owner.Name, owner.UID) || live.AddressType != s.AddressType {
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
	s.UID, s.Generation = live.UID, live.Generation
	if err := r.update(ctx, s, kindEndpointSlice); err != nil {
		return fmt.Errorf("updating EndpointSlice %s the cache had not shown yet: %w", s.Name, err)
	}
	return nil
}

// sliceSize is how many endpoints one slice of a backend holds, and,
// when the controller's floor raised the spec's value, the status note
// that says so.
type sliceSize struct {
	size  int32
	limit string
}

// maxPerSlice is the spec's limit or the controller's default, raised to
// the controller's floor (--min-endpoints-per-slice). The number of slices,
// and so the writes of every change that touches them all (a label on the
// Service), grows as the size shrinks: one endpoint a slice turns a tenant's
// 250 addresses into 250 writes per change, taken from every other
// namespace's share of the API server. The CRD accepts 1, as upstream's
// controller does for its operator-set flag; the floor is the platform
// team's choice.
func (c Config) maxPerSlice(xb *v1alpha1.ExternalBackend) sliceSize {
	n := ptr.Deref(xb.Spec.MaxEndpointsPerSlice, c.MaxEndpointsPerSlice)
	if floor := c.MinEndpointsPerSlice; n < floor {
		return sliceSize{size: floor, limit: fmt.Sprintf(
			"spec.maxEndpointsPerSlice %d is raised to the controller's floor of %d (--min-endpoints-per-slice)", n, floor)}
	}
	return sliceSize{size: n}
}
