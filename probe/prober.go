package probe

import (
	"container/heap"
	"context"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"
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
//
// Probes are shared fairly between owner namespaces, the unit a tenant
// controls: a tenant with many backends gets no more than one with a
// single backend. Each namespace has its own queue of due probes; the
// namespaces with a due probe are served in turn, and while several want
// slots, each may hold at most an equal share of the pool. A namespace
// alone may use the whole pool: a fixed share would leave slots idle and
// shrink with the number of namespaces that merely have targets. A share
// is not taken back from probes already running, so a namespace that
// joins waits for the first of them to end: at most the timeout of one
// of them, and timeouts are shorter than their checks' periods. Within a
// namespace, backends are not told apart: they belong to one tenant.
type Prober struct {
	dial        Dialer
	concurrency int
	waker       Waker
	metrics     *Metrics

	mu      sync.Mutex
	entries map[targetKey]*entry
	owners  map[types.NamespacedName]map[targetKey]bool
	// tenants are the owner namespaces charged with probes, by name;
	// turns orders them for round-robin, and turn is the next to serve.
	tenants map[string]*tenant
	turns   []*tenant
	turn    int
	// running counts the probes in flight.
	running int
	// clients are the HTTP clients of the TLS settings in use.
	clients   map[tlsKey]*tlsClient
	caDigests caDigests
	// kick wakes the scheduler when a target is added or a probe ends.
	kick chan struct{}
}

// tenant is one owner namespace's probes.
type tenant struct {
	namespace string
	queue     dueQueue
	// targets counts the entries charged to it, queued or running;
	// inFlight its probes running.
	targets, inFlight int
}

// dueBy tells whether tn has a probe due at now.
func (tn *tenant) dueBy(now time.Time) bool {
	return tn.queue.Len() > 0 && !tn.queue[0].due.After(now)
}

// entry is a target's state.
type entry struct {
	target Target
	// client is the HTTP client of an HTTP or HTTPS check.
	client *tlsClient
	owners map[types.NamespacedName]bool
	// tenant runs its probes (see charge).
	tenant *tenant
	// ready is the verdict; successes and failures the results in a row.
	ready               bool
	successes, failures int
	due                 time.Time
	index               int // in its tenant's queue; -1 while running or removed
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
		entries: map[targetKey]*entry{}, owners: map[types.NamespacedName]map[targetKey]bool{},
		tenants: map[string]*tenant{}, clients: map[tlsKey]*tlsClient{},
		kick: make(chan struct{}, 1),
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
	keys := make([]targetKey, len(targets))
	want := make(map[targetKey]bool, len(targets))
	for i, t := range targets {
		keys[i] = p.keyOf(t)
		want[keys[i]] = true
	}
	for k := range p.owners[backend] {
		if !want[k] {
			p.release(backend, k)
		}
	}
	if len(want) == 0 {
		delete(p.owners, backend)
		p.metrics.setTargets(len(p.entries))
		return
	}
	p.owners[backend] = want
	added := false
	for i, t := range targets {
		e, ok := p.entries[keys[i]]
		if !ok {
			e = &entry{target: t, owners: map[types.NamespacedName]bool{}, ready: t.Check.InitialReady,
				due: time.Now().Add(rand.N(t.Check.Period)), index: -1}
			if t.Check.Kind == HTTP || t.Check.Kind == HTTPS {
				e.client = p.acquireClient(t.Check, keys[i].check.caDigest)
			}
			p.entries[keys[i]] = e
			p.charge(e, p.tenantOf(backend.Namespace))
			added = true
		} else if !e.owners[backend] && backend.Namespace != e.tenant.namespace &&
			p.load(backend.Namespace) < e.tenant.targets {
			p.charge(e, p.tenantOf(backend.Namespace))
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

// release drops backend's use of the target k, and the target when no one
// uses it.
func (p *Prober) release(backend types.NamespacedName, k targetKey) {
	e, ok := p.entries[k]
	if !ok {
		return
	}
	delete(e.owners, backend)
	if len(e.owners) == 0 {
		delete(p.entries, k)
		e.removed = true
		tn := e.tenant
		tn.targets--
		if e.index >= 0 {
			heap.Remove(&tn.queue, e.index)
		}
		p.releaseClient(e.client)
		p.dropIdle(tn)
		return
	}
	// A namespace that no longer uses the target is no longer charged
	// with it: the lightest of those that do is.
	lightest := ""
	for b := range e.owners {
		if b.Namespace == e.tenant.namespace {
			return
		}
		if lightest == "" || p.load(b.Namespace) < p.load(lightest) {
			lightest = b.Namespace
		}
	}
	p.charge(e, p.tenantOf(lightest))
}

// charge makes tn run e's probes. A target owned by backends of several
// namespaces is charged to the one of them with the fewest targets when
// its owners change: a tenant that asks for another's target, or floods
// the prober, cannot slow that target down by having it charged to its
// own crowded queue; the cost falls on a namespace that asked for the
// target anyway.
func (p *Prober) charge(e *entry, tn *tenant) {
	// A new entry is queued; a running one is queued when its probe ends.
	queued := e.tenant == nil || e.index >= 0
	old := e.tenant
	if old != nil {
		old.targets--
		if e.index >= 0 {
			heap.Remove(&old.queue, e.index)
		}
	}
	e.tenant = tn
	tn.targets++
	if queued {
		heap.Push(&tn.queue, e)
	}
	if old != nil {
		p.dropIdle(old)
	}
}

// load is how many targets namespace is charged with.
func (p *Prober) load(namespace string) int {
	if tn, ok := p.tenants[namespace]; ok {
		return tn.targets
	}
	return 0
}

// tenantOf is namespace's tenant, made and given a turn if new.
func (p *Prober) tenantOf(namespace string) *tenant {
	tn, ok := p.tenants[namespace]
	if !ok {
		tn = &tenant{namespace: namespace}
		p.tenants[namespace] = tn
		p.turns = append(p.turns, tn)
	}
	return tn
}

// dropIdle forgets tn once it has neither targets nor probes running, so
// that the turns go round the namespaces in use only.
func (p *Prober) dropIdle(tn *tenant) {
	if tn.targets > 0 || tn.inFlight > 0 || p.tenants[tn.namespace] != tn {
		return
	}
	delete(p.tenants, tn.namespace)
	i := slices.Index(p.turns, tn)
	p.turns = slices.Delete(p.turns, i, i+1)
	if i < p.turn {
		p.turn--
	}
}

// Passing tells whether the probes pass t: its check's last verdict, or
// the check's initial one before the first results and for a target no
// backend has asked for.
func (p *Prober) Passing(t Target) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.entries[p.keyOf(t)]
	if !ok {
		return t.Check.InitialReady
	}
	return e.ready
}

// Start runs the probes until ctx ends.
func (p *Prober) Start(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for ctx.Err() == nil {
		p.mu.Lock()
		e, from, wait := p.take(time.Now())
		var due time.Time
		if e != nil {
			due = e.due
		}
		p.mu.Unlock()
		if e != nil {
			// Lateness says the pool, or a namespace's share of it, is
			// too small.
			p.metrics.late(time.Since(due))
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.probe(ctx, e, from, due)
			}()
			continue
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
		case <-p.kick:
		case <-timer.C:
		}
	}
	return nil
}

// take picks the probe to start now, if any, and the tenant whose slot it
// holds; else it says how long until one may be due (an ending probe, or
// a new target, kicks the scheduler sooner). The namespaces with a due
// probe are served in turn, each within its share of the pool.
// Each call looks at every namespace with targets: they are few next to
// the targets, and the platform team, not tenants, makes namespaces.
func (p *Prober) take(now time.Time) (*entry, *tenant, time.Duration) {
	wait := time.Hour
	if p.running >= p.concurrency {
		return nil, nil, wait
	}
	busy := 0
	for _, tn := range p.turns {
		if tn.inFlight > 0 || tn.dueBy(now) {
			busy++
		}
	}
	share := (p.concurrency + busy - 1) / max(busy, 1)
	for i := range p.turns {
		n := (p.turn + i) % len(p.turns)
		tn := p.turns[n]
		if tn.queue.Len() == 0 || tn.inFlight >= share {
			continue
		}
		if d := tn.queue[0].due.Sub(now); d > 0 {
			wait = min(wait, d)
			continue
		}
		p.turn = n + 1
		e, _ := heap.Pop(&tn.queue).(*entry)
		tn.inFlight++
		p.running++
		return e, tn, 0
	}
	return nil, nil, wait
}

// probe runs one probe of e in a slot of from, records its result,
// schedules the next one and wakes e's backends when the verdict changed.
func (p *Prober) probe(ctx context.Context, e *entry, from *tenant, due time.Time) {
	start := time.Now()
	err := p.run(ctx, e.target, e.client)
	// A probe cut short by the prober stopping says nothing of the target.
	stopped := ctx.Err() != nil
	if !stopped {
		p.metrics.result(e.target.Check.Kind, err, time.Since(start))
	}
	p.mu.Lock()
	p.running--
	from.inFlight--
	p.dropIdle(from)
	var wake []types.NamespacedName
	changed := false
	if !e.removed {
		if !stopped {
			if changed = e.record(err == nil); changed {
				for b := range e.owners {
					wake = append(wake, b)
				}
			}
			// The next probe is a period after this one was due, not
			// after it ran: probe times do not drift. One that is
			// already late runs now.
			e.due = due.Add(e.target.Check.Period)
			if now := time.Now(); e.due.Before(now) {
				e.due = now
			}
		}
		heap.Push(&e.tenant.queue, e)
	}
	p.mu.Unlock()
	if changed {
		// Why a probe failed (a status code, a TLS error, refused or
		// timed out) is for the platform team only: the backends' status
		// says pass or fail.
		log.FromContext(ctx).V(1).Info("probe verdict changed", "target", e.target.String(),
			"ready", err == nil, "failure", failureOf(err), "error", err)
	}
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

// dueQueue orders a tenant's entries by when their next probe is due.
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
