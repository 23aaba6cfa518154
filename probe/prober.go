package probe

import (
	"container/heap"
	"context"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Waker is told which backends to reconcile when a verdict they use changes.
type Waker interface {
	Wake(backend types.NamespacedName)
}

// DefaultConcurrency bounds the probes in flight: 10,000 targets at a 10 s
// period are 1,000 probes a second, and one that times out holds its slot
// for its timeout.
const DefaultConcurrency = 256

// Options configure a Prober.
type Options struct {
	// Dial opens the probes' connections; net.Dialer's when nil.
	Dial Dialer
	// Concurrency bounds the probes in flight; DefaultConcurrency when 0.
	Concurrency int
	// Waker is told of the backends whose verdicts changed.
	Waker Waker
	// Metrics, when set, counts the probes.
	Metrics *Metrics
}

// Prober probes the targets the backends ask for and keeps their verdicts.
// It runs in the leader only (NeedLeaderElection): the reconciles that give
// it targets run there too.
type Prober struct {
	dial        Dialer
	concurrency int
	waker       Waker
	metrics     *Metrics

	mu      sync.Mutex
	entries map[Target]*entry
	owners  map[types.NamespacedName]map[Target]bool
	queue   dueQueue
	// kick wakes the scheduler when a target is added.
	kick chan struct{}

	clientsMu sync.Mutex
	clients   map[tlsKey]*http.Client
}

// entry is a target's state.
type entry struct {
	target Target
	owners map[types.NamespacedName]bool
	// ready is the verdict; successes and failures the results in a row.
	ready               bool
	successes, failures int
	due                 time.Time
	index               int // in the queue; -1 while running or removed
	removed             bool
}

// New returns a prober; Start runs it.
func New(o Options) *Prober {
	if o.Dial == nil {
		o.Dial = (&net.Dialer{}).DialContext
	}
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	return &Prober{
		dial: o.Dial, concurrency: o.Concurrency, waker: o.Waker, metrics: o.Metrics,
		entries: map[Target]*entry{}, owners: map[types.NamespacedName]map[Target]bool{},
		kick: make(chan struct{}, 1), clients: map[tlsKey]*http.Client{},
	}
}

// NeedLeaderElection makes the manager run the prober in the leader only.
func (p *Prober) NeedLeaderElection() bool { return true }

// Sync sets the targets backend uses; targets no backend uses any more
// stop being probed. A new target's first probe comes after a random part
// of its period, so that targets added together are spread out.
func (p *Prober) Sync(backend types.NamespacedName, targets []Target) {
	p.mu.Lock()
	defer p.mu.Unlock()
	want := make(map[Target]bool, len(targets))
	for _, t := range targets {
		want[t] = true
	}
	for t := range p.owners[backend] {
		if !want[t] {
			p.release(backend, t)
		}
	}
	if len(want) == 0 {
		delete(p.owners, backend)
		p.metrics.setTargets(len(p.entries))
		return
	}
	p.owners[backend] = want
	added := false
	for t := range want {
		e, ok := p.entries[t]
		if !ok {
			e = &entry{target: t, owners: map[types.NamespacedName]bool{}, ready: t.Check.InitialReady,
				due: time.Now().Add(rand.N(t.Check.Period)), index: -1}
			p.entries[t] = e
			heap.Push(&p.queue, e)
			added = true
		}
		e.owners[backend] = true
	}
	p.metrics.setTargets(len(p.entries))
	if added {
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
}

// release drops backend's use of t, and t when no one uses it.
func (p *Prober) release(backend types.NamespacedName, t Target) {
	e, ok := p.entries[t]
	if !ok {
		return
	}
	delete(e.owners, backend)
	if len(e.owners) > 0 {
		return
	}
	delete(p.entries, t)
	e.removed = true
	if e.index >= 0 {
		heap.Remove(&p.queue, e.index)
	}
}

// Verdict is what the probes say of t: whether it is ready, and whether
// it has a verdict at all (false for a target no backend has asked for).
// Before its first results a target has its check's initial verdict.
func (p *Prober) Verdict(t Target) (ready, known bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.entries[t]
	if !ok {
		return t.Check.InitialReady, false
	}
	return e.ready, true
}

// Start runs the probes until ctx ends.
func (p *Prober) Start(ctx context.Context) error {
	slots := make(chan struct{}, p.concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		p.mu.Lock()
		wait := time.Hour
		if p.queue.Len() > 0 {
			wait = time.Until(p.queue[0].due)
		}
		p.mu.Unlock()
		if wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return nil
			case <-p.kick:
				continue
			case <-timer.C:
				continue
			}
		}
		// A slot first: while every slot is busy, due probes wait, and
		// their lateness says the pool is too small.
		select {
		case <-ctx.Done():
			return nil
		case slots <- struct{}{}:
		}
		p.mu.Lock()
		if p.queue.Len() == 0 || time.Until(p.queue[0].due) > 0 {
			p.mu.Unlock()
			<-slots
			continue
		}
		e, _ := heap.Pop(&p.queue).(*entry)
		due := e.due
		p.mu.Unlock()
		p.metrics.late(time.Since(due))
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			p.probe(ctx, e, due)
		}()
	}
}

// probe runs one probe of e, records its result, schedules the next one
// and wakes e's backends when the verdict changed.
func (p *Prober) probe(ctx context.Context, e *entry, due time.Time) {
	start := time.Now()
	err := p.run(ctx, e.target)
	if ctx.Err() != nil {
		return
	}
	p.metrics.result(e.target.Check.Kind, err, time.Since(start))
	p.mu.Lock()
	if e.removed {
		p.mu.Unlock()
		return
	}
	changed := e.record(err == nil)
	// The next probe is a period after this one was due, not after it
	// ran: probe times do not drift. One that is already late runs now.
	e.due = due.Add(e.target.Check.Period)
	if now := time.Now(); e.due.Before(now) {
		e.due = now
	}
	heap.Push(&p.queue, e)
	var wake []types.NamespacedName
	if changed {
		for b := range e.owners {
			wake = append(wake, b)
		}
	}
	p.mu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default:
	}
	if p.waker == nil {
		return
	}
	for _, b := range wake {
		p.waker.Wake(b)
	}
}

// record counts a result and says whether the verdict changed: failures in
// a row take a ready target out, passes in a row bring it back.
func (e *entry) record(pass bool) bool {
	c := e.target.Check
	if pass {
		e.failures = 0
		e.successes++
		if !e.ready && e.successes >= c.SuccessThreshold {
			e.ready = true
			return true
		}
		return false
	}
	e.successes = 0
	e.failures++
	if e.ready && e.failures >= c.FailureThreshold {
		e.ready = false
		return true
	}
	return false
}

// dueQueue orders entries by when their next probe is due.
type dueQueue []*entry

func (q dueQueue) Len() int           { return len(q) }
func (q dueQueue) Less(i, j int) bool { return q[i].due.Before(q[j].due) }
func (q dueQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}

// Push adds an entry (container/heap's interface).
func (q *dueQueue) Push(x any) {
	e, _ := x.(*entry)
	e.index = len(*q)
	*q = append(*q, e)
}

// Pop takes the last entry (container/heap's interface).
func (q *dueQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = nil
	e.index = -1
	*q = old[:len(old)-1]
	return e
}
