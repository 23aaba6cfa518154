package replica

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/test/e2e/framework"
)

// Checks register Consul service instances and set their TTL checks: the
// agent itself, or a test's model of the sources that records each change
// and makes it on the agent. Their errors name the instance.
type Checks interface {
	Register(service, id, address, status string) error
	SetCheck(service, id, status string) error
}

// Flipper is a backend whose health a test flips: a Consul service of a
// few instances, each with a TTL check, which the test publishes through
// an ExternalBackend of the same name in Namespace. It records every
// flip, so that a test can tell when each reached the slices.
type Flipper struct {
	Namespace, Name string
	// Addrs are the instances' addresses, instance i at Addrs[i].
	Addrs  []string
	checks Checks

	mu      sync.Mutex
	serving []bool
	flips   []Flip
}

// Flip is one health change: an instance set to serving (passing) or not
// (critical) at a time.
type Flip struct {
	At      time.Time
	Addr    string
	Serving bool
}

// NewFlipper registers a passing instance of Consul service name at each
// of addrs; the caller creates the ExternalBackend name in ns that
// publishes them.
func NewFlipper(checks Checks, ns, name string, addrs ...string) (*Flipper, error) {
	f := &Flipper{Namespace: ns, Name: name, Addrs: addrs, checks: checks}
	for i, a := range addrs {
		if err := checks.Register(name, f.id(i), a, api.HealthPassing); err != nil {
			return nil, err
		}
		f.serving = append(f.serving, true)
	}
	return f, nil
}

// id is the Consul ID of instance i.
func (f *Flipper) id(i int) string { return fmt.Sprintf("%s-%d", f.Name, i) }

// Turn turns the check of instance i over (passing to critical or back)
// and records the flip, timed from just before the change: the
// controller may publish it before the call returns. It returns whether
// the instance now serves.
func (f *Flipper) Turn(i int) (serving bool, err error) {
	f.mu.Lock()
	serving = !f.serving[i]
	f.mu.Unlock()
	status := map[bool]string{true: api.HealthPassing, false: api.HealthCritical}[serving]
	at := time.Now()
	if err := f.checks.SetCheck(f.Name, f.id(i), status); err != nil {
		return serving, err
	}
	f.mu.Lock()
	f.serving[i] = serving
	f.flips = append(f.flips, Flip{At: at, Addr: f.Addrs[i], Serving: serving})
	f.mu.Unlock()
	return serving, nil
}

// FlipEvery flips a check every period, in the background, until the
// function it returns is called, which returns the first error met. Each
// time it takes the next instance whose last flip has reached the slices
// (skipping the tick when none has): a check turned over again before its
// last change was published would make that change's time unmeasurable.
// keepServing instances are left passing whatever happens: a flip that
// would leave fewer never comes.
func (f *Flipper) FlipEvery(period time.Duration, keepServing int) (stop func() error) {
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
			for k := range f.Addrs {
				i := (next + k) % len(f.Addrs)
				current := f.Serving(i)
				if !f.Published(f.Addrs[i], current) || current && f.servingCount() <= keepServing {
					continue
				}
				if _, err := f.Turn(i); err != nil {
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

// Serving tells whether instance i's check passes now.
func (f *Flipper) Serving(i int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.serving[i]
}

// servingCount is how many instances' checks pass now.
func (f *Flipper) servingCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, s := range f.serving {
		if s {
			n++
		}
	}
	return n
}

// Published tells whether the backend's slices publish addr with the
// given health (ready and serving alike: nothing here drains).
func (f *Flipper) Published(addr string, serving bool) bool {
	var list discoveryv1.EndpointSliceList
	if err := framework.E().Client.List(context.Background(), &list, client.InNamespace(f.Namespace),
		client.MatchingLabels{discoveryv1.LabelServiceName: f.Name}); err != nil {
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

// Recorded are the flips made so far.
func (f *Flipper) Recorded() []Flip {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Flip(nil), f.flips...)
}
