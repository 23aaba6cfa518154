package fairshare

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// req is the request of backend name in namespace ns.
func req(ns, name string) reconcile.Request {
	return reconcile.Request{NamespacedName: struct{ Namespace, Name string }{ns, name}}
}

// newTestQueue is a queue with a share of share and no retry delay.
func newTestQueue(t *testing.T, share int) *Queue {
	t.Helper()
	q := NewQueue(QueueOptions{Name: t.Name(), Share: share,
		RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](0, 0)})
	t.Cleanup(q.ShutDown)
	return q
}

// get takes the next item, failing the test when none comes within 10 s:
// every test queues items that are ready, so a wait that long is a bug.
func get(t *testing.T, q *Queue) reconcile.Request {
	t.Helper()
	got := make(chan reconcile.Request, 1)
	go func() {
		r, shutdown := q.Get()
		if !shutdown {
			got <- r
		}
	}()
	select {
	case r := <-got:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no item handed out")
		return reconcile.Request{}
	}
}

func TestQueueQuietNamespaceGoesWithinTheFirstTurns(t *testing.T) {
	q := newTestQueue(t, 3)
	for i := range 100 {
		q.Add(req("busy", fmt.Sprintf("b%d", i)))
	}
	q.Add(req("quiet", "q"))
	// One worker, done with each item before it takes the next.
	for turn := 1; turn <= 3; turn++ {
		r := get(t, q)
		q.Done(r)
		if r.Namespace == "quiet" {
			if turn > 2 {
				t.Fatalf("the quiet namespace's item went at turn %d, want within 2", turn)
			}
			return
		}
	}
	t.Fatal("the quiet namespace's item was not handed out within 3 turns of 101")
}

func TestQueueTurnsAreFairWhateverTheQueueLengths(t *testing.T) {
	q := newTestQueue(t, 1)
	for i := range 30 {
		q.Add(req("a", fmt.Sprintf("a%d", i)))
	}
	for i := range 3 {
		q.Add(req("b", fmt.Sprintf("b%d", i)))
		q.Add(req("c", fmt.Sprintf("c%d", i)))
	}
	var order []string
	for range 9 {
		r := get(t, q)
		q.Done(r)
		order = append(order, r.Namespace)
	}
	want := []string{"a", "b", "c", "a", "b", "c", "a", "b", "c"}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Fatalf("order %v, want %v", order, want)
	}
}

func TestQueueHoldsANamespaceToItsShareWhileAnotherWaits(t *testing.T) {
	q := newTestQueue(t, 3)
	for i := range 10 {
		q.Add(req("busy", fmt.Sprintf("b%d", i)))
	}
	// Alone, the namespace may take more than its share: no worker idles.
	var running []reconcile.Request
	for range 4 {
		running = append(running, get(t, q))
	}
	for _, r := range running {
		if r.Namespace != "busy" {
			t.Fatalf("got %v", r)
		}
	}
	// Two of them end; meanwhile the quiet namespace queues an item. The
	// busy namespace still runs 2, under its share: it may take one more,
	// then the quiet one's item must go before the busy one's fourth.
	q.Done(running[0])
	q.Done(running[1])
	q.Add(req("quiet", "q"))
	first, second := get(t, q), get(t, q)
	if first.Namespace != "quiet" && second.Namespace != "quiet" {
		t.Fatalf("the quiet item waited behind %v and %v", first, second)
	}
	if q.flows["busy"].running > 3 {
		t.Fatalf("busy runs %d while quiet waits, want at most its share 3", q.flows["busy"].running)
	}
}

func TestQueueNeverHandsAnItemToTwoWorkers(t *testing.T) {
	q := newTestQueue(t, 3)
	item := req("ns", "x")
	q.Add(item)
	q.Add(item)
	if n := q.Len(); n != 1 {
		t.Fatalf("Len after adding one item twice = %d, want 1", n)
	}
	got := get(t, q)
	// Added again while running: not ready until the worker is done.
	q.Add(item)
	if n := q.Len(); n != 0 {
		t.Fatalf("Len while the item runs = %d, want 0", n)
	}
	q.Done(got)
	if n := q.Len(); n != 1 {
		t.Fatalf("Len once the worker is done = %d, want 1 (added again meanwhile)", n)
	}
	q.Done(get(t, q))
	if n, known := q.Len(), len(q.items); n != 0 || known != 0 {
		t.Fatalf("after its last Done the queue holds %d ready and %d items, want none", n, known)
	}
}

func TestQueueDelaysAndPriorities(t *testing.T) {
	q := newTestQueue(t, 3)
	later := req("ns", "later")
	q.AddAfter(later, time.Hour)
	if n := q.Len(); n != 0 {
		t.Fatalf("an item due in an hour is ready: Len %d", n)
	}
	// Added again without a delay: the sooner time wins.
	q.Add(later)
	q.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(10)}, req("ns", "urgent"))
	q.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(10)}, req("other", "urgent"))
	// Highest priority first across namespaces, in turn among them.
	got := []reconcile.Request{get(t, q), get(t, q), get(t, q)}
	if got[0].Name != "urgent" || got[1].Name != "urgent" || got[2] != later {
		t.Fatalf("order %v, want both urgent items, then later", got)
	}
	// A short delay comes due by itself.
	q.AddAfter(req("ns", "soon"), 10*time.Millisecond)
	if r := get(t, q); r.Name != "soon" {
		t.Fatalf("got %v, want soon", r)
	}
}

func TestQueueBusyCountsQueuedAndRunningWork(t *testing.T) {
	q := newTestQueue(t, 3)
	if q.Busy("victim") {
		t.Fatal("an empty queue is busy")
	}
	q.AddAfter(req("attacker", "later"), time.Hour)
	if q.Busy("victim") {
		t.Fatal("an item due in an hour counts as queued work")
	}
	q.Add(req("attacker", "a"))
	if !q.Busy("victim") || q.Busy("attacker") {
		t.Fatal("a ready item of attacker: want Busy(victim) and not Busy(attacker)")
	}
	r := get(t, q)
	if !q.Busy("victim") {
		t.Fatal("a running item counts as work")
	}
	q.Done(r)
	if q.Busy("victim") {
		t.Fatal("the attacker's work is done, and it still counts")
	}
}

func TestQueueShutDownWakesWorkers(t *testing.T) {
	q := newTestQueue(t, 3)
	done := make(chan bool)
	go func() {
		_, shutdown := q.Get()
		done <- shutdown
	}()
	q.ShutDown()
	select {
	case shutdown := <-done:
		if !shutdown || !q.ShuttingDown() {
			t.Fatal("Get returned without shutdown after ShutDown")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a waiting worker was not woken by ShutDown")
	}
	q.Add(req("ns", "x"))
	if q.Len() != 0 {
		t.Fatal("a shut down queue took an item")
	}
}

func TestQueueKeepsTheLastWorkerForANamespaceRunningNothing(t *testing.T) {
	q := NewQueue(QueueOptions{Name: t.Name(), Share: 3, Workers: 5,
		RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](0, 0)})
	t.Cleanup(q.ShutDown)
	for i := range 10 {
		q.Add(req("busy", fmt.Sprintf("b%d", i)))
	}
	// Alone, the busy namespace takes four of the five workers, not the last.
	for range 4 {
		get(t, q)
	}
	q.mu.Lock()
	ns, ok := q.nextTurn()
	q.mu.Unlock()
	if ok {
		t.Fatalf("the last worker went to %s, which already runs 4", ns)
	}
	// A quiet namespace's backend takes it at once, with every other
	// worker still held.
	q.Add(req("quiet", "q"))
	if r := get(t, q); r.Namespace != "quiet" {
		t.Fatalf("the last worker went to %v", r)
	}
}
