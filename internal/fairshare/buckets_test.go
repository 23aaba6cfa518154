package fairshare

import (
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

func TestBucketsAreOnePerNamespace(t *testing.T) {
	now := time.Unix(0, 0)
	b := NewBuckets(10, 100)
	b.now = func() time.Time { return now }
	// A thousand failing backends of one namespace reserve its bucket far
	// ahead...
	var last time.Duration
	for range 1000 {
		last = b.Delay("failing")
	}
	if last < 80*time.Second {
		t.Fatalf("the 1000th retry of one namespace waits %s, want about 90 s", last)
	}
	// ...and another namespace's first retry does not wait for them.
	if d := (RetryBuckets{b}).When(reconcile.Request{NamespacedName: struct{ Namespace, Name string }{"quiet", "x"}}); d != 0 {
		t.Fatalf("another namespace's first retry waits %s, want 0", d)
	}
	if b.Len() != 2 {
		t.Fatalf("%d buckets, want 2", b.Len())
	}
	// Once refilled, buckets are forgotten: memory follows recent spenders.
	now = now.Add(10 * time.Minute)
	b.Delay("third")
	if b.Len() != 1 {
		t.Fatalf("%d buckets after the others refilled, want 1 (the one just used)", b.Len())
	}
}
