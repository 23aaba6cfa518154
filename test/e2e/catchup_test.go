package e2e

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// TestCatchUpWaitsBehindChanges restarts the controller over backends
// whose statuses lack readyEndpoints, as the previous release wrote them,
// one of which lost its slice while no controller ran. The new controller
// puts the slice back before it writes any status (the catch-ups wait
// behind every change), then writes each backend's status once, with
// readyEndpoints filled in, and nothing else. Not parallel: it restarts
// the controller every test shares.
func TestCatchUpWaitsBehindChanges(t *testing.T) {
	ns := newNamespace(t)
	const n = 20
	var xbs []*v1alpha1.ExternalBackend
	for i := range n {
		xb := staticBackend(ns, fmt.Sprintf("b%02d", i), fmt.Sprintf("192.0.2.%d", 10+i))
		mustCreate(t, xb)
		xbs = append(xbs, xb)
	}
	for _, xb := range xbs {
		waitStatus(t, xb, "readyEndpoints 1/1", func(cur *v1alpha1.ExternalBackend) error {
			if cur.Status.ReadyEndpoints != "1/1" || cur.Status.ObservedGeneration != cur.Generation {
				return fmt.Errorf("readyEndpoints %q, observedGeneration %d of %d", cur.Status.ReadyEndpoints, cur.Status.ObservedGeneration, cur.Generation)
			}
			return nil
		})
	}
	drifted := xbs[n/2]
	lost := ourSlices(t, ns, drifted.Name)
	var rec *writeLog
	framework.RestartControllerAfter(t, func() {
		for _, xb := range xbs {
			removeReadyEndpoints(t, xb)
		}
		for i := range lost {
			if err := k8s.Delete(ctx, &lost[i]); err != nil {
				t.Fatal(err)
			}
		}
		rec = recordWrites(t, ns)
	})
	for _, xb := range xbs {
		waitStatus(t, xb, "readyEndpoints caught up", func(cur *v1alpha1.ExternalBackend) error {
			if cur.Status.ReadyEndpoints != "1/1" {
				return fmt.Errorf("readyEndpoints %q", cur.Status.ReadyEndpoints)
			}
			return nil
		})
	}
	waitAddresses(t, ns, drifted.Name, fmt.Sprintf("192.0.2.%d", 10+n/2))
	// Long enough for a second write of any status to show.
	time.Sleep(2 * time.Second)
	events, err := rec.stop()
	if err != nil {
		t.Fatal(err)
	}

	var sliceAt int64
	statuses := map[string]int{}
	var firstStatus int64
	for _, e := range events {
		switch e.kind {
		case "EndpointSlice":
			if e.name != drifted.Name || e.verb != watch.Added || sliceAt != 0 {
				t.Errorf("a slice write beyond putting back the lost one: %s of a slice of %s", e.verb, e.name)
			}
			sliceAt = e.rv
		case "ExternalBackend":
			statuses[e.name]++
			if firstStatus == 0 {
				firstStatus = e.rv
			}
		}
	}
	switch {
	case sliceAt == 0:
		t.Error("the lost slice was not put back")
	case firstStatus != 0 && firstStatus < sliceAt:
		t.Errorf("a status catch-up (resourceVersion %d) was written before the lost slice was put back (%d)", firstStatus, sliceAt)
	}
	for _, xb := range xbs {
		if statuses[xb.Name] != 1 {
			t.Errorf("backend %s: %d status writes, want the one catch-up", xb.Name, statuses[xb.Name])
		}
	}
}

// removeReadyEndpoints takes readyEndpoints out of xb's status, as a
// status the previous release wrote lacks it.
func removeReadyEndpoints(t *testing.T, xb *v1alpha1.ExternalBackend) {
	t.Helper()
	patch := client.RawPatch(types.JSONPatchType, []byte(`[{"op":"remove","path":"/status/readyEndpoints"}]`))
	if err := k8s.Status().Patch(ctx, xb.DeepCopy(), patch); err != nil {
		t.Fatalf("removing readyEndpoints of %s: %v", xb.Name, err)
	}
}

// write is one write a watch saw: its kind, verb, the backend it is of,
// and its resourceVersion, which orders the writes of both watches.
type write struct {
	kind, name string
	verb       watch.EventType
	rv         int64
}

// writeLog records every write to ns's ExternalBackends and
// EndpointSlices from now on.
type writeLog struct {
	mu     sync.Mutex
	seen   []write
	stops  []watch.Interface
	done   sync.WaitGroup
	failed []error
}

// recordWrites watches ns's ExternalBackends and EndpointSlices from their
// current resourceVersions.
func recordWrites(t *testing.T, ns string) *writeLog {
	t.Helper()
	watcher, ok := k8s.(client.WithWatch)
	if !ok {
		t.Fatal("the framework's client cannot watch")
	}
	l := &writeLog{}
	for _, list := range []client.ObjectList{&v1alpha1.ExternalBackendList{}, &discoveryv1.EndpointSliceList{}} {
		if err := k8s.List(ctx, list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		rv := list.GetResourceVersion()
		w, err := watcher.Watch(ctx, list, client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}})
		if err != nil {
			t.Fatal(err)
		}
		l.stops = append(l.stops, w)
		l.done.Add(1)
		go func() {
			defer l.done.Done()
			for ev := range w.ResultChan() {
				o, ok := ev.Object.(client.Object)
				if !ok {
					continue
				}
				rv, err := strconv.ParseInt(o.GetResourceVersion(), 10, 64)
				wr := write{verb: ev.Type, rv: rv, name: o.GetName()}
				switch o := o.(type) {
				case *v1alpha1.ExternalBackend:
					wr.kind = "ExternalBackend"
				case *discoveryv1.EndpointSlice:
					wr.kind, wr.name = "EndpointSlice", o.Labels[discoveryv1.LabelServiceName]
				}
				l.mu.Lock()
				l.seen = append(l.seen, wr)
				if err != nil {
					l.failed = append(l.failed, err)
				}
				l.mu.Unlock()
			}
		}()
	}
	return l
}

// stop ends the watches and returns the writes in resourceVersion order.
func (l *writeLog) stop() ([]write, error) {
	for _, w := range l.stops {
		w.Stop()
	}
	l.done.Wait()
	slices.SortFunc(l.seen, func(a, b write) int { return int(a.rv - b.rv) })
	return l.seen, errors.Join(l.failed...)
}
