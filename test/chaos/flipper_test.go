package chaos_test

import (
	"testing"
	"time"

	"github.com/backendslice/backendslice/test/replica"
)

// worldChecks set Consul checks through the world, which records each
// change in its model before the invariants compare the slices with it.
type worldChecks struct{ w *world }

func (c worldChecks) Register(service, id, address, status string) error {
	return c.w.tryRegisterConsul(service, id, address, status)
}

func (c worldChecks) SetCheck(service, id, status string) error {
	return c.w.trySetConsulCheck(service, id, status)
}

// newFlipper registers n passing instances of Consul service name (at
// 203.0.113.121 and on) and creates the ExternalBackend name in ns that
// publishes them.
func newFlipper(t *testing.T, ns, name string, n int) *replica.Flipper {
	t.Helper()
	var addrs []string
	for i := range n {
		addrs = append(addrs, ip4(2, 120+i))
	}
	f, err := replica.NewFlipper(worldChecks{env.world}, ns, name, addrs...)
	if err != nil {
		t.Fatal(err)
	}
	env.world.createBackend(t, replica.Backend(ns, name, 2*time.Second, replica.ConsulSource("catalog", name)))
	return f
}

// flipAndPoll turns the check of instance i over and returns a poll that
// waits until the slices publish it.
func flipAndPoll(t *testing.T, f *replica.Flipper, i int) func() time.Time {
	t.Helper()
	serving, err := f.Turn(i)
	if err != nil {
		t.Fatal(err)
	}
	return pollFirst(convergeTimeout, func() bool { return f.Published(f.Addrs[i], serving) })
}
