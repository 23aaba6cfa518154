package backendprovider

import (
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
)

// testChecks are check options whose waits are easy to read.
var testChecks = CheckOptions{Interval: time.Minute, Timeout: 10 * time.Second, RetryDelay: 5 * time.Second,
	FailureThreshold: 3, SuccessThreshold: 2, Concurrency: 1}

// exact spreads nothing.
func exact(d time.Duration) time.Duration { return d }

// TestHealthRecord runs sequences of check results through record and
// reads, after each, the verdict Ready shows and the wait until the next
// check: a verdict turns only after the threshold's results in a row, a
// failing connection is checked again with a doubling wait up to the
// interval, and a first check decides at once.
func TestHealthRecord(t *testing.T) {
	refused := errors.New("dial tcp 127.0.0.1:8500: connect: connection refused")
	type step struct {
		err       error
		connected bool
		wait      time.Duration
	}
	pass := func(connected bool, wait time.Duration) step { return step{nil, connected, wait} }
	fail := func(connected bool, wait time.Duration) step { return step{refused, connected, wait} }
	mismatch := providers.Terminalf(v1alpha1.ReasonUnsupportedProtocol, "speaks v2")
	other := func(connected bool, wait time.Duration) step { return step{mismatch, connected, wait} }
	cases := []struct {
		name  string
		start health
		steps []step
	}{
		{"a first pass decides", health{}, []step{pass(true, time.Minute)}},
		{"a first failure decides", health{}, []step{fail(false, 5*time.Second)}},
		{"one or two failures do not turn a Ready provider", health{decided: true, connected: true}, []step{
			fail(true, 5*time.Second), fail(true, 10*time.Second), pass(true, time.Minute),
			fail(true, 5*time.Second), fail(true, 10*time.Second), pass(true, time.Minute),
		}},
		{"three failures in a row turn it, then the wait doubles up to the interval", health{decided: true, connected: true}, []step{
			fail(true, 5*time.Second), fail(true, 10*time.Second), fail(false, 20*time.Second),
			fail(false, 40*time.Second), fail(false, time.Minute), fail(false, time.Minute),
		}},
		{"one pass does not turn it back, two in a row do", health{decided: true}, []step{
			pass(false, 5*time.Second), fail(false, 5*time.Second), pass(false, 5*time.Second), pass(true, time.Minute),
		}},
		{"a connection that works every other time never turns", health{decided: true, connected: true}, []step{
			fail(true, 5*time.Second), pass(true, time.Minute), fail(true, 5*time.Second), pass(true, time.Minute),
			fail(true, 5*time.Second), fail(true, 10*time.Second), pass(true, time.Minute),
		}},
		{"a terminal failure turns a Ready provider at once", health{decided: true, connected: true}, []step{
			other(false, 5*time.Second), other(false, 10*time.Second), pass(false, 5*time.Second), pass(true, time.Minute),
		}},
		{"nor does one that fails every other time, once down", health{decided: true}, []step{
			pass(false, 5*time.Second), fail(false, 5*time.Second), pass(false, 5*time.Second), fail(false, 5*time.Second),
		}},
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := c.start
			for i, s := range c.steps {
				h = h.record(now, s.err, testChecks, exact)
				if !h.decided || h.connected != s.connected {
					t.Fatalf("after result %d (%v): verdict decided=%v connected=%v, want connected=%v", i+1, s.err, h.decided, h.connected, s.connected)
				}
				if got := h.next.Sub(now); got != s.wait {
					t.Errorf("after result %d (%v): next check in %s, want %s", i+1, s.err, got, s.wait)
				}
			}
		})
	}
}

// TestHealthCondition reads the Ready condition of each verdict: the
// failure's message names the error, bounded and on one line, and says
// that sources are still resolved; the same failure again gives the same
// message, so that a provider failing the same way costs no status write
// per check.
func TestHealthCondition(t *testing.T) {
	now := time.Now()
	passing := health{}.record(now, nil, testChecks, exact).condition(7)
	if passing.Status != metav1.ConditionTrue || passing.Reason != v1alpha1.ReasonProviderReady || passing.ObservedGeneration != 7 ||
		!strings.Contains(passing.Message, "connection answers its checks") {
		t.Errorf("passing: %+v", passing)
	}
	err := errors.New("Consul at 127.0.0.1:8500: Get \"http://127.0.0.1:8500/v1/status/leader\":\n\x1b[31m" + strings.Repeat("x", 2000))
	h := health{}.record(now, err, testChecks, exact)
	failed := h.condition(7)
	if failed.Status != metav1.ConditionFalse || failed.Reason != v1alpha1.ReasonConnectionFailed {
		t.Errorf("failing: %s/%s", failed.Status, failed.Reason)
	}
	for _, part := range []string{"the connection check fails: Consul at 127.0.0.1:8500: Get", "at least every 1m0s",
		"sources through this provider are still resolved"} {
		if !strings.Contains(failed.Message, part) {
			t.Errorf("message %q lacks %q", failed.Message, part)
		}
	}
	if len(failed.Message) > maxErrorLen+300 || strings.ContainsAny(failed.Message, "\n\x1b") {
		t.Errorf("message of %d bytes, or not on one printable line: %q", len(failed.Message), failed.Message)
	}
	again := h.record(now.Add(time.Minute), err, testChecks, exact).condition(7)
	if again != failed {
		t.Errorf("the same failure again changed the condition:\n%+v\n%+v", failed, again)
	}
	other := providers.Terminalf(v1alpha1.ReasonUnsupportedProtocol, "the plugin speaks [\"v2\"], this controller v1")
	c := health{decided: true, connected: true}.record(now, other, testChecks, exact).condition(7)
	if c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonUnsupportedProtocol || !strings.Contains(c.Message, `speaks ["v2"]`) {
		t.Errorf("a terminal failure: %+v, want False/UnsupportedProtocol with its message", c)
	}
}

// TestSeed starts from the verdict status shows for the provider's
// generation, and from nothing for another generation or reason.
func TestSeed(t *testing.T) {
	cond := func(status metav1.ConditionStatus, reason string, gen int64) *metav1.Condition {
		return &metav1.Condition{Type: v1alpha1.ConditionReady, Status: status, Reason: reason, Message: "was", ObservedGeneration: gen}
	}
	cases := []struct {
		name               string
		ready              *metav1.Condition
		decided, connected bool
	}{
		{"no status yet", nil, false, false},
		{"Ready for this generation", cond(metav1.ConditionTrue, v1alpha1.ReasonProviderReady, 3), true, true},
		{"ConnectionFailed for this generation", cond(metav1.ConditionFalse, v1alpha1.ReasonConnectionFailed, 3), true, false},
		{"UnsupportedProtocol for this generation", cond(metav1.ConditionFalse, v1alpha1.ReasonUnsupportedProtocol, 3), true, false},
		{"Ready for an earlier generation", cond(metav1.ConditionTrue, v1alpha1.ReasonProviderReady, 2), false, false},
		{"SecretNotFound says nothing of the connection", cond(metav1.ConditionFalse, v1alpha1.ReasonSecretNotFound, 3), false, false},
	}
	for _, c := range cases {
		h := seed("k", c.ready, 3)
		if h.key != "k" || h.decided != c.decided || h.connected != c.connected || !h.next.IsZero() {
			t.Errorf("%s: seeded %+v, want decided=%v connected=%v, due at once", c.name, h, c.decided, c.connected)
		}
		if c.decided && !c.connected && h.condition(3).Message != "was" {
			t.Errorf("%s: the seeded False verdict says %q, not the status's message", c.name, h.condition(3).Message)
		}
	}
	// A seeded Ready provider needs the threshold's failures to turn.
	h := seed("k", cond(metav1.ConditionTrue, v1alpha1.ReasonProviderReady, 3), 3)
	if h = h.record(time.Now(), errors.New("timeout"), testChecks, exact); !h.connected {
		t.Error("a seeded Ready provider turned False on one failed check")
	}
}

func TestCheckOptionsWithDefaults(t *testing.T) {
	o, err := CheckOptions{}.WithDefaults()
	if err != nil || o.Interval != DefaultCheckInterval || o.Timeout != DefaultCheckTimeout || o.RetryDelay != DefaultRetryDelay ||
		o.FailureThreshold != DefaultFailureThreshold || o.SuccessThreshold != DefaultSuccessThreshold || o.Concurrency != DefaultCheckConcurrency {
		t.Errorf("defaults: %+v, %v", o, err)
	}
	if o, err := (CheckOptions{Interval: 2 * time.Second, Timeout: time.Second}).WithDefaults(); err != nil || o.RetryDelay != 2*time.Second {
		t.Errorf("a retry delay longer than the interval is cut to it: %+v, %v", o, err)
	}
	for _, c := range []struct {
		o    CheckOptions
		flag string
	}{
		{CheckOptions{Interval: 100 * time.Millisecond}, "--provider-check-interval=100ms"},
		{CheckOptions{Interval: time.Minute, Timeout: 2 * time.Minute}, "--provider-check-timeout=2m0s"},
		{CheckOptions{Timeout: -time.Second}, "--provider-check-timeout=-1s"},
		{CheckOptions{FailureThreshold: -1}, "thresholds"},
	} {
		if _, err := c.o.WithDefaults(); err == nil || !strings.Contains(err.Error(), c.flag) {
			t.Errorf("%+v: error %v, want one naming %s", c.o, err, c.flag)
		}
	}
}

func TestJitter(t *testing.T) {
	for range 1000 {
		if got := jitter(time.Minute); got > time.Minute || got < 54*time.Second {
			t.Fatalf("jitter(1m) = %s, want within the last tenth below 1m", got)
		}
	}
	if got := jitter(0); got != 0 {
		t.Errorf("jitter(0) = %s", got)
	}
}
