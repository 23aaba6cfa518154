package externalbackend

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/coalesce"
	"github.com/backendslice/backendslice/providers"
)

// TestReleaseLeavesNothing drives a backend through passes that fill every
// part of its record, releases it, and checks that nothing of it is left:
// the store is empty, and every step that remembers behaves as for a
// backend it never saw. A part kept outside the record would survive the
// release and fail the second half; a part added to the record that these
// passes do not fill fails the first.
func TestReleaseLeavesNothing(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 3, 6, 0, 0, 0, time.UTC)
	clock := clocktesting.NewFakeClock(now)
	xb := stepBackend(2)
	key := client.ObjectKeyFromObject(xb)
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(xb).
		WithStatusSubresource(xb).WithIndex(&discoveryv1.EndpointSlice{}, BackendIndex, backendOf).Build()
	var liveReads int
	live := interceptor.NewClient(c, interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			liveReads++
			return c.List(ctx, list, opts...)
		},
	})
	r := stepReconciler(t, clock, Config{SoleWriter: true, ResolveTimeout: time.Second,
		Coalesce: coalesce.Window{Quiet: time.Second, Max: 5 * time.Second}, Churn: DefaultChurn()}, c)
	r.APIReader = live
	p := &scripted{eps: []providers.Endpoint{{Address: "192.0.2.1", Serving: true}}}
	r.Providers = newResolver(t, p).Providers
	r.recreations = newRetryBuckets()
	both := sets.New(corev1.IPv4Protocol, corev1.IPv6Protocol)
	svc := desiredService(xb, []corev1.IPFamily{corev1.IPv4Protocol})
	vanished := servedEndpoint(discoveryv1.AddressTypeIPv4, "192.0.2.9", 5432)
	seen := observed{served: both, slices: published(t, xb, svc, vanished)}

	// The passes: the source answers, 192.0.2.9 drains and the coalescing
	// window lets the first answer through; the Service and slices are
	// written, status patched, and the Service recreated twice.
	res := r.resolveSources(ctx, xb, admitted(xb))
	pub, next := r.publication(ctx, xb, res, seen)
	if len(pub.Draining) != 1 || pub.Held {
		t.Fatalf("first pass: draining %v, held %t; want 192.0.2.9 draining, nothing held", pub.Draining, pub.Held)
	}
	if err := r.create(ctx, svc, kindService); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.syncSlices(ctx, xb, svc, true, pub, observed{served: both}); err != nil {
		t.Fatal(err)
	}
	r.state.remember(key, next)
	before := xb.DeepCopy()
	xb.Status.Slices = 1
	if err := r.patchStatus(ctx, before, xb, nil); err != nil {
		t.Fatal(err)
	}
	// A status that only lacks readyEndpoints: the catch-up is held.
	caughtUp := xb.DeepCopy()
	caughtUp.Status.ReadyEndpoints = "1/1"
	if turn := r.statusTurn(xb, caughtUp, true, 0); turn.write || turn.slot.IsZero() {
		t.Fatalf("catch-up: %+v, want it held with a slot", turn)
	}
	for attempt, want := range []time.Duration{retryBaseDelay, 2 * retryBaseDelay} {
		if got := r.recreateAfter(key, true); got != want {
			t.Fatalf("recreation %d: look again after %v, want %v", attempt, got, want)
		}
	}
	var ours discoveryv1.EndpointSliceList
	if err := c.List(ctx, &ours); err != nil || len(ours.Items) == 0 {
		t.Fatalf("the pass wrote no slice: %v", err)
	}
	if !r.cacheSeesAll(key, ours.Items) {
		t.Fatal("the ledger does not trust a cache that shows our writes")
	}
	if !r.state.lookup(key, func(b *backendState) {
		v := reflect.ValueOf(*b)
		for i := range v.NumField() {
			if v.Field(i).IsZero() {
				t.Errorf("the passes left %s empty: fill it here, so that its release is checked", v.Type().Field(i).Name)
			}
		}
	}) {
		t.Fatal("the passes made no record")
	}

	r.release(key)
	if n := r.state.Len(); n != 0 {
		t.Fatalf("%d record(s) left after the release", n)
	}

	// As for a backend never seen. Someone else edits status: with no
	// status of ours remembered, the cached copy is read as it is.
	xb.Status.Slices = 7
	if err := c.Status().Update(ctx, xb); err != nil {
		t.Fatal(err)
	}
	liveReads = 0
	if _, err := r.store.Backend(ctx, key); err != nil || liveReads != 0 {
		t.Errorf("status: load made %d live read(s) (%v), want none", liveReads, err)
	}
	if r.cacheSeesAll(key, ours.Items) {
		t.Error("ledger: the cache is trusted without a list")
	}
	if !r.store.NotEchoes(kindEndpointSlice).Create(event.CreateEvent{Object: &ours.Items[0]}) {
		t.Error("own writes: the event of a slice written before the release is taken for an echo")
	}
	if got := r.recreateAfter(key, true); got != retryBaseDelay {
		t.Errorf("recreate backoff: %v, want %v", got, retryBaseDelay)
	}
	// A catch-up found again takes a slot of its own from now, and a
	// change is written at once, with no priority from a forgotten hold.
	clock.Step(time.Hour)
	caughtUp = xb.DeepCopy()
	caughtUp.Status.ReadyEndpoints = "1/1"
	if turn := r.statusTurn(xb, caughtUp, true, 0); turn.write || !turn.slot.Equal(clock.Now().Add(catchUpDelay)) {
		t.Errorf("catch-up: %+v, want it held until %v", turn, clock.Now().Add(catchUpDelay))
	}
	r.release(key)
	if turn := r.statusTurn(xb, caughtUp, false, 0); !turn.write || turn.priority != nil {
		t.Errorf("catch-up of a retry: %+v, want it written with the priority kept", turn)
	}
	p.err = providers.Transient(errors.New("timeout"))
	if res := r.resolveSources(ctx, xb, admitted(xb)); res.results[0].Held || !res.holdVanished {
		t.Errorf("answers: a failing source holds %+v, want nothing known", res.results[0])
	}
	// A new answer: a forgotten window lets it through, and 192.0.2.9
	// drains from now, not from the first pass.
	clock.Step(10 * time.Second)
	p.err, p.eps = nil, []providers.Endpoint{{Address: "192.0.2.2", Serving: true}}
	pub, _ = r.publication(ctx, xb, r.resolveSources(ctx, xb, admitted(xb)), seen)
	if pub.Held {
		t.Error("coalescing: a new answer is held back by the window of the released backend")
	}
	i := slices.IndexFunc(pub.Draining, func(d v1alpha1.DrainingEndpoint) bool { return d.Address == vanished.Address })
	if i < 0 || !pub.Draining[i].Since.Time.Equal(clock.Now()) {
		t.Errorf("drains: %v, want %s draining since now (%v)", pub.Draining, vanished.Address, clock.Now())
	}
}

// TestBackendStateIsOwnMemory: a backend's record holds its own memory
// only (answers, drains, the coalescing window, churn, Service recreations
// and a held catch-up); what the cache can be trusted for is the slice
// store's.
func TestBackendStateIsOwnMemory(t *testing.T) {
	const most = 6
	if n := reflect.TypeFor[backendState]().NumField(); n > most {
		t.Errorf("backendState has %d fields, at most %d: what is about the cache belongs in internal/slicestore", n, most)
	}
}

func TestRetryDelay(t *testing.T) {
	for _, c := range []struct {
		attempt int
		want    time.Duration
	}{
		{0, 5 * time.Millisecond},
		{1, 10 * time.Millisecond},
		{4, 80 * time.Millisecond},
		{13, 40960 * time.Millisecond},
		{14, maxRetryDelay},
		{1000, maxRetryDelay},
	} {
		if got := retryDelay(c.attempt); got != c.want {
			t.Errorf("retryDelay(%d) = %v, want %v", c.attempt, got, c.want)
		}
	}
}
