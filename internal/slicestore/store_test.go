package slicestore

import (
	"context"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/backendslice/backendslice/api/v1alpha1"
)

// counted is a fake API server holding objs, and the number of lists made
// through it.
func counted(t *testing.T, objs ...client.Object) (client.Client, *int) {
	t.Helper()
	var lists int
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithInterceptorFuncs(interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			lists++
			return c.List(ctx, list, opts...)
		},
	}).Build()
	return c, &lists
}

// metaOf is the metadata the cache shows of s.
func metaOf(s *discoveryv1.EndpointSlice) metav1.PartialObjectMetadata {
	m := SliceMeta()
	m.ObjectMeta = *s.ObjectMeta.DeepCopy()
	return *m
}

// ourSlice is slice name of backend db at uid and generation, holding addr.
func ourSlice(name string, uid types.UID, generation int64, addr string) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: uid, Generation: generation,
			Labels: map[string]string{v1alpha1.BackendLabel: "db"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{addr}}},
	}
}

// TestSlicesReadsOnlyWhatItDoesNotKnow: the content of a slice at the
// generation the cache shows comes from what the store kept of our write;
// a generation it does not know (someone else's write) is read past the
// cache, once, and kept.
func TestSlicesReadsOnlyWhatItDoesNotKnow(t *testing.T) {
	ctx := context.Background()
	key := types.NamespacedName{Namespace: "ns", Name: "db"}
	theirs := ourSlice("db-0", "u0", 3, "192.0.2.3")
	live, lists := counted(t, theirs)
	s := New(live, live, nil)
	s.primed.try(ctx, func(context.Context) error { return nil })

	ours := ourSlice("db-0", "u0", 2, "192.0.2.2")
	s.Wrote(ours, EndpointSlice, false)
	got, err := s.Slices(ctx, key, []metav1.PartialObjectMetadata{metaOf(ours)})
	if err != nil || *lists != 0 || len(got) != 1 || got[0].Endpoints[0].Addresses[0] != "192.0.2.2" {
		t.Fatalf("our write's generation: %v, %d list(s), %+v; want what we wrote, no list", err, *lists, got)
	}
	got[0].Endpoints[0].Addresses[0] = "changed by the planner"
	for range 2 {
		got, err = s.Slices(ctx, key, []metav1.PartialObjectMetadata{metaOf(theirs)})
		if err != nil || *lists != 1 || len(got) != 1 || got[0].Endpoints[0].Addresses[0] != "192.0.2.3" {
			t.Fatalf("someone else's generation: %v, %d list(s), %+v; want the live slice, one list", err, *lists, got)
		}
	}
	gone := ourSlice("db-1", "u1", 1, "192.0.2.4")
	if got, err = s.Slices(ctx, key, []metav1.PartialObjectMetadata{metaOf(gone)}); err != nil || len(got) != 0 {
		t.Errorf("a slice the live list no longer has: %v, %+v; want it left out", err, got)
	}
}

// TestForgetLeavesNothing fills every part of a backend's record through
// the store's surface, forgets the backend, and checks that each part
// behaves as for a backend never seen. A part added to the record that
// this test does not fill fails its first half.
func TestForgetLeavesNothing(t *testing.T) {
	ctx := context.Background()
	key := types.NamespacedName{Namespace: "ns", Name: "db"}
	xb := &v1alpha1.ExternalBackend{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db", ResourceVersion: "7"}}
	slice := ourSlice("db-0", "u0", 1, "192.0.2.1")
	live, lists := counted(t, xb, slice)
	s := New(live, live, func(seen, wrote *corev1.Service) bool { return true })
	s.primed.try(ctx, func(context.Context) error { return nil })

	s.SawStatus(xb)
	s.Trust(key, []discoveryv1.EndpointSlice{*slice}, nil)
	s.Writing(slice, EndpointSlice, false)
	s.lookup(key, func(b *record) {
		v := reflect.ValueOf(*b)
		for i := range v.NumField() {
			if v.Field(i).IsZero() {
				t.Errorf("%s left empty: fill it here, so that Forget is checked", v.Type().Field(i).Name)
			}
		}
	})

	s.Forget(key)
	if n := s.records.Len(); n != 0 {
		t.Fatalf("%d record(s) left", n)
	}
	if s.ShowsAll(key, []discoveryv1.EndpointSlice{*slice}) {
		t.Error("ledger: the cache is trusted without a list")
	}
	if !s.NotEchoes(EndpointSlice).Create(event.CreateEvent{Object: slice}) {
		t.Error("echoes: the event of a write made before Forget is taken for ours")
	}
	if _, err := s.Slices(ctx, key, []metav1.PartialObjectMetadata{metaOf(slice)}); err != nil || *lists != 1 {
		t.Errorf("contents: %v, %d list(s); want the slice read past the cache", err, *lists)
	}
	s.Forget(key)
	xb.Status.Slices = 3
	if err := live.Update(ctx, xb); err != nil {
		t.Fatal(err)
	}
	*lists = 0
	if _, err := s.Backend(ctx, key); err != nil || *lists != 0 {
		t.Errorf("status: %v, %d list(s); want the cached copy as it is", err, *lists)
	}
}
