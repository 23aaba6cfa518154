package backendprovider

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
)

// Defaults of CheckOptions, and of the controller's flags.
const (
	// DefaultCheckInterval is how long a connection whose check passed
	// waits for its next check.
	DefaultCheckInterval = time.Minute
	// DefaultCheckTimeout bounds one check.
	DefaultCheckTimeout = 10 * time.Second
	// DefaultRetryDelay is the wait after a first failed check; it doubles
	// at each failure in a row, up to the interval.
	DefaultRetryDelay = 5 * time.Second
	// DefaultFailureThreshold is how many checks in a row must fail before
	// a Ready provider turns False: one lost packet or restarting agent is
	// no outage worth an alert.
	DefaultFailureThreshold = 3
	// DefaultSuccessThreshold is how many checks in a row must pass before
	// a provider that is not Ready turns True again, so that a connection
	// that works every other time does not flip Ready at every check.
	DefaultSuccessThreshold = 2
	// DefaultCheckConcurrency is how many BackendProviders are reconciled
	// (and checked) at once: a check waits for the network, up to the
	// timeout, and the others should not wait behind it.
	DefaultCheckConcurrency = 4
)

// maxErrorLen bounds the error a check returned on the Ready message: an
// SDK's error, or a body some server sent, must not fill the status.
const maxErrorLen = 512

// CheckOptions configure the connection checks of BackendProviders. Zero
// fields take the defaults above.
type CheckOptions struct {
	// Interval is the wait after a check that passed, and the longest
	// wait after one that failed.
	Interval time.Duration
	// Timeout bounds one check.
	Timeout time.Duration
	// RetryDelay is the wait after a first failed check (or a first pass
	// after failures); it doubles at each failure in a row, up to Interval.
	RetryDelay time.Duration
	// FailureThreshold is how many checks in a row must fail to turn a
	// Ready provider False; SuccessThreshold how many must pass to turn it
	// True again. A provider's first check decides at once.
	FailureThreshold, SuccessThreshold int
	// Concurrency is how many providers are reconciled, and checked, at once.
	Concurrency int
}

// WithDefaults fills the zero fields and checks the others; the error
// names the flag to fix.
func (o CheckOptions) WithDefaults() (CheckOptions, error) {
	o.Interval = orDefault(o.Interval, DefaultCheckInterval)
	o.Timeout = orDefault(o.Timeout, DefaultCheckTimeout)
	o.RetryDelay = min(orDefault(o.RetryDelay, DefaultRetryDelay), o.Interval)
	if o.FailureThreshold == 0 {
		o.FailureThreshold = DefaultFailureThreshold
	}
	if o.SuccessThreshold == 0 {
		o.SuccessThreshold = DefaultSuccessThreshold
	}
	if o.Concurrency == 0 {
		o.Concurrency = DefaultCheckConcurrency
	}
	switch {
	case o.Interval < time.Second:
		return o, fmt.Errorf("--provider-check-interval=%s: must be at least 1s", o.Interval)
	case o.Timeout <= 0 || o.Timeout > o.Interval:
		return o, fmt.Errorf("--provider-check-timeout=%s: must be positive and at most --provider-check-interval=%s", o.Timeout, o.Interval)
	case o.RetryDelay <= 0 || o.FailureThreshold < 1 || o.SuccessThreshold < 1 || o.Concurrency < 1:
		return o, fmt.Errorf("provider checks: retry delay %s, thresholds %d and %d and concurrency %d must be positive",
			o.RetryDelay, o.FailureThreshold, o.SuccessThreshold, o.Concurrency)
	}
	return o, nil
}

// orDefault is v, or def when v is zero.
func orDefault(v, def time.Duration) time.Duration {
	if v == 0 {
		return def
	}
	return v
}

// health is what the checks of one BackendProvider's connection found:
// the verdict Ready shows, and when to check again.
type health struct {
	// key is the connection the checks are of: another key (an edited
	// spec, a new CA) starts afresh.
	key string
	// decided is set once there is a verdict; connected is the verdict:
	// the connection works.
	decided, connected bool
	// contrary counts the checks in a row whose result contradicts the
	// verdict: the verdict turns when they reach the threshold.
	contrary int
	// failures counts the failed checks in a row, for the backoff.
	failures int
	// message is the Ready message of a False verdict: the last failure's,
	// and reason its reason.
	message, reason string
	// next is when the next check is due; zero is at once.
	next time.Time
}

// seed is the health to start from for a provider this process has not
// checked yet: the verdict its status shows for its generation, so that a
// restart or a new leader neither flips Ready on a first failed check nor
// on a first passing one. Without such a verdict, the first check decides.
func seed(key string, ready *metav1.Condition, generation int64) health {
	h := health{key: key}
	if ready == nil || ready.ObservedGeneration != generation {
		return h
	}
	switch {
	case ready.Status == metav1.ConditionTrue && ready.Reason == v1alpha1.ReasonProviderReady:
		h.decided, h.connected = true, true
	case ready.Status == metav1.ConditionFalse && (ready.Reason == v1alpha1.ReasonConnectionFailed || ready.Reason == v1alpha1.ReasonUnsupportedProtocol):
		h.decided, h.message, h.reason = true, ready.Message, ready.Reason
	}
	return h
}

// record is h after a check that ended at now with err, the next check
// due after spread(the wait): the interval after a pass, the retry delay
// doubled at each failure in a row (up to the interval) after a failure,
// and the retry delay after a pass that does not yet turn the verdict. A
// terminal failure (the server answers, but speaks what the controller
// cannot use) turns the verdict at once: it is no passing fault.
func (h health) record(now time.Time, err error, o CheckOptions, spread func(time.Duration) time.Duration) health {
	pass := err == nil
	terminal := providers.IsTerminal(err)
	switch {
	case !h.decided || terminal:
		h.decided, h.connected, h.contrary = true, pass, 0
	case pass == h.connected:
		h.contrary = 0
	default:
		h.contrary++
		need := o.FailureThreshold
		if pass {
			need = o.SuccessThreshold
		}
		if h.contrary >= need {
			h.connected, h.contrary = pass, 0
		}
	}
	wait := o.Interval
	switch {
	case !pass:
		h.failures++
		h.message, h.reason = failedMessage(err, o), v1alpha1.ReasonConnectionFailed
		if terminal {
			h.message, h.reason = providers.Printable(err.Error(), maxErrorLen), providers.AsError(err).Reason
		}
		wait = min(o.RetryDelay<<min(h.failures-1, 30), o.Interval)
	case !h.connected:
		h.failures = 0
		wait = o.RetryDelay
	default:
		h.failures = 0
	}
	h.next = now.Add(spread(wait))
	return h
}

// failedMessage is the Ready message of a connection whose check failed
// with err. It holds nothing that changes from one check to the next but
// the error, so that a provider that keeps failing the same way costs no
// status write per check.
func failedMessage(err error, o CheckOptions) string {
	return fmt.Sprintf("the connection check fails: %s; checked again with backoff, at least every %s; sources through this provider are still resolved, each reporting its own failures",
		providers.Printable(err.Error(), maxErrorLen), o.Interval)
}

// readyMessage is the Ready message of a connection whose checks pass.
const readyMessage = "the provider's settings and Secrets can be used, and its connection answers its checks"

// condition is the Ready condition of the verdict.
func (h health) condition(generation int64) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue,
		Reason: v1alpha1.ReasonProviderReady, Message: readyMessage, ObservedGeneration: generation}
	if !h.connected {
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, cmp.Or(h.reason, v1alpha1.ReasonConnectionFailed), h.message
	}
	return c
}

// jitter is d less up to a tenth, at random, so that providers created at
// once (a GitOps sync of a hundred) do not keep checking in lockstep.
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	return d - rand.N(d/10+1)
}

// healthBook holds the health of each BackendProvider, by name; its zero
// value is ready for use and safe for concurrent use.
type healthBook struct {
	mu sync.Mutex
	m  map[string]health
}

// get is the health of provider name, if the book has it.
func (b *healthBook) get(name string) (health, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	h, ok := b.m[name]
	return h, ok
}

// put keeps h as the health of provider name.
func (b *healthBook) put(name string, h health) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[string]health{}
	}
	b.m[name] = h
}

// forget drops what the book holds of provider name.
func (b *healthBook) forget(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.m, name)
}
