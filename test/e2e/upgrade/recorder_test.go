package upgrade_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/controllers"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// recorder keeps, in order, every change of the EndpointSlices, Services,
// ExternalBackends and Leases of one namespace, as a client watching them
// sees it: each write is one event (a new resource version), whoever made
// it, which the controllers' own metrics could not tell across processes
// that come and go.
type recorder struct {
	cancel context.CancelFunc

	mu     sync.Mutex
	events []event
}

// event is one change seen: obj is the object after it (before it, for a
// delete), old the one before an update.
type event struct {
	at       time.Time
	kind     string
	verb     string
	old, obj client.Object
}

// Kinds and verbs of events.
const (
	kindSlice   = "EndpointSlice"
	kindService = "Service"
	kindBackend = "ExternalBackend"
	kindLease   = "Lease"

	verbAdd    = "add"
	verbUpdate = "update"
	verbDelete = "delete"
)

// record starts watching ns; the events of the objects there when it
// starts are adds. stop ends the watch.
func record(ns string) (*recorder, error) {
	scheme, err := controllers.NewScheme()
	if err != nil {
		return nil, err
	}
	c, err := cache.New(framework.E().Config(), cache.Options{Scheme: scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &recorder{cancel: cancel}
	for kind, obj := range map[string]client.Object{
		kindSlice: &discoveryv1.EndpointSlice{}, kindService: &corev1.Service{},
		kindBackend: &v1alpha1.ExternalBackend{}, kindLease: &coordinationv1.Lease{},
	} {
		inf, err := c.GetInformer(ctx, obj)
		if err != nil {
			cancel()
			return nil, err
		}
		if _, err := inf.AddEventHandler(r.handler(kind)); err != nil {
			cancel()
			return nil, err
		}
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		cancel()
		return nil, fmt.Errorf("the recorder's watch of %s did not sync", ns)
	}
	return r, nil
}

// handler records the events of one kind. A resync (the same resource
// version again) is no write and is left out.
func (r *recorder) handler(kind string) toolscache.ResourceEventHandler {
	add := func(verb string, old, obj any) {
		o, ok := obj.(client.Object)
		if !ok {
			return // a tombstone: the delete was missed, no write to count
		}
		e := event{at: time.Now(), kind: kind, verb: verb, obj: o}
		if prev, ok := old.(client.Object); ok {
			e.old = prev
			if prev.GetResourceVersion() == o.GetResourceVersion() {
				return
			}
		}
		r.mu.Lock()
		r.events = append(r.events, e)
		r.mu.Unlock()
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { add(verbAdd, nil, obj) },
		UpdateFunc: func(old, obj any) { add(verbUpdate, old, obj) },
		DeleteFunc: func(obj any) { add(verbDelete, nil, obj) },
	}
}

// seen are the events so far.
func (r *recorder) seen() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]event(nil), r.events...)
}

func (r *recorder) stop() { r.cancel() }
