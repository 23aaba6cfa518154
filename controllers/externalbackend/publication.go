package externalbackend

import (
	"context"
	"fmt"
	"slices"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/decide"
	"github.com/backendslice/backendslice/internal/publish"
)

// publication is what to publish (decide.Publication), and what the
// probes did to the endpoints.
type publication struct {
	decide.Publication
	// probes is what the probes did to the endpoints.
	probes probeOutcome
}

// publication works out what to publish from what the sources said and what
// is published, through the pure decision (internal/decide): normalised and
// limited to the families the cluster serves, then probed, then drained,
// bounded and coalesced. It returns the backend's memory to keep once the
// writes that publish it succeed (see sync); the memory kept now is left
// as it is.
func (r *Reconciler) publication(ctx context.Context, xb *v1alpha1.ExternalBackend, res resolved, seen observed) (publication, decide.Memory) {
	in := decide.Inputs{
		Backend:   xb,
		Sources:   res.sources(),
		Published: seen.slices,
		Served:    seen.served,
		Cluster:   seen.cluster,
		Now:       r.Clock.Now(),
		Config:    r.Config.Decision(),
	}
	in.Candidates = decide.Normalize(in)
	logClusterAddresses(ctx, in.Candidates.Dropped, seen.cluster)
	var pub publication
	in.Candidates.Endpoints, pub.probes = r.applyProbes(ctx, xb, res, in.Candidates.Endpoints)
	var mem decide.Memory
	r.state.lookup(client.ObjectKeyFromObject(xb), func(b *backendState) { mem = b.memory })
	var next decide.Memory
	pub.Publication, next = decide.Decide(in, mem)
	if pub.Held {
		log.FromContext(ctx).V(1).Info("holding a provider change in the coalescing window", "for", pub.RequeueAfter)
		r.Metrics.heldBack()
	}
	return pub, next
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
