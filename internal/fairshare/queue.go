package fairshare

import (
	"container/heap"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Queue is the controller's work queue, fair between namespaces: the
// flows of the API server's Priority and Fairness are namespaces here, and
// the seats are the workers.
//
// controller-runtime's queues serve items in the order they became ready
// (by priority): one namespace that queues a thousand backends puts every
// other namespace's next backend behind all of them, and a namespace whose
// reconciles are slow can hold every worker. Here each namespace has its
// own queue of ready items, and the namespaces take turns: a worker that
// asks for an item gets the oldest one (of the highest priority) of the
// namespace whose turn it is, and that namespace goes to the back of the
// turns. However long a namespace's queue, another namespace's item waits
// for at most one item of each namespace ahead of it.
//
// While another namespace has an item waiting, a namespace that already
// runs its share of the workers is passed over: one namespace's slow
// reconciles cannot hold every worker while another namespace waits. The
// queue is work-conserving: a namespace alone may use every worker, so a
// fleet that lives in one namespace is not slowed down.
//
// Items are de-duplicated as controller-runtime's priority queue does (the
// highest priority and the earliest time win), and an item is never handed
// to two workers at once: added again while a worker has it, it comes back
// when that worker is done. It implements priorityqueue.PriorityQueue, so
// that controller-runtime's controller and handlers use it as they use
// theirs.
type Queue struct {
	share   int
	workers int
	limiter workqueue.TypedRateLimiter[reconcile.Request]
	metrics queueMetrics
	// passedOver counts the turns a namespace at its share let go.
	passedOver prometheus.Counter
	now        func() time.Time

	mu sync.Mutex
	// cond wakes workers waiting in Get when an item becomes ready or a
	// namespace's running count drops.
	cond *sync.Cond
	// items holds every item the queue knows: waiting for its time,
	// ready, or running.
	items map[reconcile.Request]*entry
	// flows holds the namespaces with ready or running items.
	flows map[string]*flow
	// running counts the items handed out, all namespaces together.
	running int
	// turns names the namespaces that have ready items, in the order they
	// are served.
	turns []string
	// waiting holds the items added with a delay, soonest first.
	waiting byTime
	// seq orders items within a priority, first come first served.
	seq uint64
	// retimed wakes the timer when the soonest waiting item changes.
	retimed  chan struct{}
	done     chan struct{}
	shutdown bool
}

// state is where an item is in the queue.
type state int

const (
	stateWaiting state = iota
	stateReady
	stateRunning
)

// entry is one item.
type entry struct {
	req      reconcile.Request
	state    state
	priority int
	// at is when a waiting item becomes ready; when a ready one became
	// ready; when a running one was handed out.
	at  time.Time
	seq uint64
	// index is the item's place in the heap that holds it.
	index int
	// again is set when the item was added while running: it returns to
	// the queue with these options when its worker is done.
	again *comeback
}

// comeback is what an item added while running comes back with.
type comeback struct {
	priority int
	at       time.Time
}

// flow is one namespace's ready items and its running count.
type flow struct {
	ready   byPriority
	running int
}

var _ priorityqueue.PriorityQueue[reconcile.Request] = (*Queue)(nil)

// QueueOptions configure a Queue.
type QueueOptions struct {
	// Name is the controller's name, for the workqueue metrics.
	Name string
	// Share is how many items of one namespace may run at once while
	// another namespace has an item waiting (at least one).
	Share int
	// Workers is how many workers take items: the last free one goes only
	// to a namespace running nothing (reserved). Zero reserves none.
	Workers int
	// RateLimiter delays rate-limited adds.
	RateLimiter workqueue.TypedRateLimiter[reconcile.Request]
	// PassedOver counts the turns a namespace at its share let go to
	// another; nil counts nothing.
	PassedOver prometheus.Counter
}

// NewQueue returns a queue; it runs until ShutDown.
func NewQueue(o QueueOptions) *Queue {
	passedOver := o.PassedOver
	if passedOver == nil {
		passedOver = prometheus.NewCounter(prometheus.CounterOpts{Name: "unregistered"})
	}
	q := &Queue{
		share:      max(o.Share, 1),
		workers:    o.Workers,
		limiter:    o.RateLimiter,
		metrics:    newQueueMetrics(o.Name),
		passedOver: passedOver,
		now:        time.Now,
		items:      map[reconcile.Request]*entry{},
		flows:      map[string]*flow{},
		retimed:    make(chan struct{}, 1),
		done:       make(chan struct{}),
	}
	q.cond = sync.NewCond(&q.mu)
	go q.promote()
	return q
}

// Add queues item now, at the default priority.
func (q *Queue) Add(item reconcile.Request) { q.AddWithOpts(priorityqueue.AddOpts{}, item) }

// AddAfter queues item once after has passed.
func (q *Queue) AddAfter(item reconcile.Request, after time.Duration) {
	q.AddWithOpts(priorityqueue.AddOpts{After: after}, item)
}

// AddRateLimited queues item once the rate limiter allows it.
func (q *Queue) AddRateLimited(item reconcile.Request) {
	q.AddWithOpts(priorityqueue.AddOpts{RateLimited: true}, item)
}

// AddWithOpts queues items with the options' delay and priority. An item
// already queued keeps the higher of its priorities and the sooner of its
// times.
func (q *Queue) AddWithOpts(o priorityqueue.AddOpts, items ...reconcile.Request) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.shutdown {
		return
	}
	priority := 0
	if o.Priority != nil {
		priority = *o.Priority
	}
	now := q.now()
	for _, req := range items {
		after := o.After
		if o.RateLimited {
			if limited := q.limiter.When(req); after == 0 || limited < after {
				after = limited
			}
		}
		at := now
		if after > 0 {
			at = now.Add(after)
			q.metrics.retries.Inc()
		}
		q.metrics.adds.Inc()
		q.add(req, priority, at, now)
	}
}

// add places one item. q.mu is held.
func (q *Queue) add(req reconcile.Request, priority int, at, now time.Time) {
	it, ok := q.items[req]
	switch {
	case !ok:
		it = &entry{req: req, priority: priority}
		q.items[req] = it
		q.place(it, at, now)
	case it.state == stateRunning:
		if it.again == nil {
			it.again = &comeback{priority: priority, at: at}
			return
		}
		it.again.priority = max(it.again.priority, priority)
		if at.Before(it.again.at) {
			it.again.at = at
		}
	case it.state == stateReady:
		if priority > it.priority {
			// Behind the items already at the new priority.
			q.seq++
			it.priority, it.seq = priority, q.seq
			heap.Fix(&q.flows[req.Namespace].ready, it.index)
		}
	case it.state == stateWaiting:
		it.priority = max(it.priority, priority)
		if at.Before(it.at) {
			heap.Remove(&q.waiting, it.index)
			q.place(it, at, now)
		}
	}
}

// place makes it ready if at has come, else waiting until at. q.mu is held.
func (q *Queue) place(it *entry, at, now time.Time) {
	if at.After(now) {
		it.state, it.at = stateWaiting, at
		heap.Push(&q.waiting, it)
		if q.waiting[0] == it {
			select {
			case q.retimed <- struct{}{}:
			default:
			}
		}
		return
	}
	q.makeReady(it, now)
}

// makeReady puts it at the back of its namespace's ready items of its
// priority, and its namespace in the turns if it had none ready. q.mu is
// held.
func (q *Queue) makeReady(it *entry, now time.Time) {
	f := q.flows[it.req.Namespace]
	if f == nil {
		f = &flow{}
		q.flows[it.req.Namespace] = f
	}
	if len(f.ready) == 0 {
		q.turns = append(q.turns, it.req.Namespace)
	}
	q.seq++
	it.state, it.at, it.seq = stateReady, now, q.seq
	heap.Push(&f.ready, it)
	q.metrics.depth.Inc()
	q.cond.Signal()
}

// promote moves waiting items whose time has come to the ready queues,
// until the queue shuts down.
func (q *Queue) promote() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		q.mu.Lock()
		now := q.now()
		for len(q.waiting) > 0 && !q.waiting[0].at.After(now) {
			q.makeReady(popEntry(&q.waiting), now)
		}
		next := time.Hour
		if len(q.waiting) > 0 {
			next = q.waiting[0].at.Sub(now)
		}
		q.mu.Unlock()
		timer.Reset(next)
		select {
		case <-q.done:
			return
		case <-q.retimed:
		case <-timer.C:
		}
	}
}

// Get hands out the next item; see GetWithPriority.
func (q *Queue) Get() (reconcile.Request, bool) {
	req, _, shutdown := q.GetWithPriority()
	return req, shutdown
}

// GetWithPriority waits for an item that may run and hands it out, with
// its priority; shutdown is true once the queue is shutting down. The
// caller must call Done with it.
func (q *Queue) GetWithPriority() (_ reconcile.Request, priority int, shutdown bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		if q.shutdown {
			return reconcile.Request{}, 0, true
		}
		if ns, ok := q.nextTurn(); ok {
			if ns != q.turns[0] && q.flows[q.turns[0]].running >= q.share {
				q.passedOver.Inc()
			}
			it := q.take(ns)
			return it.req, it.priority, false
		}
		q.cond.Wait()
	}
}

// nextTurn is the namespace whose item goes next: of the namespaces with
// ready items that may take a worker (reserved), the first in the turns
// among those under their share (all of them when none is, or when only
// one namespace waits), at the highest priority they hold. q.mu is held.
func (q *Queue) nextTurn() (string, bool) {
	waiting := slices.DeleteFunc(slices.Clone(q.turns), q.reserved)
	if len(waiting) <= 1 {
		return first(waiting)
	}
	eligible := func(ns string) bool { return q.flows[ns].running < q.share }
	if !slices.ContainsFunc(waiting, eligible) {
		// Every waiting namespace runs its share (a share below half the
		// workers): the one running least goes, so that no worker idles.
		fewest := slices.MinFunc(waiting, func(a, b string) int { return q.flows[a].running - q.flows[b].running })
		eligible = func(ns string) bool { return q.flows[ns].running == q.flows[fewest].running }
	}
	best, found := "", false
	for _, ns := range waiting {
		if !eligible(ns) {
			continue
		}
		if !found || q.flows[ns].ready[0].priority > q.flows[best].ready[0].priority {
			best, found = ns, true
		}
	}
	return best, found
}

// reserved tells whether the last free worker is kept from namespace ns:
// it is, while ns already runs an item. The workers are one more than the
// controller's --concurrent, and the last one goes only to a namespace
// that runs nothing, so that a quiet namespace's backend finds a worker
// at once even while a busy one holds every other worker in reconciles
// that wait (on the request budget, on the API server): a namespace's
// reconciles cannot be taken from it once they run. A fleet in one
// namespace keeps --concurrent workers, as before. q.mu is held.
func (q *Queue) reserved(ns string) bool {
	return q.workers > 0 && q.workers-q.running <= 1 && q.flows[ns].running > 0
}

// first is the first of names, if any.
func first(names []string) (string, bool) {
	if len(names) == 0 {
		return "", false
	}
	return names[0], true
}

// take hands out the first ready item of ns and sends ns to the back of
// the turns. q.mu is held.
func (q *Queue) take(ns string) *entry {
	f := q.flows[ns]
	it := popEntry(&f.ready)
	q.turns = slices.DeleteFunc(q.turns, func(t string) bool { return t == ns })
	if len(f.ready) > 0 {
		q.turns = append(q.turns, ns)
	}
	now := q.now()
	q.metrics.depth.Dec()
	q.metrics.latency.Observe(now.Sub(it.at).Seconds())
	it.state, it.at = stateRunning, now
	f.running++
	q.running++
	return it
}

// Done tells the queue that the worker is done with item: an item added
// again meanwhile goes back into the queue.
func (q *Queue) Done(item reconcile.Request) {
	q.mu.Lock()
	defer q.mu.Unlock()
	it, ok := q.items[item]
	if !ok || it.state != stateRunning {
		return
	}
	now := q.now()
	q.metrics.workDuration.Observe(now.Sub(it.at).Seconds())
	f := q.flows[item.Namespace]
	f.running--
	q.running--
	if f.running == 0 && len(f.ready) == 0 {
		delete(q.flows, item.Namespace)
	}
	// A namespace under its share again may take a worker that waits.
	q.cond.Broadcast()
	if it.again == nil {
		delete(q.items, item)
		return
	}
	again := it.again
	it.again, it.priority = nil, again.priority
	q.place(it, again.at, now)
}

// Busy tells whether a namespace other than ns has items ready or running:
// the client's rate limiter counts such a namespace as wanting requests
// from the moment its work is queued, before it has sent any.
func (q *Queue) Busy(ns string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for other := range q.flows {
		if other != ns {
			return true
		}
	}
	return false
}

// Forget ends the rate limiter's backoff of item.
func (q *Queue) Forget(item reconcile.Request) { q.limiter.Forget(item) }

// NumRequeues is how often item was rate limited since it was last forgotten.
func (q *Queue) NumRequeues(item reconcile.Request) int { return q.limiter.NumRequeues(item) }

// Len is how many items are ready.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for _, f := range q.flows {
		n += len(f.ready)
	}
	return n
}

// ShutDown stops handing out items: waiting workers return at once.
func (q *Queue) ShutDown() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.shutdown {
		return
	}
	q.shutdown = true
	close(q.done)
	q.cond.Broadcast()
}

// ShutDownWithDrain shuts the queue down; the controller waits for its
// workers itself.
func (q *Queue) ShutDownWithDrain() { q.ShutDown() }

// ShuttingDown tells whether ShutDown was called.
func (q *Queue) ShuttingDown() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.shutdown
}

// byTime is a heap of waiting items, soonest first.
type byTime []*entry

// Len, Less, Swap, Push and Pop make byTime a heap.Interface.
func (h byTime) Len() int           { return len(h) }
func (h byTime) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h byTime) Swap(i, j int)      { swapEntries(h, i, j) }

// Push adds x, an *entry, at the end.
func (h *byTime) Push(x any) { pushEntry((*[]*entry)(h), x) }

// Pop removes the last item.
func (h *byTime) Pop() any { return popLast((*[]*entry)(h)) }

// byPriority is a heap of one namespace's ready items: highest priority
// first, then first come.
type byPriority []*entry

// Len, Less, Swap, Push and Pop make byPriority a heap.Interface.
func (h byPriority) Len() int { return len(h) }
func (h byPriority) Less(i, j int) bool {
	if h[i].priority != h[j].priority {
		return h[i].priority > h[j].priority
	}
	return h[i].seq < h[j].seq
}
func (h byPriority) Swap(i, j int) { swapEntries(h, i, j) }

// Push adds x, an *entry, at the end.
func (h *byPriority) Push(x any) { pushEntry((*[]*entry)(h), x) }

// Pop removes the last item.
func (h *byPriority) Pop() any { return popLast((*[]*entry)(h)) }

// swapEntries swaps two items of a heap's slice and their indexes.
func swapEntries(h []*entry, i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}

// pushEntry appends x, which heap.Push gives as an *entry.
func pushEntry(h *[]*entry, x any) {
	it, _ := x.(*entry)
	it.index = len(*h)
	*h = append(*h, it)
}

// popLast removes the last item of a heap's slice, as heap.Pop asks.
func popLast(h *[]*entry) any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	it.index = -1
	return it
}

// popEntry pops the first item of h.
func popEntry(h heap.Interface) *entry {
	it, _ := heap.Pop(h).(*entry)
	return it
}
