package chaos_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/test/e2e/framework"
)

// flipper is a backend whose health the test flips: a Consul service of a
// few instances, each with a TTL check, published by one ExternalBackend
// of the same name. It records every flip, so that a test can tell when
// each reached the slices.
type flipper struct {
	ns, name string
	addrs    []string

	mu    sync.Mutex
	flips []flip
}

// flip is one health change: instance i of the service set to serving
// (passing) or not (critical) at a time.
type flip struct {
	at      time.Time
	addr    string
	serving bool
}

// newFlipper registers n passing instances of Consul service name (at
// 203.0.113.121 and on) and creates the ExternalBackend name in ns that
// publishes them.
func newFlipper(t *testing.T, ns, name string, n int) *flipper {
	t.Helper()
	f := &flipper{ns: ns, name: name}
	for i := range n {
		f.addrs = append(f.addrs, ip4(2, 120+i))
		env.world.registerConsul(t, name, f.id(i), f.addrs[i], api.HealthPassing)
	}
	env.world.createBackend(t, backend(ns, name, 2*time.Second, consulSource("catalog", name)))
	return f
}

// id is the Consul ID of instance i.
func (f *flipper) id(i int) string { return fmt.Sprintf("%s-%d", f.name, i) }

// flip turns the check of instance i over (passing to critical or back),
// records it, and returns a poll that waits until the slices publish it.
func (f *flipper) flip(t *testing.T, i int) func() time.Time {
	t.Helper()
	serving, err := f.turn(i)
	if err != nil {
		t.Fatal(err)
	}
	return pollFirst(convergeTimeout, func() bool { return f.published(f.addrs[i], serving) })
}

// turn turns the check of instance i over and records the flip, timed
// from just before the change: the controller may publish it before the
// call returns.
func (f *flipper) turn(i int) (serving bool, err error) {
	serving = env.world.consulStatus(f.name, f.id(i)) != api.HealthPassing
	status := map[bool]string{true: api.HealthPassing, false: api.HealthCritical}[serving]
	at := time.Now()
	if err := env.world.trySetConsulCheck(f.name, f.id(i), status); err != nil {
		return serving, err
	}
	f.mu.Lock()
	f.flips = append(f.flips, flip{at: at, addr: f.addrs[i], serving: serving})
	f.mu.Unlock()
	return serving, nil
}

// flipEvery flips a check every period, in the background, until the
// function it returns is called, which returns the first error met. Each
// time it takes the next instance whose last flip has reached the slices
// (skipping the tick when none has): a check turned over again before its
// last change was published would make that change's time unmeasurable.
func (f *flipper) flipEvery(period time.Duration) (stop func() error) {
	done, result := make(chan struct{}), make(chan error, 1)
	go func() {
		tick := time.NewTicker(period)
		defer tick.Stop()
		next := 0
		for {
			select {
			case <-done:
				result <- nil
				return
			case <-tick.C:
			}
			for k := range f.addrs {
				i := (next + k) % len(f.addrs)
				current := env.world.consulStatus(f.name, f.id(i)) == api.HealthPassing
				if !f.published(f.addrs[i], current) {
					continue
				}
				if _, err := f.turn(i); err != nil {
					result <- err
					return
				}
				next = i + 1
				break
			}
		}
	}()
	return func() error {
		close(done)
		return <-result
	}
}

// published tells whether the backend's slices publish addr with the
// given health (ready and serving alike: nothing here drains).
func (f *flipper) published(addr string, serving bool) bool {
	var list discoveryv1.EndpointSliceList
	if err := framework.E().Client.List(context.Background(), &list, client.InNamespace(f.ns),
		client.MatchingLabels{discoveryv1.LabelServiceName: f.name}); err != nil {
		return false
	}
	for _, s := range list.Items {
		for _, e := range s.Endpoints {
			if len(e.Addresses) > 0 && e.Addresses[0] == addr {
				return ptr.Deref(e.Conditions.Serving, false) == serving && ptr.Deref(e.Conditions.Ready, false) == serving
			}
		}
	}
	return false
}

// recorded are the flips made so far.
func (f *flipper) recorded() []flip {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]flip(nil), f.flips...)
}
