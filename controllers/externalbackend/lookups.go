package externalbackend

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
)

// A slow source must not hold a worker. A DNS name that never answers
// makes every lookup wait for --resolve-timeout: sixty such backends in
// one namespace, each edited now and then, held every worker, and another
// namespace's new backend waited 29 s instead of 33 ms. So a reconcile
// gives each source call lookupGrace to answer; a call still running
// then goes on apart from the worker, and its answer, when it comes,
// wakes the backend, whose next pass takes it.
//
// lookupGrace is short enough that a worker is soon free for the other
// namespaces, and long enough that the usual answer (a cached Consul or
// AWS listing, a DNS server nearby, a plugin) comes within one pass, with
// no second reconcile.
const lookupGrace = 50 * time.Millisecond

// lookupsPerNamespace bounds the source calls of one namespace in flight
// at once: a namespace's further calls wait for a slot of its own, never
// for another namespace's.
const lookupsPerNamespace = 16

// errNoAnswerYet is a source's reply while its first call is still
// running: the pass publishes what the slices hold for it, as for a
// source that failed since the controller started.
var errNoAnswerYet = providers.Transient(errors.New("no answer yet: the provider call is still running; the backend is reconciled again when it answers"))

// lookups runs source calls apart from the workers.
type lookups struct {
	// call is one provider call.
	call func(context.Context, providers.Request) (providers.Result, error)
	// wake queues a reconcile of a backend whose call answered after its
	// pass had moved on.
	wake func(types.NamespacedName)
	// track records a call in flight for the stuck-reconcile check
	// (watchdog.Begin): a provider that ignores its deadline holds no
	// worker, but its backend's work is stuck all the same.
	track   func(backend types.NamespacedName) (end func())
	timeout time.Duration
	grace   time.Duration

	mu sync.Mutex
	// calls holds each backend's sources' calls, by source name.
	calls map[types.NamespacedName]map[string]*sourceCalls
	// slots holds the semaphore of each namespace with calls in flight.
	slots map[string]*namespaceSlots
}

// namespaceSlots bound one namespace's calls in flight.
type namespaceSlots struct {
	sem chan struct{}
	// calls counts the calls holding or waiting for a slot.
	calls int
}

// sourceCalls is what a source's calls are doing, for one spec.
type sourceCalls struct {
	spec uint64
	// running is the call in flight, if any.
	running *sourceCall
	// answered is the reply of a call that ended after its pass moved
	// on, not yet taken by a pass.
	answered *sourceReply
	// last is the last reply a pass took: a pass that finds the call
	// still running acts on it again, so that nothing changes until the
	// provider says something new.
	last *sourceReply
}

// sourceCall is one provider call in flight.
type sourceCall struct {
	// done is closed once reply is set.
	done  chan struct{}
	reply sourceReply
	// waiting counts the passes waiting for the reply within their grace:
	// when one is, it takes the reply, and nothing is woken.
	waiting int
}

// newLookups returns lookups that call providers with call, each call
// bounded by timeout and recorded with track, and wake backends with wake.
func newLookups(call func(context.Context, providers.Request) (providers.Result, error), wake func(types.NamespacedName),
	track func(types.NamespacedName) func(), timeout time.Duration) *lookups {
	return &lookups{call: call, wake: wake, track: track, timeout: timeout, grace: lookupGrace,
		calls: map[types.NamespacedName]map[string]*sourceCalls{}, slots: map[string]*namespaceSlots{}}
}

// ask returns the source's reply: a new one if its call answers within
// the grace (or answered since the last pass), else the last reply for
// the same spec, else errNoAnswerYet.
func (l *lookups) ask(ctx context.Context, req providers.Request, spec uint64) sourceReply {
	backend := types.NamespacedName{Namespace: req.Namespace, Name: req.Backend}
	l.mu.Lock()
	sources := l.calls[backend]
	if sources == nil {
		sources = map[string]*sourceCalls{}
		l.calls[backend] = sources
	}
	c := sources[req.Source.Name]
	if c == nil || c.spec != spec {
		// A new spec: what was asked or answered for the old one is moot.
		c = &sourceCalls{spec: spec}
		sources[req.Source.Name] = c
	}
	if c.answered != nil {
		reply := *c.answered
		c.answered, c.last = nil, &reply
		l.mu.Unlock()
		return reply
	}
	call := c.running
	if call == nil {
		call = &sourceCall{done: make(chan struct{})}
		c.running = call
		slots := l.slotsOf(backend.Namespace)
		go l.run(context.WithoutCancel(ctx), backend, slots, c, call, req)
	}
	call.waiting++
	l.mu.Unlock()

	timer := time.NewTimer(l.grace)
	defer timer.Stop()
	select {
	case <-call.done:
	case <-timer.C:
	case <-ctx.Done():
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	call.waiting--
	switch {
	case isClosed(call.done):
		// Answered within the grace: run handed the reply to this pass.
		return call.reply
	case c.last != nil:
		return *c.last
	}
	return sourceReply{err: errNoAnswerYet}
}

// run makes one call, within the namespace's slots, and hands its reply
// to the pass waiting for it or, when none waits any more, to the next
// pass, which it wakes.
func (l *lookups) run(ctx context.Context, backend types.NamespacedName, slots *namespaceSlots, c *sourceCalls, call *sourceCall, req providers.Request) {
	slots.sem <- struct{}{}
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	end := l.track(backend)
	res, err := l.call(ctx, req)
	end()
	cancel()
	<-slots.sem

	l.mu.Lock()
	call.reply = sourceReply{res, err}
	close(call.done)
	// Forgotten (the backend or the source went, or its spec changed):
	// the reply is moot.
	current := l.calls[backend][req.Source.Name] == c && c.running == call
	wake := current && call.waiting == 0
	switch {
	case wake:
		// No pass waits: the next one takes the reply, woken for it.
		c.running, c.answered = nil, &call.reply
	case current:
		// The pass waiting within its grace takes the reply (ask).
		c.running, c.last = nil, &call.reply
	}
	if slots.calls--; slots.calls == 0 {
		// Memory follows the namespaces with calls in flight.
		delete(l.slots, backend.Namespace)
	}
	l.mu.Unlock()
	if wake {
		l.wake(backend)
	}
}

// slotsOf is the semaphore of namespace ns's calls, counting one more
// call. l.mu is held.
func (l *lookups) slotsOf(ns string) *namespaceSlots {
	s := l.slots[ns]
	if s == nil {
		s = &namespaceSlots{sem: make(chan struct{}, lookupsPerNamespace)}
		l.slots[ns] = s
	}
	s.calls++
	return s
}

// forget drops what the lookups keep for backend's sources other than
// keep: a call in flight for them ends unheard.
func (l *lookups) forget(backend types.NamespacedName, keep ...v1alpha1.Source) {
	l.mu.Lock()
	defer l.mu.Unlock()
	sources := l.calls[backend]
	for name := range sources {
		if !slices.ContainsFunc(keep, func(src v1alpha1.Source) bool { return src.Name == name }) {
			delete(sources, name)
		}
	}
	if len(sources) == 0 {
		delete(l.calls, backend)
	}
}

// isClosed tells whether ch is closed.
func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
