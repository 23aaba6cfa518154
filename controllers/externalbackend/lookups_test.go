package externalbackend

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
)

// gatedCalls is a provider call that answers only when its source's gate
// opens (sources not gated answer at once), and counts the calls.
type gatedCalls struct {
	mu    sync.Mutex
	gates map[string]chan struct{}
	calls atomic.Int32
}

func (g *gatedCalls) gate(source string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	ch := make(chan struct{})
	g.gates[source] = ch
	return ch
}

func (g *gatedCalls) call(ctx context.Context, req providers.Request) (providers.Result, error) {
	g.calls.Add(1)
	g.mu.Lock()
	gate := g.gates[req.Source.Name]
	g.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return providers.Result{}, ctx.Err()
		}
	}
	return providers.Result{Endpoints: []providers.Endpoint{{Address: "192.0.2.1", Serving: true}}}, nil
}

// wakes records the backends woken, as a channel.
type wakes chan types.NamespacedName

func (w wakes) wake(key types.NamespacedName) { w <- key }

func (w wakes) next(t *testing.T) types.NamespacedName {
	t.Helper()
	select {
	case key := <-w:
		return key
	case <-time.After(10 * time.Second):
		t.Fatal("no backend woken")
		return types.NamespacedName{}
	}
}

func (w wakes) none(t *testing.T) {
	t.Helper()
	select {
	case key := <-w:
		t.Fatalf("backend %s woken", key)
	default:
	}
}

func request(ns, backend, source string) providers.Request {
	return providers.Request{Namespace: ns, Backend: backend, Source: v1alpha1.Source{Name: source}}
}

func TestLookupsASlowCallFreesThePassAndWakesItsBackend(t *testing.T) {
	g := &gatedCalls{gates: map[string]chan struct{}{}}
	w := make(wakes, 10)
	l := newLookups(g.call, w.wake, noTrack, time.Minute)

	// A quick call answers within the pass: no wake-up.
	if got := l.ask(context.Background(), request("ns", "quick", "s"), 1); got.err != nil || len(got.res.Endpoints) != 1 {
		t.Fatalf("quick call: %+v", got)
	}
	w.none(t)

	// A slow one: the pass goes on without an answer.
	open := g.gate("slow")
	req := request("ns", "b", "slow")
	if got := l.ask(context.Background(), req, 1); !errors.Is(got.err, errNoAnswerYet) {
		t.Fatalf("slow call's first pass: err %v, want errNoAnswerYet", got.err)
	}
	// A pass while it still runs asks nothing more.
	if got := l.ask(context.Background(), req, 1); !errors.Is(got.err, errNoAnswerYet) {
		t.Fatalf("second pass: err %v, want errNoAnswerYet", got.err)
	}
	if n := g.calls.Load(); n != 2 {
		t.Fatalf("%d calls, want 2 (one quick, one slow)", n)
	}
	close(open)
	if key := w.next(t); key != (types.NamespacedName{Namespace: "ns", Name: "b"}) {
		t.Fatalf("woke %s", key)
	}
	// The woken pass takes the answer without calling again.
	if got := l.ask(context.Background(), req, 1); got.err != nil || len(got.res.Endpoints) != 1 {
		t.Fatalf("woken pass: %+v", got)
	}
	if n := g.calls.Load(); n != 2 {
		t.Fatalf("%d calls after the woken pass, want still 2", n)
	}

	// Slow again: a pass meanwhile acts on the last answer, unchanged.
	g.gate("slow")
	if got := l.ask(context.Background(), req, 1); got.err != nil || len(got.res.Endpoints) != 1 {
		t.Fatalf("pass while the next call runs: %+v, want the last answer", got)
	}
}

func TestLookupsForgetAnEditedOrRemovedSource(t *testing.T) {
	g := &gatedCalls{gates: map[string]chan struct{}{}}
	w := make(wakes, 10)
	l := newLookups(g.call, w.wake, noTrack, time.Minute)
	open := g.gate("s")
	req := request("ns", "b", "s")
	l.ask(context.Background(), req, 1)
	// The spec changes: a new call, the old answer moot.
	l.ask(context.Background(), req, 2)
	l.forget(types.NamespacedName{Namespace: "ns", Name: "b"})
	close(open)
	time.Sleep(100 * time.Millisecond)
	w.none(t)
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.calls) != 0 || len(l.slots) != 0 {
		t.Fatalf("forgotten backend leaves %d backends and %d namespaces' slots behind", len(l.calls), len(l.slots))
	}
}

func TestLookupsSlotsArePerNamespace(t *testing.T) {
	g := &gatedCalls{gates: map[string]chan struct{}{}}
	w := make(wakes, 2*lookupsPerNamespace)
	l := newLookups(g.call, w.wake, noTrack, time.Minute)
	// One namespace fills its slots with calls that never answer, and
	// queues more behind them.
	open := g.gate("stuck")
	for i := range 2 * lookupsPerNamespace {
		l.ask(context.Background(), request("busy", fmt.Sprint(i), "stuck"), 1)
	}
	// Another namespace's call runs at once.
	if got := l.ask(context.Background(), request("quiet", "q", "s"), 1); got.err != nil {
		t.Fatalf("another namespace's call waited behind the busy one's slots: %v", got.err)
	}
	close(open)
	for range 2 * lookupsPerNamespace {
		w.next(t)
	}
}

// noTrack records nothing.
func noTrack(types.NamespacedName) func() { return func() {} }
