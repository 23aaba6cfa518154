// Package writes_test counts what the controller writes and how often it
// reconciles, against a real kube-apiserver and a real Consul agent: with a
// coalescing window (--coalesce-quiet, --coalesce-max) flapping Consul
// health checks, and for the watch events of its own writes.
//
// The tests run one after another: they read the controller's counters of
// held reconciles and of reconciles, which every backend shares.
package writes_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/controllers/externalbackend"
	"github.com/backendslice/backendslice/internal/coalesce"
	"github.com/backendslice/backendslice/providers/consul"
	"github.com/backendslice/backendslice/test/consultest"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// window is the controller's coalescing window in these tests. The quiet
// time is longer than the 1 s of the flag's example so that a loaded
// machine flipping a check back and forth still flips within it.
var window = coalesce.Window{Quiet: 2 * time.Second, Max: 6 * time.Second}

// agent is the Consul agent the controller's consul provider asks.
var agent *consultest.Agent

func TestMain(m *testing.M) {
	os.Exit(framework.RunWithConsul(m, consultest.Config{}, consul.Options{},
		framework.Options{Config: func(c *externalbackend.Config) { c.Coalesce = window }},
		func(c framework.Consul) { agent = c.Agent }))
}

// start registers instances of service, one per address, and creates a
// backend publishing them; it returns once all are published ready.
func start(t *testing.T, service string, addrs ...string) (*v1alpha1.ExternalBackend, map[string]bool) {
	t.Helper()
	ns := framework.Namespace(t)
	want := map[string]bool{}
	for i, addr := range addrs {
		id := fmt.Sprintf("%s-%d", service, i)
		must(t, agent.Register(consultest.Service{ID: id, Name: service, Address: addr}))
		t.Cleanup(func() { _ = agent.Deregister(id) })
		want[addr] = true
	}
	xb := &v1alpha1.ExternalBackend{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: service},
		Spec: v1alpha1.ExternalBackendSpec{
			Service: v1alpha1.ServiceSpec{Ports: []v1alpha1.ServicePort{{Name: "http", Port: 80, TargetPort: ptr.To[int32](8080)}}},
			Sources: []v1alpha1.Source{{Name: "catalog", Consul: &v1alpha1.ConsulSource{Service: service}}},
		},
	}
	framework.Create(t, xb)
	// Cleanups run last first: the backend goes before its instances, so
	// that their deregistration holds or writes nothing.
	t.Cleanup(func() { _ = framework.E().Client.Delete(context.Background(), xb) })
	framework.WaitReady(t, xb)
	waitReadiness(t, xb, want)
	return xb, want
}

// readiness maps each address the backend's slices publish to its ready
// condition.
func readiness(t *testing.T, xb *v1alpha1.ExternalBackend) (map[string]bool, error) {
	eps, err := framework.Published(framework.Slices(t, xb.Namespace, xb.Name))
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for addr, e := range eps {
		out[addr] = ptr.Deref(e.Conditions.Ready, false)
	}
	return out, nil
}

// waitReadiness waits until the backend's slices publish exactly want.
func waitReadiness(t *testing.T, xb *v1alpha1.ExternalBackend, want map[string]bool) {
	t.Helper()
	framework.Eventually(t, framework.Timeout, fmt.Sprintf("slices of %s publishing %v", xb.Name, want), func() error {
		got, err := readiness(t, xb)
		if err != nil {
			return err
		}
		if !maps.Equal(got, want) {
			return fmt.Errorf("published %v", got)
		}
		return nil
	})
}

// counters are the writes to one backend's slices and the reconciles the
// window held.
type counters struct{ writes, held float64 }

// take reads the counters of xb. The API server raises a slice's
// generation at each change of its endpoints, so the sum of generations
// counts the creates and updates of the backend's slices whatever the
// other backends do; the tests delete none.
func take(t *testing.T, xb *v1alpha1.ExternalBackend) counters {
	t.Helper()
	var c counters
	for _, s := range framework.Slices(t, xb.Namespace, xb.Name) {
		c.writes += float64(s.Generation)
	}
	c.held, _ = framework.MetricValue(t, "backendslice_changes_held_total", nil)
	return c
}

// waitHeld waits until the window has held a change since c was taken.
func waitHeld(t *testing.T, xb *v1alpha1.ExternalBackend, c counters) {
	t.Helper()
	framework.Eventually(t, framework.Timeout, "the window holding a change", func() error {
		if take(t, xb).held <= c.held {
			return fmt.Errorf("nothing held yet")
		}
		return nil
	})
}

// settle waits past the quiet time, so that anything still held is written.
func settle() { time.Sleep(window.Quiet + time.Second) }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// flip sets the check of instance i of service to status.
func flip(t *testing.T, service string, i int, status string) {
	t.Helper()
	must(t, agent.SetCheck(fmt.Sprintf("%s-%d", service, i), status))
}

// TestBurstBecomesOneWrite flaps one check five times in a row, ending
// critical: without the window each flip the controller sees is a slice
// write; with it the burst is one write, made once the check stays quiet.
func TestBurstBecomesOneWrite(t *testing.T) {
	xb, want := start(t, "burst", "192.0.2.10", "192.0.2.11", "192.0.2.12")
	before := take(t, xb)
	for i, status := range []string{api.HealthCritical, api.HealthPassing, api.HealthCritical, api.HealthPassing, api.HealthCritical} {
		flip(t, "burst", 0, status)
		if i == 0 {
			// The first flip is seen before the next one comes.
			waitHeld(t, xb, before)
		}
	}
	want["192.0.2.10"] = false
	waitReadiness(t, xb, want)
	settle()
	got := take(t, xb)
	if n := got.writes - before.writes; n != 1 {
		t.Errorf("%v slice writes for a burst of 5 flips, want 1", n)
	}
	t.Logf("5 flips: %v slice write(s), %v reconcile(s) held", got.writes-before.writes, got.held-before.held)
}

// TestFlipUndoneIsNeverWritten turns a check critical and back within the
// quiet time: nothing is written, and the endpoint never leaves service.
func TestFlipUndoneIsNeverWritten(t *testing.T) {
	xb, want := start(t, "undo", "192.0.2.20", "192.0.2.21")
	before := take(t, xb)
	flip(t, "undo", 0, api.HealthCritical)
	// The controller has seen the critical check and held it.
	waitHeld(t, xb, before)
	flip(t, "undo", 0, api.HealthPassing)
	settle()
	if n := take(t, xb).writes - before.writes; n != 0 {
		t.Errorf("%v slice writes for a flip undone within the window, want 0", n)
	}
	got, err := readiness(t, xb)
	must(t, err)
	if !maps.Equal(got, want) {
		t.Errorf("published %v, want %v", got, want)
	}
}

// TestNeverQuietIsWrittenAtMax keeps one check flapping for longer than the
// window's max while another stays critical: the critical one is published
// while the flapping goes on (the max bounds the delay), and the whole run
// costs a few writes instead of one per flip.
func TestNeverQuietIsWrittenAtMax(t *testing.T) {
	xb, want := start(t, "flap", "192.0.2.30", "192.0.2.31", "192.0.2.32")
	before := take(t, xb)
	flip(t, "flap", 0, api.HealthCritical)
	want["192.0.2.30"] = false
	status := []string{api.HealthCritical, api.HealthPassing}
	flips := 0
	end := time.Now().Add(window.Max + window.Quiet + time.Second)
	publishedWhileFlapping := false
	for time.Now().Before(end) {
		flip(t, "flap", 1, status[flips%2])
		flips++
		time.Sleep(window.Quiet / 5)
		if got, err := readiness(t, xb); err == nil && !got["192.0.2.30"] {
			publishedWhileFlapping = true
		}
	}
	if !publishedWhileFlapping {
		t.Errorf("192.0.2.30 not published as not ready during %d flips of another check over %s: the window's max (%s) did not bound the delay",
			flips, window.Max+window.Quiet+time.Second, window.Max)
	}
	// The last flip leaves instance 1 as its count says.
	want["192.0.2.31"] = status[(flips-1)%2] == api.HealthPassing
	waitReadiness(t, xb, want)
	settle()
	n := take(t, xb).writes - before.writes
	if n < 1 || n > 3 {
		t.Errorf("%v slice writes for %d flips over %s, want between 1 and 3", n, flips, window.Max+window.Quiet+time.Second)
	}
	t.Logf("%d flips: %v slice writes", flips, n)
}

// TestSpecChangeIsNotHeld changes the spec while a provider change is
// held: the reconcile of the new generation publishes at once, the held
// change with it, and holds nothing.
func TestSpecChangeIsNotHeld(t *testing.T) {
	xb, want := start(t, "spec", "192.0.2.40", "192.0.2.41")
	before := take(t, xb)
	flip(t, "spec", 0, api.HealthCritical)
	waitHeld(t, xb, before)
	held := take(t, xb).held
	must(t, framework.Update(t, xb, func(xb *v1alpha1.ExternalBackend) {
		xb.Spec.Sources = append(xb.Spec.Sources, v1alpha1.Source{
			Name: "dr", Static: &v1alpha1.StaticSource{Endpoints: []v1alpha1.StaticEndpoint{{Address: "198.51.100.40"}}},
		})
	}))
	want["192.0.2.40"] = false
	want["198.51.100.40"] = true
	waitReadiness(t, xb, want)
	framework.WaitReady(t, xb)
	if after := take(t, xb).held; after != held {
		t.Errorf("%v reconcile(s) held after the spec changed, want none", after-held)
	}
}

// quiet waits until the controller has not reconciled for a second, and
// returns its count of reconciles.
func quiet(t *testing.T) float64 {
	t.Helper()
	n, _ := framework.MetricValue(t, "backendslice_reconciles_total", nil)
	for stable := time.Now(); time.Since(stable) < time.Second; {
		time.Sleep(100 * time.Millisecond)
		if now, _ := framework.MetricValue(t, "backendslice_reconciles_total", nil); now != n {
			n, stable = now, time.Now()
		}
	}
	return n
}

// TestOwnWritesBringNoReconcile changes a spec so that one slice is
// updated: the change is one reconcile, and the watch event of the slice
// update it makes brings none, while a change someone else makes to the
// slice still brings one that reverts it.
func TestOwnWritesBringNoReconcile(t *testing.T) {
	xb, want := start(t, "echo", "192.0.2.50")
	xb.Spec.Sources = append(xb.Spec.Sources, v1alpha1.Source{
		Name: "dr", Static: &v1alpha1.StaticSource{Endpoints: []v1alpha1.StaticEndpoint{{Address: "198.51.100.50"}}},
	})
	before := quiet(t)
	must(t, framework.Update(t, xb, func(cur *v1alpha1.ExternalBackend) { cur.Spec.Sources = xb.Spec.Sources }))
	want["198.51.100.50"] = true
	waitReadiness(t, xb, want)
	if n := quiet(t) - before; n != 1 {
		t.Errorf("%v reconciles for one spec change and its slice update, want 1", n)
	}

	// Someone else's change to the slice is still seen, and reverted.
	sl := framework.Slices(t, xb.Namespace, xb.Name)[0]
	sl.Endpoints = sl.Endpoints[:1]
	must(t, framework.E().Client.Update(context.Background(), &sl))
	waitReadiness(t, xb, want)
}
