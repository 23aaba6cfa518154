package externalbackend

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/backendslice/backendslice/api/v1alpha1"
)

// wakeBuffer bounds the wake-ups waiting to be taken: the work queue
// de-duplicates, so a full buffer only means the backends are already queued
// often enough.
const wakeBuffer = 1024

// ChannelWaker turns providers' wake-ups into reconcile requests. Build it
// before the provider registry, give it to the providers that push, and pass
// it in ManagerOptions.Waker.
type ChannelWaker struct {
	events  chan event.GenericEvent
	stopped chan struct{}
	stop    sync.Once
}

// NewChannelWaker returns a waker with a buffered channel.
func NewChannelWaker() *ChannelWaker {
	return &ChannelWaker{events: make(chan event.GenericEvent, wakeBuffer), stopped: make(chan struct{})}
}

// Wake queues a reconcile of backend; if the buffer is full it waits, since
// dropping a wake-up would lose a change until the next refresh, unless the
// controller has stopped.
func (w *ChannelWaker) Wake(backend types.NamespacedName) {
	xb := &v1alpha1.ExternalBackend{}
	xb.Namespace, xb.Name = backend.Namespace, backend.Name
	select {
	case w.events <- event.GenericEvent{Object: xb}:
	case <-w.stopped:
	}
}

// Stop makes every Wake, waiting or to come, return at once: the controller
// takes no more wake-ups.
func (w *ChannelWaker) Stop() {
	w.stop.Do(func() { close(w.stopped) })
}
