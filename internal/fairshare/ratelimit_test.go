package fairshare

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// queued is how many requests wait, all flows together.
func (l *RateLimiter) queued() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, q := range l.queues {
		n += len(q)
	}
	return n
}

// waitQueued polls until n requests wait.
func waitQueued(t *testing.T, l *RateLimiter, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); l.queued() != n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests wait, want %d", l.queued(), n)
		}
	}
}

// grantOrder queues a request of each flow of arrive, one at a time so
// that their arrival order is known, calls queued once all wait, and
// returns the order their tokens came in.
func grantOrder(t *testing.T, l *RateLimiter, arrive []string, queued func()) []string {
	t.Helper()
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	for i, flow := range arrive {
		wg.Go(func() {
			if err := l.Wait(WithFlow(context.Background(), flow)); err != nil {
				t.Error(err)
			}
			mu.Lock()
			order = append(order, flow)
			mu.Unlock()
		})
		waitQueued(t, l, i+1)
	}
	queued()
	wg.Wait()
	return order
}

// TestRateLimiterServesFlowsInTurn queues requests of several flows behind
// an empty bucket, one at a time so that their arrival order is known, and
// checks the order the tokens go out in: flows take turns, each flow's
// requests in arrival order.
func TestRateLimiterServesFlowsInTurn(t *testing.T) {
	cases := []struct {
		name    string
		arrive  []string
		granted []string
	}{
		{
			name:    "one flow keeps its order",
			arrive:  []string{"a", "a", "a"},
			granted: []string{"a", "a", "a"},
		},
		{
			name:    "a late flow goes next, not behind the burst",
			arrive:  []string{"a", "a", "a", "a", "a", "b"},
			granted: []string{"a", "b", "a", "a", "a", "a"},
		},
		{
			name:    "three flows take turns",
			arrive:  []string{"a", "a", "a", "b", "b", "c"},
			granted: []string{"a", "b", "c", "a", "b", "a"},
		},
		{
			name:    "requests that name no namespace are a flow of their own",
			arrive:  []string{"a", "a", "a", "", "a"},
			granted: []string{"a", "", "a", "a", "a"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// 200 a second: a token every 5 ms, so the whole case takes
			// tens of milliseconds; the order does not depend on the rate.
			l := NewRateLimiter(200, 1)
			if !l.TryAccept() {
				t.Fatal("a new limiter has no token for the first request")
			}
			// Hold the dispatcher until every request is queued: the test
			// takes the dispatching role itself.
			l.mu.Lock()
			l.dispatching = true
			l.mu.Unlock()

			order := grantOrder(t, l, tc.arrive, func() { go l.dispatch() })
			if !slices.Equal(order, tc.granted) {
				t.Errorf("granted in the order %q, want %q", order, tc.granted)
			}
			if l.queued() != 0 || len(l.turns) != 0 {
				t.Errorf("after every grant: %d queued, turns %q", l.queued(), l.turns)
			}
		})
	}
}

// TestRateLimiterCancelledWaitLeavesItsQueue checks that a request whose
// context ends leaves the queue with the context's error, that the flow
// behind it is served, and that nothing is left waiting.
func TestRateLimiterCancelledWaitLeavesItsQueue(t *testing.T) {
	l := NewRateLimiter(200, 1)
	l.Accept()
	l.mu.Lock()
	l.dispatching = true
	l.mu.Unlock()

	ctx, cancel := context.WithCancel(WithFlow(context.Background(), "a"))
	gaveUp := make(chan error, 1)
	go func() { gaveUp <- l.Wait(ctx) }()
	waitQueued(t, l, 1)
	served := make(chan error, 1)
	go func() { served <- l.Wait(WithFlow(context.Background(), "b")) }()
	waitQueued(t, l, 2)

	cancel()
	if err := <-gaveUp; err == nil {
		t.Fatal("a cancelled wait returned no error")
	}
	waitQueued(t, l, 1)
	l.mu.Lock()
	turns := slices.Clone(l.turns)
	l.mu.Unlock()
	if !slices.Equal(turns, []string{"b"}) {
		t.Fatalf("turns after the cancel: %q, want [b]", turns)
	}
	go l.dispatch()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		l.mu.Lock()
		done := !l.dispatching
		l.mu.Unlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the dispatcher still runs with nothing queued")
		}
	}
}

// TestRateLimiterBurst checks the limiter is the plain token bucket while
// nobody waits: the burst passes at once, the next request does not.
func TestRateLimiterBurst(t *testing.T) {
	l := NewRateLimiter(1, 3)
	for i := range 3 {
		if !l.TryAccept() {
			t.Fatalf("request %d of a burst of 3 refused", i+1)
		}
	}
	if l.TryAccept() {
		t.Fatal("a fourth request passed a burst of 3 at 1 a second")
	}
	if l.QPS() != 1 {
		t.Fatalf("QPS %g, want 1", l.QPS())
	}
}

// TestRateLimiterCapsAFlowWhileOthersAsk checks when a flow is held to half
// the rate: only while another flow asked within the Window.
func TestRateLimiterCapsAFlowWhileOthersAsk(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	l := NewRateLimiter(50, 100)
	l.now = func() time.Time { return now }

	steps := []struct {
		name    string
		after   time.Duration
		flow    string
		wantCap bool
	}{
		{name: "a flow alone has the whole rate", flow: "attacker"},
		{name: "still alone", after: time.Second, flow: "attacker"},
		{name: "another flow asks, and is held to half too (it needs far less)", after: 10 * time.Millisecond, flow: "victim", wantCap: true},
		{name: "the busy flow is capped once another asked", after: 10 * time.Millisecond, flow: "attacker", wantCap: true},
		{name: "and stays capped within the window of the other's request", after: Window - 20*time.Millisecond, flow: "attacker", wantCap: true},
		{name: "the other flow went quiet: the whole rate again", after: 20 * time.Millisecond, flow: "attacker"},
	}
	for _, s := range steps {
		now = now.Add(s.after)
		capped := enterCap(l, s.flow)
		if (capped != nil) != s.wantCap {
			t.Fatalf("%s: capped %v, want %v", s.name, capped != nil, s.wantCap)
		}
		if capped != nil && (capped.Limit() != 25 || capped.Burst() != 50) {
			t.Fatalf("%s: cap of %g a second, bursts of %d; want half of 50 and of 100", s.name, float64(capped.Limit()), capped.Burst())
		}
	}
}

// TestRateLimiterCountsQueuedWorkAsAsking checks that a namespace whose
// work waits in the queue holds a busy one to half the rate before it has
// sent a request of its own: a quiet tenant finds tokens on arrival.
func TestRateLimiterCountsQueuedWorkAsAsking(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	l := NewRateLimiter(50, 100)
	l.now = func() time.Time { return now }
	q := newTestQueue(t, 3)
	l.CountDemand(q)
	if enterCap(l, "attacker") != nil {
		t.Fatal("a flow alone, with an empty queue, is capped")
	}
	q.Add(req("victim", "new"))
	now = now.Add(10 * time.Millisecond)
	if enterCap(l, "attacker") == nil {
		t.Fatal("the victim has work queued and has sent nothing yet: want the attacker capped")
	}
	q.Done(get(t, q))
	now = now.Add(Window + time.Millisecond)
	if enterCap(l, "attacker") != nil {
		t.Fatal("the victim's work is done: want the attacker's whole rate back")
	}
}

// enterCap is the cap enter gives flow, for the tests that do not look at
// the reserve.
func enterCap(l *RateLimiter, flow string) *rate.Limiter {
	capped, _ := l.enter(flow)
	return capped
}

// establish makes flow a flow that has asked for longer than the Window:
// two requests over the Window, then the clock a Window on from the first.
func establish(t *testing.T, l *RateLimiter, now *time.Time, flow string) {
	t.Helper()
	ctx := WithFlow(context.Background(), flow)
	for range 2 {
		if err := l.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		*now = now.Add(Window/2 + time.Millisecond)
	}
}

// waitBriefly waits for a token for at most 50 ms.
func waitBriefly(l *RateLimiter, flow string) error {
	ctx, cancel := context.WithTimeout(WithFlow(context.Background(), flow), 50*time.Millisecond)
	defer cancel()
	return l.Wait(ctx)
}

// TestRateLimiterKeepsAReserveForNewcomers checks that a flow asking for
// longer than the Window empties the bucket only down to a quarter of the
// burst, and that a flow that has just arrived takes that reserve at once,
// ahead of the busy flow's queued requests.
func TestRateLimiterKeepsAReserveForNewcomers(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	// One token a second: the bucket does not refill while the test runs.
	l := NewRateLimiter(1, 8)
	l.now = func() time.Time { return now }

	establish(t, l, &now, "busy")
	taken := 0
	for waitBriefly(l, "busy") == nil {
		taken++
	}
	// 8 tokens, 2 taken while it arrived, 2 left as the reserve.
	if taken != 4 {
		t.Fatalf("the busy flow took %d more tokens, want 4 (down to the reserve of 2)", taken)
	}

	queued := make(chan error, 1)
	ctx, cancel := context.WithCancel(WithFlow(context.Background(), "busy"))
	defer cancel()
	go func() { queued <- l.Wait(ctx) }()
	waitQueued(t, l, 1)
	for i := range 2 {
		if err := waitBriefly(l, "quiet"); err != nil {
			t.Fatalf("the newcomer's request %d of 2 waited behind the busy flow: %v", i+1, err)
		}
	}
	if l.queued() != 1 {
		t.Fatalf("%d requests wait, want the busy flow's one", l.queued())
	}
	if err := waitBriefly(l, "quiet"); err == nil {
		t.Fatal("the newcomer took a token from an empty bucket")
	}
	cancel()
	if err := <-queued; err == nil {
		t.Fatal("the busy flow's request was served from the reserve")
	}
}

// TestRateLimiterServesANewcomerFirstFromAnEmptyBucket checks the
// dispatcher's order when both wait: a newcomer's request, queued behind a
// busy flow's, gets the first token that comes; the busy flow's waits until
// the reserve is full again.
func TestRateLimiterServesANewcomerFirstFromAnEmptyBucket(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	// A token every 50 ms; a reserve of 2.
	l := NewRateLimiter(20, 8)
	l.now = func() time.Time { return now }
	establish(t, l, &now, "busy")
	for l.TryAccept() {
	}
	// Empty the reserve too, with a flow that has just arrived.
	for range 2 {
		if err := waitBriefly(l, "other"); err != nil {
			t.Fatal(err)
		}
	}

	order := grantOrder(t, l, []string{"busy", "quiet"}, func() {})
	if want := []string{"quiet", "busy"}; !slices.Equal(order, want) {
		t.Fatalf("granted in the order %q, want %q", order, want)
	}
}
