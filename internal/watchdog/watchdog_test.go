package watchdog

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// TestVerdict: only a leader with a reconcile older than the bound fails,
// and the message names the reconcile, its age and the flag.
func TestVerdict(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	run := func(age time.Duration) Run {
		return Run{Controller: "externalbackend", Key: "payments/db", Since: now.Add(-age)}
	}
	cases := []struct {
		name             string
		oldest           Run
		running, leading bool
		want             string
	}{
		{name: "nothing runs", leading: true},
		{name: "a reconcile within the bound", oldest: run(time.Minute), running: true, leading: true},
		{name: "a reconcile exactly at the bound", oldest: run(2 * time.Minute), running: true, leading: true},
		{name: "a reconcile past the bound", oldest: run(3 * time.Minute), running: true, leading: true,
			want: "the externalbackend reconcile of payments/db has run for 3m0s, longer than --stuck-reconcile-timeout=2m0s"},
		{name: "a standby is never stuck", oldest: run(3 * time.Minute), running: true, leading: false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := Verdict(c.oldest, c.running, c.leading, now, 2*time.Minute)
			switch {
			case c.want == "" && err != nil:
				t.Errorf("got %v, want nil", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("got %v, want an error saying %q", err, c.want)
			}
		})
	}
}

// TestWrapRecordsRunningReconciles: a wrapped reconcile is running (and the
// oldest) from its start until it returns, and the check fails on it only
// once it is older than the bound; a nil watchdog wraps nothing.
func TestWrapRecordsRunningReconciles(t *testing.T) {
	fake := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	w := New(fake)
	entered, release := make(chan struct{}), make(chan struct{})
	blocking := reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
		entered <- struct{}{}
		<-release
		return reconcile.Result{}, nil
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = w.Wrap("backendprovider", blocking).Reconcile(context.Background(), reconcile.Request{})
	}()
	<-entered
	r, ok := w.Oldest()
	if !ok || r.Controller != "backendprovider" || !r.Since.Equal(fake.Now()) {
		t.Fatalf("oldest %+v %v while a reconcile runs", r, ok)
	}
	check := w.Checker(time.Minute, func() bool { return true }, logr.Discard())
	if err := check(nil); err != nil {
		t.Errorf("a reconcile that just started fails the check: %v", err)
	}
	fake.SetTime(fake.Now().Add(2 * time.Minute))
	if err := check(nil); err == nil || !strings.Contains(err.Error(), "backendprovider: a reconcile has run for longer than --stuck-reconcile-timeout=1m0s") {
		t.Errorf("a reconcile running for 2m: got %v, want the 1m check to fail", err)
	}
	close(release)
	<-done
	if r, ok := w.Oldest(); ok {
		t.Errorf("a reconcile that returned is still running: %+v", r)
	}
	if err := check(nil); err != nil {
		t.Errorf("the check fails with nothing running: %v", err)
	}

	var off *Watchdog
	if got := off.Wrap("externalbackend", blocking); got == nil {
		t.Error("a nil watchdog dropped the reconciler")
	}
}
