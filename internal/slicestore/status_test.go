package slicestore

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/backendslice/backendslice/api/v1alpha1"
)

// TestCurrentReadsPastAStaleCache: a cached backend older than this
// process's own last status patch is read again from the API server, since
// a status diff from the older copy would leave the newer status's fields
// in place; a cache that caught up, or that shows our status at a later
// version, costs no read.
func TestCurrentReadsPastAStaleCache(t *testing.T) {
	stale := &v1alpha1.ExternalBackend{ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: "db", Generation: 2}}
	stale.Status.Draining = []v1alpha1.DrainingEndpoint{{Address: "192.0.2.9"}}
	fresh := stale.DeepCopy()
	fresh.Status.Draining = nil
	cache := fake.NewClientBuilder().WithScheme(scheme).WithObjects(stale).Build()
	var liveReads int
	// The API server selects by metadata.name itself; the fake needs an index.
	byName := func(o client.Object) []string { return []string{o.GetName()} }
	live := fake.NewClientBuilder().WithScheme(scheme).WithObjects(fresh).
		WithIndex(&v1alpha1.ExternalBackend{}, "metadata.name", byName).WithInterceptorFuncs(interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			liveReads++
			return c.List(ctx, list, opts...)
		},
	}).Build()
	r := New(cache, live, nil)
	key := client.ObjectKeyFromObject(stale)

	if _, err := r.Backend(context.Background(), key); err != nil || liveReads != 0 {
		t.Fatalf("nothing written yet: %v, %d live reads, want none", err, liveReads)
	}
	r.update(key, func(b *record) {
		b.status = &statusSeen{resourceVersion: "our-patch", digest: statusDigest(&fresh.Status)}
	})
	xb, err := r.Backend(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if liveReads != 1 || len(xb.Status.Draining) != 0 {
		t.Fatalf("cache older than our patch: %d live reads, draining %v; want the live copy", liveReads, xb.Status.Draining)
	}
	if _, err := r.Backend(context.Background(), key); err != nil || liveReads != 1 {
		t.Errorf("cache at the version read live: %v, %d live reads, want no more", err, liveReads)
	}
	// A spec edit since our patch: another version, with our status.
	r.update(key, func(b *record) {
		b.status = &statusSeen{resourceVersion: "our-patch", digest: statusDigest(&stale.Status)}
	})
	if _, err := r.Backend(context.Background(), key); err != nil || liveReads != 1 {
		t.Errorf("cache at a later version showing our status: %v, %d live reads, want no more", err, liveReads)
	}
}

// scheme knows the kinds the store reads.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	return s
}()
