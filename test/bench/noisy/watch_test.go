package noisy

import (
	"context"
	"fmt"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/controllers"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// watcher sees the victim namespace's ExternalBackends and EndpointSlices
// through watches, so that a wait ends at the event that completes it
// rather than at the next poll.
type watcher struct {
	cache  cache.Cache
	events chan struct{}
	cancel context.CancelFunc
}

// newWatcher watches namespace ns.
func newWatcher(ns string) (*watcher, error) {
	scheme, err := controllers.NewScheme()
	if err != nil {
		return nil, err
	}
	c, err := cache.New(framework.E().Config(), cache.Options{
		Scheme:            scheme,
		DefaultNamespaces: map[string]cache.Config{ns: {}},
	})
	if err != nil {
		return nil, err
	}
	w := &watcher{cache: c, events: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	poke := func() {
		select {
		case w.events <- struct{}{}:
		default:
		}
	}
	handler := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke() },
		UpdateFunc: func(any, any) { poke() },
		DeleteFunc: func(any) { poke() },
	}
	for _, obj := range []client.Object{&v1alpha1.ExternalBackend{}, &discoveryv1.EndpointSlice{}} {
		inf, err := c.GetInformer(ctx, obj)
		if err != nil {
			cancel()
			return nil, err
		}
		if _, err := inf.AddEventHandler(handler); err != nil {
			cancel()
			return nil, err
		}
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		cancel()
		return nil, fmt.Errorf("the victim's watch did not sync")
	}
	return w, nil
}

func (w *watcher) stop() { w.cancel() }

// until waits until done holds on the watched objects and returns when it
// first did (the time its completing event arrived), or an error after
// timeout with done's last complaint.
func (w *watcher) until(timeout time.Duration, done func(client.Reader) error) (time.Time, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	// A safety net: events are what end a wait.
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		err := done(w.cache)
		if err == nil {
			return time.Now(), nil
		}
		select {
		case <-w.events:
		case <-tick.C:
		case <-deadline.C:
			return time.Time{}, fmt.Errorf("not done after %s: %w", timeout, err)
		}
	}
}
