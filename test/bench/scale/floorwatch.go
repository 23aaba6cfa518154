//go:build bench

package scale

import (
	"context"
	"flag"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/controllers/externalbackend"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// floorWatches adds rows to each scenario: the floor (bare client + status
// patch) again, with watches standing for the controller's, full and
// metadata-only, so that what serving the controller's own watches costs the
// API server, and what metadata-only watches would save, are measured in
// the same run as the floor and ours.
var floorWatches = flag.Bool("floorwatches", true, "also run the floor with the controller's watches, full and metadata-only, beside it")

// floorWatchVariant is a set of watches the floor runs beside.
type floorWatchVariant struct {
	name, description string
	watch             func(ctx context.Context, t *testing.T) func()
}

// floorWatched is the floor's run beside one variant's watches.
type floorWatched struct {
	variant       floorWatchVariant
	empty, change bareRun
}

// floorWatchVariants: the controller's watches of ExternalBackends,
// Services and slices (its cache options: our label, the transforms) as
// they are (slices as metadata only), as they were before (slices whole),
// and with Services as metadata only too.
var floorWatchVariants = []floorWatchVariant{
	{name: "whole", description: "Services and slices watched whole (the controller's watches before slices were metadata only)", watch: func(ctx context.Context, t *testing.T) func() {
		return controllerWatches(ctx, t, &corev1.Service{}, &discoveryv1.EndpointSlice{})
	}},
	{name: "watched", description: "the controller's watches (slices as metadata only)", watch: func(ctx context.Context, t *testing.T) func() {
		return controllerWatches(ctx, t, &corev1.Service{}, metadataOf("discovery.k8s.io/v1", "EndpointSlice"))
	}},
	{name: "metadata", description: "the controller's watches, Services as metadata only too", watch: func(ctx context.Context, t *testing.T) func() {
		return controllerWatches(ctx, t, metadataOf("v1", "Service"), metadataOf("discovery.k8s.io/v1", "EndpointSlice"))
	}},
}

// metadataOf is the metadata-only form of a kind, for a cache's informer.
func metadataOf(apiVersion, kind string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}}
}

// controllerWatches starts a cache built with the controller's cache
// options, watching ExternalBackends and the given forms of Services and
// slices, waits for it to sync, and returns what stops it.
func controllerWatches(ctx context.Context, t *testing.T, svc, slice client.Object) func() {
	t.Helper()
	env := framework.E()
	opts, err := externalbackend.CacheOptions("")
	if err != nil {
		t.Fatal(err)
	}
	// The metadata-only forms take the label selector and transform of
	// their kind.
	for o, by := range opts.ByObject {
		switch o.(type) {
		case *corev1.Service:
			delete(opts.ByObject, o)
			opts.ByObject[svc] = by
		case *discoveryv1.EndpointSlice:
			delete(opts.ByObject, o)
			opts.ByObject[slice] = by
		}
	}
	opts.Scheme = env.Client.Scheme()
	c, err := cache.New(env.Config(), opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []client.Object{&v1alpha1.ExternalBackend{}, svc, slice} {
		if _, err := c.GetInformer(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := c.Start(ctx); err != nil {
			t.Error(err)
		}
	}()
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("the floor's watches did not sync")
	}
	return func() { cancel(); <-done }
}

// controllersWatches is the floor's run beside the watches the controller
// makes.
func (r result) controllersWatches() floorWatched {
	for _, w := range r.floorWatched {
		if w.variant.name == "watched" {
			return w
		}
	}
	return floorWatched{}
}
