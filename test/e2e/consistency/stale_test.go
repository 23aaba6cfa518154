package consistency

import (
	"context"
	"slices"
	"sync"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/controllers/externalbackend"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// staleView is a client whose EndpointSlice lists come from a snapshot once
// freeze is called, as from an informer cache that stopped receiving events.
// Everything else reads and writes the API server directly.
type staleView struct {
	client.Client
	mu       sync.Mutex
	snapshot *discoveryv1.EndpointSliceList
}

// freeze takes the snapshot that lists return from now on.
func (v *staleView) freeze(t *testing.T) {
	t.Helper()
	snap := &discoveryv1.EndpointSliceList{}
	if err := v.Client.List(ctx, snap); err != nil {
		t.Fatal(err)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.snapshot = snap
}

// List serves EndpointSlice lists from the snapshot, once taken, filtered
// by namespace and labels as a cache would.
func (v *staleView) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	v.mu.Lock()
	snap := v.snapshot
	v.mu.Unlock()
	out, ok := list.(*discoveryv1.EndpointSliceList)
	if !ok || snap == nil {
		return v.Client.List(ctx, list, opts...)
	}
	o := (&client.ListOptions{}).ApplyOptions(opts)
	out.Items = nil
	for _, s := range snap.Items {
		if (o.Namespace == "" || s.Namespace == o.Namespace) &&
			(o.LabelSelector == nil || o.LabelSelector.Matches(labels.Set(s.Labels))) {
			out.Items = append(out.Items, *s.DeepCopy())
		}
	}
	return nil
}

// reconcile runs r until a pass ends without error, as the work queue
// would; a conflict with another writer or a requeue takes another pass.
func reconcile(t *testing.T, r *externalbackend.Reconciler, xb *v1alpha1.ExternalBackend) {
	t.Helper()
	var err error
	for range 10 {
		if _, err = r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(xb)}); err == nil {
			return
		}
	}
	t.Fatalf("reconciling %s: %v", xb.Name, err)
}

// TestStaleCacheNeverPublishesTwice runs two instances by hand: a fresh one
// and one whose slice cache stopped after the first sync. The fresh one
// puts new endpoints into a new slice -1; the stale one, which does not see
// -1, then reconciles a removal from slice -0 and plans to refill -0 with
// -1's endpoints, with -0's resourceVersion still current. At no point may
// an address be in two slices, and the fresh instance converges to exactly
// the desired endpoints. Removed endpoints go at once (no drain period), so
// that -0 has room.
func TestStaleCacheNeverPublishesTwice(t *testing.T) {
	ns := framework.Namespace(t)
	dups := watchDuplicates(t, ns, "db")
	direct := directClient(t)
	fresh := newReconciler(t, newManager(t), direct)
	view := &staleView{Client: direct}
	stale := newReconciler(t, newManager(t), view)

	first, added := addresses("192.0.2.", 50), addresses("198.51.100.", 60)
	xb := backend(ns, "db", staticEndpoints(first...))
	xb.Spec.DrainPeriod = &metav1.Duration{}
	framework.Create(t, xb)
	reconcile(t, fresh, xb)
	framework.WaitAddresses(t, ns, "db", first...)
	view.freeze(t)

	setEndpoints(t, xb, staticEndpoints(append(slices.Clone(first), added...)...))
	reconcile(t, fresh, xb)
	framework.WaitAddresses(t, ns, "db", append(slices.Clone(first), added...)...)

	final := append(slices.Clone(first[20:]), added...)
	setEndpoints(t, xb, staticEndpoints(final...))
	// The stale instance may fail (a conflict): what it wrote, if
	// anything, must not publish an address twice.
	_, staleErr := stale.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(xb)})
	t.Logf("stale instance: %v", staleErr)
	reconcile(t, fresh, xb)
	framework.WaitAddresses(t, ns, "db", final...)
	dups.check(t)
}

// TestSoleWriterListsWhileItsWritesAreUnseen runs one instance that is the
// sole writer (as under leader election), whose slice cache stopped after
// its first pass, so that it trusts its cache only while the cache shows
// its own writes. Its second pass puts new endpoints into a new slice -1,
// which the cache never shows; its third removes endpoints from -0 and
// adds more. Planned from the cache, -0 (its resourceVersion still
// current) would take -1's endpoints too. The instance must see that its
// cache does not show -1, list the slices, and never publish an address
// twice.
func TestSoleWriterListsWhileItsWritesAreUnseen(t *testing.T) {
	ns := framework.Namespace(t)
	dups := watchDuplicates(t, ns, "db")
	view := &staleView{Client: directClient(t)}
	r := newReconciler(t, newManager(t), view)
	r.Config.SoleWriter = true

	first, added, more := addresses("192.0.2.", 100), addresses("198.51.100.", 10), addresses("198.51.100.", 20)[10:]
	xb := backend(ns, "db", staticEndpoints(first...))
	xb.Spec.DrainPeriod = &metav1.Duration{}
	framework.Create(t, xb)
	reconcile(t, r, xb)
	framework.WaitAddresses(t, ns, "db", first...)
	view.freeze(t)

	all := append(slices.Clone(first), added...)
	setEndpoints(t, xb, staticEndpoints(all...))
	reconcile(t, r, xb)
	framework.WaitAddresses(t, ns, "db", all...)

	final := append(append(slices.Clone(first[20:]), added...), more...)
	setEndpoints(t, xb, staticEndpoints(final...))
	reconcile(t, r, xb)
	framework.WaitAddresses(t, ns, "db", final...)
	dups.check(t)
}
