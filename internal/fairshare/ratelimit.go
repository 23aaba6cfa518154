package fairshare

import (
	"context"
	"slices"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// RateLimiter is the client-side limit on the controller's API requests
// (--kube-api-qps, --kube-api-burst), shared fairly between namespaces.
//
// client-go's own limiter is one token bucket served in arrival order: while
// one tenant's backends keep the bucket empty, every other tenant's request
// waits behind all of theirs, so one namespace's churn slows everyone's
// Ready, health flips and revocations. Here a request that finds the bucket
// empty joins its namespace's queue, and the tokens go to the queues in
// turn: a request waits for at most one token per other namespace that is
// waiting, however many requests one namespace has queued. While nobody
// waits it is the plain token bucket, with the same rate and burst.
//
// Taking turns bounds a request's wait by the number of waiting flows, but
// a tenant that keeps the bucket empty still makes every other request wait
// for a token to come. So while another flow has asked within the Window,
// a flow may take at most half the rate (its own bucket of half the rate
// and burst): the other half refills the shared bucket, and the quiet
// tenants' requests find tokens there at once. A flow alone has the whole
// rate, as a fleet in one namespace must.
//
// A namespace counts as asking from the moment it has work queued or
// running (Demand, the work queue), not only once it has sent a request:
// a quiet tenant's first reconcile finds the busy tenant already held to
// half the rate.
//
// Halving the busy flow's rate frees tokens only as the bucket refills,
// and a flow alone keeps the bucket empty: a quiet tenant's first
// requests would each still wait for a token. So a quarter of the burst is
// a reserve that a flow which has been asking for longer than the Window
// may not take; a flow that has just arrived takes from it at once. A
// busy flow alone still has the whole rate, and the reserve is full
// whenever a quiet tenant arrives.
//
// The namespace is the flow its context names (WithFlow); requests that
// name none (informers, cluster-scoped objects, the leader lease) share one
// flow of their own. It implements client-go's flowcontrol.RateLimiter.
type RateLimiter struct {
	bucket *rate.Limiter
	qps    float32
	burst  int
	// reserve is how many of the bucket's tokens only a newcomer flow may
	// take.
	reserve int
	now     func() time.Time

	mu sync.Mutex
	// flows holds, for each flow that asked within the Window, its own
	// bucket of half the rate and when it last asked.
	flows map[string]*flowState
	// queues holds each flow's waiting requests, oldest first; turns the
	// flows that have some, in the order they are served.
	queues map[string][]*waiter
	turns  []string
	// dispatching is true while a goroutine hands tokens to the queues; it
	// ends when they are empty. queuedNewcomer wakes it when a newcomer's
	// request, which needs fewer tokens than it waits for, joins a queue.
	dispatching    bool
	queuedNewcomer chan struct{}
	// demand tells which namespaces have work queued; nil until the work
	// queue starts.
	demand Demand
}

// Demand tells whether a namespace other than ns has work queued or
// running (Queue.Busy).
type Demand interface {
	Busy(ns string) bool
}

// CountDemand makes the limiter count the namespaces with work in d as
// asking. The work queue is made when the controller starts, after the
// clients and their limiter.
func (l *RateLimiter) CountDemand(d Demand) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.demand = d
}

// flowState is one flow's cap while others ask too, and when it started
// and last asked.
type flowState struct {
	cap     *rate.Limiter
	arrived time.Time
	asked   time.Time
}

// waiter is one request waiting for a token; a newcomer's may take the
// reserve.
type waiter struct {
	newcomer bool
	granted  bool
	ready    chan struct{}
}

// NewRateLimiter returns a limiter of qps requests a second with bursts of
// burst.
func NewRateLimiter(qps float32, burst int) *RateLimiter {
	burst = max(burst, 1)
	return &RateLimiter{
		bucket:         rate.NewLimiter(rate.Limit(qps), burst),
		qps:            qps,
		burst:          burst,
		reserve:        burst / 4,
		now:            time.Now,
		flows:          map[string]*flowState{},
		queues:         map[string][]*waiter{},
		queuedNewcomer: make(chan struct{}, 1),
	}
}

type flowKey struct{}

// WithFlow names the flow, a namespace, whose share of the limiter the
// requests made with ctx take.
func WithFlow(ctx context.Context, namespace string) context.Context {
	return context.WithValue(ctx, flowKey{}, namespace)
}

func flowOf(ctx context.Context) string {
	ns, _ := ctx.Value(flowKey{}).(string)
	return ns
}

// Wait returns once the request may be sent, or with the context's error
// when it ends first.
func (l *RateLimiter) Wait(ctx context.Context) error {
	flow := flowOf(ctx)
	capped, newcomer := l.enter(flow)
	if capped != nil {
		if err := capped.Wait(ctx); err != nil {
			return err
		}
	}
	l.mu.Lock()
	if l.takeNow(newcomer) {
		l.mu.Unlock()
		return nil
	}
	w := &waiter{newcomer: newcomer, ready: make(chan struct{})}
	if len(l.queues[flow]) == 0 {
		l.turns = append(l.turns, flow)
	}
	l.queues[flow] = append(l.queues[flow], w)
	if !l.dispatching {
		l.dispatching = true
		go l.dispatch()
	} else if newcomer {
		select {
		case l.queuedNewcomer <- struct{}{}:
		default:
		}
	}
	l.mu.Unlock()

	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		l.mu.Lock()
		defer l.mu.Unlock()
		if w.granted {
			// The token came as the context ended: the request may go.
			return nil
		}
		l.remove(flow, w)
		return ctx.Err()
	}
}

// tokensNeeded is how many tokens the bucket must hold for a request to
// take one: a flow already asking leaves the reserve.
func (l *RateLimiter) tokensNeeded(newcomer bool) float64 {
	if newcomer {
		return 1
	}
	return float64(l.reserve + 1)
}

// takeNow takes a token for a request that need not queue: nobody waits,
// or the request is a newcomer's and the waiting requests are of flows
// already asking, which may not take the reserve it takes from. l.mu is
// held.
func (l *RateLimiter) takeNow(newcomer bool) bool {
	if len(l.turns) == 0 {
		return l.takeToken(newcomer)
	}
	if !newcomer || l.bucket.Tokens() >= l.tokensNeeded(false) {
		// The tokens are the waiting requests'.
		return false
	}
	for _, flow := range l.turns {
		if l.queues[flow][0].newcomer {
			// Another newcomer waits for the reserve: this one queues
			// behind it.
			return false
		}
	}
	return l.takeToken(true)
}

// takeToken takes a token from the bucket if it holds enough for the
// request. l.mu is held.
func (l *RateLimiter) takeToken(newcomer bool) bool {
	return l.bucket.Tokens() >= l.tokensNeeded(newcomer) && l.bucket.Allow()
}

// enter notes that flow asks. It returns the flow's own bucket of half the
// rate when another flow asked within the Window or has work queued, nil
// when it is alone; and whether the flow arrived within the Window, so
// that it may take the reserve.
func (l *RateLimiter) enter(flow string) (capped *rate.Limiter, newcomer bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	// The queue's lock is taken under the limiter's: the queue never
	// calls the limiter while holding its own.
	shared := l.demand != nil && l.demand.Busy(flow)
	for other, f := range l.flows {
		switch {
		case now.Sub(f.asked) > Window:
			delete(l.flows, other)
		case other != flow:
			shared = true
		}
	}
	f, ok := l.flows[flow]
	if !ok {
		f = &flowState{cap: rate.NewLimiter(rate.Limit(l.qps/2), max(l.burst/2, 1)), arrived: now}
		l.flows[flow] = f
	}
	f.asked = now
	newcomer = now.Sub(f.arrived) < Window
	if !shared {
		// Alone, the flow still spends its cap's tokens where there are
		// any, without waiting: a flow that kept busy has none left when
		// another arrives, and is held to half the rate at once, while
		// one that was quiet keeps its burst.
		f.cap.Allow()
		return nil, newcomer
	}
	return f.cap, newcomer
}

// dispatch hands each token, as the bucket refills, to the oldest request
// of the flow whose turn it is, until no request waits. A newcomer's
// request further back goes first when the bucket holds its token but not
// the reserve the turn's flow must leave.
func (l *RateLimiter) dispatch() {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		l.mu.Lock()
		if len(l.turns) == 0 {
			l.dispatching = false
			l.mu.Unlock()
			return
		}
		shortfall := l.grantNext()
		l.mu.Unlock()
		if shortfall == 0 {
			continue
		}
		// Wait for the tokens to come, or for a newcomer that needs fewer.
		timer.Reset(time.Duration(shortfall / float64(l.qps) * float64(time.Second)))
		select {
		case <-timer.C:
		case <-l.queuedNewcomer:
			timer.Stop()
		}
	}
}

// grantNext gives a token to the first request of the first flow in turn
// whose request the bucket has enough tokens for, and sends that flow to
// the back of the turns. Otherwise it returns how many tokens are missing
// for the next request that could be served. l.mu is held.
func (l *RateLimiter) grantNext() (shortfall float64) {
	tokens := l.bucket.Tokens()
	shortfall = l.tokensNeeded(false) - tokens
	for i, flow := range l.turns {
		queue := l.queues[flow]
		w := queue[0]
		need := l.tokensNeeded(w.newcomer)
		if tokens < need || !l.bucket.Allow() {
			shortfall = min(shortfall, need-tokens)
			continue
		}
		l.turns = slices.Delete(l.turns, i, i+1)
		if len(queue) > 1 {
			l.queues[flow] = queue[1:]
			l.turns = append(l.turns, flow)
		} else {
			delete(l.queues, flow)
		}
		w.granted = true
		close(w.ready)
		return 0
	}
	return max(shortfall, 0.001)
}

// remove takes a request that gave up out of its flow's queue. l.mu is
// held.
func (l *RateLimiter) remove(flow string, w *waiter) {
	queue := slices.DeleteFunc(l.queues[flow], func(q *waiter) bool { return q == w })
	if len(queue) > 0 {
		l.queues[flow] = queue
		return
	}
	delete(l.queues, flow)
	l.turns = slices.DeleteFunc(l.turns, func(f string) bool { return f == flow })
}

// Accept waits for a token without a deadline.
func (l *RateLimiter) Accept() { _ = l.Wait(context.Background()) }

// TryAccept takes a token if one is free and nobody waits for it. The
// request names no flow, so it leaves the reserve.
func (l *RateLimiter) TryAccept() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.turns) == 0 && l.takeToken(false)
}

// QPS is the limiter's rate.
func (l *RateLimiter) QPS() float32 { return l.qps }

// Stop does nothing: the dispatching goroutine ends by itself once no
// request waits.
func (l *RateLimiter) Stop() {}
