package dns_test

import (
	"maps"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/dnstest"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// holdFor checks, for d, that the slices of db in ns keep publishing want.
func holdFor(t *testing.T, ns string, want map[string]string, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		got, err := framework.States(framework.Slices(t, ns, "db"))
		if err != nil || !maps.Equal(got, framework.ServedOf(want)) {
			t.Fatalf("the slices publish %v (%v), want %v kept", got, err, want)
		}
	}
}

// TestRestartDuringOutageKeepsEndpoints restarts the controller while a
// name's resolver fails: the new process knows no answer of the source, so
// it must publish exactly what the slices held, for as long as the outage
// lasts (several passes, longer than the drain period of 0s), with the
// source stale on status; when DNS answers again the endpoints follow it
// without another restart. Before the fix, the pass after the restart
// took the failed source's answer for "known and empty" and dropped every
// endpoint.
func TestRestartDuringOutageKeepsEndpoints(t *testing.T) {
	name := host("restart-outage")
	setAddrs(name, 1, "192.0.2.60", "2001:db8::60")
	ns, xb := create(t, name, func(xb *v1alpha1.ExternalBackend) {
		xb.Spec.DrainPeriod = &metav1.Duration{}
	})
	want := allReady("192.0.2.60", "2001:db8::60")
	waitStates(t, ns, want)
	framework.WaitReady(t, xb)

	server.Fail(name, dnstest.ServFail)
	defer server.Fail(name, dnstest.Answer)
	framework.RestartController(t)
	cur := framework.WaitCondition(t, xb, v1alpha1.ConditionResolved, metav1.ConditionFalse, v1alpha1.ReasonSourceFailed)
	if src := sourceStatus(t, cur, "lookup"); !src.Stale {
		t.Errorf("status.sources[lookup] = %+v, want stale", src)
	}
	// The source is looked up every second: several failed passes.
	holdFor(t, ns, want, 4*time.Second)

	setAddrs(name, 1, "192.0.2.61")
	server.Fail(name, dnstest.Answer)
	waitStates(t, ns, allReady("192.0.2.61"))
	framework.WaitReady(t, xb)
}

// TestSourceEditedDuringOutageDrains edits a source while its resolver
// fails: the answer held for the old name must not stand for the new one,
// so the old name's endpoints drain (at once, with drainPeriod 0s), and the
// new name's are published once it answers.
func TestSourceEditedDuringOutageDrains(t *testing.T) {
	old, next := host("edit-old"), host("edit-new")
	setAddrs(old, 1, "192.0.2.62")
	ns, xb := create(t, old, func(xb *v1alpha1.ExternalBackend) {
		xb.Spec.DrainPeriod = &metav1.Duration{}
	})
	waitStates(t, ns, allReady("192.0.2.62"))

	server.Fail(old, dnstest.ServFail)
	defer server.Fail(old, dnstest.Answer)
	server.Fail(next, dnstest.ServFail)
	defer server.Fail(next, dnstest.Answer)
	framework.WaitCondition(t, xb, v1alpha1.ConditionResolved, metav1.ConditionFalse, v1alpha1.ReasonSourceFailed)
	if err := framework.Update(t, xb, func(xb *v1alpha1.ExternalBackend) { xb.Spec.Sources[0].DNS.Name = next }); err != nil {
		t.Fatal(err)
	}
	waitStates(t, ns, map[string]string{})

	setAddrs(next, 1, "192.0.2.63")
	server.Fail(next, dnstest.Answer)
	waitStates(t, ns, allReady("192.0.2.63"))
}

// TestRestartDuringOutageDrainsOtherSourcesRemovals restarts the controller
// while one of two sources fails. The other answers without an address
// that only it published: that address must drain (at once, with
// drainPeriod 0s) while the failing source's endpoints are held, since
// the slices record which source published what. Before the record, the
// new process could not tell them apart and held both.
func TestRestartDuringOutageDrainsOtherSourcesRemovals(t *testing.T) {
	failing, answering := host("restart-failing"), host("restart-answering")
	setAddrs(failing, 1, "192.0.2.64")
	setAddrs(answering, 1, "192.0.2.65", "192.0.2.66")
	second := lookup(answering)
	second.Name = "other"
	ns, xb := create(t, failing, func(xb *v1alpha1.ExternalBackend) {
		xb.Spec.Sources = append(xb.Spec.Sources, second)
		xb.Spec.DrainPeriod = &metav1.Duration{}
	})
	waitStates(t, ns, allReady("192.0.2.64", "192.0.2.65", "192.0.2.66"))
	framework.WaitReady(t, xb)

	server.Fail(failing, dnstest.ServFail)
	defer server.Fail(failing, dnstest.Answer)
	framework.RestartControllerAfter(t, func() { setAddrs(answering, 1, "192.0.2.65") })
	framework.WaitCondition(t, xb, v1alpha1.ConditionResolved, metav1.ConditionFalse, v1alpha1.ReasonSourceFailed)
	want := allReady("192.0.2.64", "192.0.2.65")
	waitStates(t, ns, want)
	holdFor(t, ns, want, 3*time.Second)

	server.Fail(failing, dnstest.Answer)
	framework.WaitReady(t, xb)
	waitStates(t, ns, want)
}
