package controllers

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	eventsv1client "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/flowcontrol"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/backendslice/backendslice/internal/eventbudget"
)

// reportingController names the controller in the Events it records.
const reportingController = "backendslice"

// newEventRecorder returns the recorder the reconcilers record Events
// with, and the runnable that sends them to the API server while the
// manager runs.
//
// Events go through a budget (internal/eventbudget: each namespace's own,
// under a global cap; what is over it is dropped) and then through a client
// of their own, with a rate limiter of its own. controller-runtime's
// recorder would send them with the manager's config, on the limiter that
// the tenants' reconciles, the informers and the lease share: a storm of
// Events there once delayed the lease's renewals past the renew deadline.
// Each Event the budget lets through costs at most two requests (its create
// and the patch that opens its series; further repeats are counted in
// memory), so the client may send twice the global cap.
func newEventRecorder(cfg *rest.Config, scheme *runtime.Scheme, reg prometheus.Registerer, limits eventbudget.Limits) (events.EventRecorder, manager.Runnable, error) {
	cl, err := eventsv1client.NewForConfig(eventsConfig(cfg, limits))
	if err != nil {
		return nil, nil, fmt.Errorf("making the Events client: %w", err)
	}
	metrics, err := eventbudget.NewMetrics(reg)
	if err != nil {
		return nil, nil, fmt.Errorf("registering the Event budget's metrics: %w", err)
	}
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: cl})
	// The sink is attached now, not when the manager starts the runnable:
	// the broadcaster drops what is recorded while nothing watches it, and
	// on a loaded machine an Event was recorded before the runnable's
	// goroutine had run.
	sending, stop := context.WithCancel(context.Background())
	if err := b.StartRecordingToSinkWithContext(sending); err != nil {
		stop()
		return nil, nil, fmt.Errorf("starting to record Events: %w", err)
	}
	rec := eventbudget.NewRecorder(b.NewRecorder(scheme, reportingController), scheme, eventbudget.New(limits, nil), metrics)
	return rec, broadcasting{b, stop}, nil
}

// eventsConfig is cfg for the Events client alone: a copy with a rate
// limiter of its own, twice the budget's global cap.
func eventsConfig(cfg *rest.Config, limits eventbudget.Limits) *rest.Config {
	c := rest.AddUserAgent(rest.CopyConfig(cfg), "events")
	c.QPS = float32(2 * limits.Global.Rate)
	c.Burst = 2 * limits.Global.Burst
	c.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(c.QPS, c.Burst)
	return c
}

// broadcasting is the broadcaster sending Events to the API server, from
// its making until the manager stops.
type broadcasting struct {
	events.EventBroadcaster
	stop context.CancelFunc
}

// Start waits until ctx ends, then stops sending and shuts the broadcaster
// down.
func (b broadcasting) Start(ctx context.Context) error {
	<-ctx.Done()
	b.stop()
	b.Shutdown()
	return nil
}

// NeedLeaderElection is false: a standby has no Events to send, and a
// leader's first ones must find the sink started.
func (broadcasting) NeedLeaderElection() bool { return false }
