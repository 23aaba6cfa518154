package migration_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// serviceWatch follows, from before a migration to its end, every
// EndpointSlice of the Service (whoever wrote it: what kube-proxy routes
// by) and its legacy Endpoints object, and records what the migration must
// never do and when the hand-written side went.
type serviceWatch struct {
	floor []string

	mu      sync.Mutex
	current map[string]*discoveryv1.EndpointSlice
	// reached: the watch has shown every address of floor ready.
	reached bool
	// lows are the moments, after reached, at which fewer than floor were
	// ready across all slices.
	lows []string
	// dups are the moments at which one address stood in two of our slices.
	dups []string
	// othersGone is when the last slice not ours went (zero while one is
	// left); endpointsGone when the Endpoints object was deleted.
	othersGone, endpointsGone time.Time
	stops                     []func()
	once                      sync.Once
}

// watchService starts following Service svcName in ns. floor is the ready
// set the Service starts with.
func watchService(t *testing.T, ns string, floor []string) *serviceWatch {
	t.Helper()
	w := &serviceWatch{floor: floor, current: map[string]*discoveryv1.EndpointSlice{}}
	wc, ok := framework.E().Client.(client.WithWatch)
	if !ok {
		t.Fatal("the test client cannot watch")
	}
	sl, err := wc.Watch(context.Background(), &discoveryv1.EndpointSliceList{},
		client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: svcName})
	if err != nil {
		t.Fatal(err)
	}
	ep, err := wc.Watch(context.Background(), &corev1.EndpointsList{}, client.InNamespace(ns))
	if err != nil {
		sl.Stop()
		t.Fatal(err)
	}
	w.follow(sl, w.sliceEvent)
	w.follow(ep, w.endpointsEvent)
	return w
}

// follow hands every event of wi to handle, at the time it arrives, until
// stop.
func (w *serviceWatch) follow(wi watch.Interface, handle func(watch.Event, time.Time)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range wi.ResultChan() {
			handle(ev, time.Now())
		}
	}()
	w.stops = append(w.stops, func() { wi.Stop(); <-done })
}

// sliceEvent applies one slice event and checks the invariants on the
// slices as they then stand.
func (w *serviceWatch) sliceEvent(ev watch.Event, at time.Time) {
	s, ok := ev.Object.(*discoveryv1.EndpointSlice)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	others := w.others()
	if ev.Type == watch.Deleted {
		delete(w.current, s.Name)
	} else {
		w.current[s.Name] = s
	}
	what := fmt.Sprintf("%s after %s of %s", at.Format("15:04:05.000"), ev.Type, s.Name)
	if ready := w.ready(); ready.HasAll(w.floor...) {
		w.reached = true
	} else if w.reached {
		w.lows = append(w.lows, fmt.Sprintf("%s: ready %v", what, sets.List(ready)))
	}
	if twice := w.twice(); len(twice) > 0 {
		w.dups = append(w.dups, fmt.Sprintf("%s: %v in two of our slices", what, twice))
	}
	if others > 0 && w.others() == 0 {
		w.othersGone = at
	}
}

// endpointsEvent records when the Service's Endpoints object is deleted.
func (w *serviceWatch) endpointsEvent(ev watch.Event, at time.Time) {
	ep, ok := ev.Object.(*corev1.Endpoints) //nolint:staticcheck // the legacy object a migration retires
	if !ok || ep.Name != svcName || ev.Type != watch.Deleted {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.endpointsGone = at
}

// ready are the addresses ready in any slice: what kube-proxy routes to.
// A missing ready condition counts as ready, as consumers read it.
func (w *serviceWatch) ready() sets.Set[string] {
	out := sets.New[string]()
	for _, s := range w.current {
		for _, e := range s.Endpoints {
			if len(e.Addresses) > 0 && ptr.Deref(e.Conditions.Ready, true) {
				out.Insert(e.Addresses[0])
			}
		}
	}
	return out
}

// twice are the addresses that stand in more than one of our slices.
func (w *serviceWatch) twice() []string {
	seen := map[string]int{}
	for _, s := range w.current {
		if !ours(s) {
			continue
		}
		for _, e := range s.Endpoints {
			for _, a := range e.Addresses {
				seen[string(s.AddressType)+" "+a]++
			}
		}
	}
	var out []string
	for a, n := range seen {
		if n > 1 {
			out = append(out, a)
		}
	}
	slices.Sort(out)
	return out
}

// others counts the slices that are not ours: hand-written or mirrored.
func (w *serviceWatch) others() int {
	n := 0
	for _, s := range w.current {
		if !ours(s) {
			n++
		}
	}
	return n
}

// ours tells whether a slice is the controller's.
func ours(s *discoveryv1.EndpointSlice) bool {
	return s.Labels[discoveryv1.LabelManagedBy] == v1alpha1.ManagedByValue
}

// watchResult is what a serviceWatch saw.
type watchResult struct {
	reached                   bool
	lows, dups                []string
	othersLeft                int
	othersGone, endpointsGone time.Time
}

// stop ends the watches and returns what they saw; it may be called
// again.
func (w *serviceWatch) stop() watchResult {
	w.once.Do(func() {
		for _, s := range w.stops {
			s()
		}
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	return watchResult{
		reached: w.reached, lows: w.lows, dups: w.dups, othersLeft: w.others(),
		othersGone: w.othersGone, endpointsGone: w.endpointsGone,
	}
}
