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
// half the rate, and tokens in the shared bucket.
//
// The namespace is the flow its context names (WithFlow); requests that
// name none (informers, cluster-scoped objects, the leader lease) share one
// flow of their own. It implements client-go's flowcontrol.RateLimiter.
type RateLimiter struct {
	bucket *rate.Limiter
	qps    float32
	burst  int
	now    func() time.Time

	mu sync.Mutex
	// flows holds, for each flow that asked within the Window, its own
	// bucket of half the rate and when it last asked.
	flows map[string]*flowState
	// queues holds each flow's waiting requests, oldest first; turns the
	// flows that have some, in the order they are served.
	queues map[string][]*waiter
	turns  []string
	// dispatching is true while a goroutine hands tokens to the queues; it
	// ends when they are empty.
	dispatching bool
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

// flowState is one flow's cap while others ask too.
type flowState struct {
	cap   *rate.Limiter
	asked time.Time
}

// waiter is one request waiting for a token.
type waiter struct {
	granted bool
	ready   chan struct{}
}

// NewRateLimiter returns a limiter of qps requests a second with bursts of
// burst.
func NewRateLimiter(qps float32, burst int) *RateLimiter {
	return &RateLimiter{
		bucket: rate.NewLimiter(rate.Limit(qps), max(burst, 1)),
		qps:    qps,
		burst:  max(burst, 1),
		now:    time.Now,
		flows:  map[string]*flowState{},
		queues: map[string][]*waiter{},
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
	if capped := l.capWhileShared(flow); capped != nil {
		if err := capped.Wait(ctx); err != nil {
			return err
		}
	}
	l.mu.Lock()
	if len(l.turns) == 0 && l.bucket.Allow() {
		l.mu.Unlock()
		return nil
	}
	w := &waiter{ready: make(chan struct{})}
	if len(l.queues[flow]) == 0 {
		l.turns = append(l.turns, flow)
	}
	l.queues[flow] = append(l.queues[flow], w)
	if !l.dispatching {
		l.dispatching = true
		go l.dispatch()
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

// capWhileShared notes that flow asks, and returns its own bucket of half
// the rate when another flow asked within the Window or has work queued,
// nil when it is alone.
func (l *RateLimiter) capWhileShared(flow string) *rate.Limiter {
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
		f = &flowState{cap: rate.NewLimiter(rate.Limit(l.qps/2), max(l.burst/2, 1))}
		l.flows[flow] = f
	}
	f.asked = now
	if !shared {
		// Alone, the flow still spends its cap's tokens where there are
		// any, without waiting: a flow that kept busy has none left when
		// another arrives, and is held to half the rate at once, while
		// one that was quiet keeps its burst.
		f.cap.Allow()
		return nil
	}
	return f.cap
}

// dispatch hands each token, as the bucket refills, to the oldest request
// of the flow whose turn it is, until no request waits.
func (l *RateLimiter) dispatch() {
	for {
		l.mu.Lock()
		if len(l.turns) == 0 {
			l.dispatching = false
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		// A background context: the bucket's wait ends within one token
		// interval, and requests that give up leave their queue meanwhile.
		_ = l.bucket.Wait(context.Background())
		l.mu.Lock()
		l.grantNext()
		l.mu.Unlock()
	}
}

// grantNext gives a token to the first request of the flow whose turn it
// is, and sends that flow to the back of the turns. l.mu is held.
func (l *RateLimiter) grantNext() {
	if len(l.turns) == 0 {
		// Everyone gave up while the token came: it is spent unused.
		return
	}
	flow := l.turns[0]
	queue := l.queues[flow]
	w := queue[0]
	l.turns = l.turns[1:]
	if len(queue) > 1 {
		l.queues[flow] = queue[1:]
		l.turns = append(l.turns, flow)
	} else {
		delete(l.queues, flow)
	}
	w.granted = true
	close(w.ready)
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

// TryAccept takes a token if one is free and nobody waits for it.
func (l *RateLimiter) TryAccept() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.turns) == 0 && l.bucket.Allow()
}

// QPS is the limiter's rate.
func (l *RateLimiter) QPS() float32 { return l.qps }

// Stop does nothing: the dispatching goroutine ends by itself once no
// request waits.
func (l *RateLimiter) Stop() {}
