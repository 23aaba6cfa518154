// Package conformance is the suite every provider, built in or plugin,
// passes: what the controller relies on, whatever the backend. A
// provider's Go test runs it through providertest.Run; the
// `backendslice plugin-check` command runs it against a running plugin
// and prints what fails.
//
// The properties: the provider's kind matches its sources; Resolve
// returns exactly the expected endpoints, the same ones every time,
// without changing the request it was given or handing out memory it
// reuses; failures are *providers.Error values with the right
// classification (transient, terminal, gone), a CamelCase reason and a
// message, and a backend that does not exist drains; a cancelled context
// makes Resolve return promptly, never with a partial answer and never
// with a terminal error; Resolve is safe for concurrent use; endpoints
// have an address and a valid port.
package conformance

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
)

// DefaultConcurrency is how many goroutines resolve at once in the
// concurrency check when Harness.Concurrency is zero.
const DefaultConcurrency = 8

// DefaultCancelBound is how long Resolve may take to return after its
// context is cancelled when Harness.CancelBound is zero. It is a generous
// safety bound that catches a provider ignoring its context, not a benchmark.
const DefaultCancelBound = 5 * time.Second

// Case is a request that resolves successfully.
type Case struct {
	// Name labels the case in failure messages.
	Name string
	// Request is what Resolve is given; NewRequest builds one.
	Request providers.Request
	// Want are the endpoints Resolve returns, in any order.
	Want []providers.Endpoint
}

// Failure is how a request must fail.
type Failure struct {
	// Terminal is whether the failure is terminal (the spec or configuration
	// is wrong) rather than transient (retried with backoff).
	Terminal bool
	// Gone is whether the failure says the backend no longer exists, so that
	// its endpoints drain (providers.Gone); a Gone failure is also terminal.
	Gone bool
	// Reason, when not empty, is the condition reason the failure carries.
	// Every failure's reason is checked to be CamelCase in any case.
	Reason string
	// MessageContains are texts the error message must contain, for example
	// the field it names ("spec.sources[db].static").
	MessageContains []string
}

// FailCase is a request that makes Resolve fail.
type FailCase struct {
	// Name labels the case in failure messages.
	Name string
	// Request is what Resolve is given; its source may be of no kind at all.
	Request providers.Request
	// Failure is how Resolve must fail.
	Failure
}

// MissingCase is a request whose backend does not exist.
type MissingCase struct {
	// Request is what Resolve is given; its source is of the provider's kind.
	Request providers.Request
	// Fail, when nil, says Resolve answers with no endpoints and no error;
	// otherwise Resolve fails as Fail says, which must be Gone and
	// Terminal, or, for a provider that applies consent before it looks a
	// backend up (a plugin whose rules are per backend), Terminal with
	// reason AccessDenied: a namespace may not learn that a backend it may
	// not see does not exist.
	Fail *Failure
}

// NewRequest returns a request for src in a test namespace and backend,
// publishing the given address types (IPv4 and IPv6 when none is given, as
// the API defaults spec.addressTypes).
func NewRequest(src v1alpha1.Source, types ...v1alpha1.AddressType) providers.Request {
	if len(types) == 0 {
		types = []v1alpha1.AddressType{v1alpha1.AddressTypeIPv4, v1alpha1.AddressTypeIPv6}
	}
	return providers.Request{Namespace: "providertest", Backend: "conformance", Source: src, AddressTypes: types}
}

// reasonPattern is CamelCase as condition reasons are written: a capital
// letter, then letters and digits.
var reasonPattern = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)

// Fixtures are the cases a provider is checked with.
type Fixtures struct {
	// Kinds are the rows of the table of source kinds the provider's kind
	// is checked against: its package's own (providers/<kind>.Kinds), or
	// the controller's table.
	Kinds providers.Kinds
	// Good are sources that resolve successfully, each to exactly its
	// Want endpoints; at least one must expect at least one endpoint.
	Good []Case
	// Missing is a source whose backend does not exist.
	Missing MissingCase
	// Broken are sources that make Resolve fail; at least one.
	Broken []FailCase
	// Concurrency is how many goroutines resolve at once in the
	// concurrency check; zero means DefaultConcurrency.
	Concurrency int
	// CancelBound is how long Resolve may take to return once its context
	// is done; zero means DefaultCancelBound.
	CancelBound time.Duration
}

// Reporter is where a check reports what fails: *testing.T in a test, the
// plugin-check command's printer outside one.
type Reporter interface {
	Helper()
	Errorf(format string, args ...any)
}

// Validate says what makes f unfit to check a provider with: a suite
// that a provider passes by leaving a check out proves nothing.
func (f Fixtures) Validate() error {
	switch {
	case len(f.Kinds) == 0:
		return errors.New("no rows of the table of source kinds to check the provider's kind against")
	case len(f.Good) == 0:
		return errors.New("no good case")
	case !slices.ContainsFunc(f.Good, func(c Case) bool { return len(c.Want) > 0 }):
		return errors.New("every good case expects no endpoint; give at least one that finds some")
	case len(f.Broken) == 0:
		return errors.New("no broken case")
	}
	if m := f.Missing.Fail; m != nil && (!m.Terminal || !m.Gone && m.Reason != v1alpha1.ReasonAccessDenied) {
		return errors.New("the missing case's failure must be Gone and Terminal (a backend that does not exist drains, providers.Gone), " +
			"or Terminal with reason AccessDenied (consent comes first)")
	}
	for _, c := range f.Good {
		if err := shapeOf(c.Want); err != nil {
			return fmt.Errorf("good case %s expects %w", c.Name, err)
		}
	}
	return nil
}

// Properties are the names of the properties Check checks, in its order.
var Properties = []string{"Kind", "Resolve", "Idempotent", "DoesNotMutateRequest", "ResultNotReused", "Missing", "Errors", "Cancelled", "Concurrent"}

// Check checks provider p with fixtures f (which Validate accepts), one
// property at a time: run is called with each property's name and the
// check, which it calls with a Reporter (t.Run, or a command's printer).
func Check(p providers.Provider, f Fixtures, run func(property string, check func(Reporter))) {
	if f.Concurrency <= 0 {
		f.Concurrency = DefaultConcurrency
	}
	if f.CancelBound <= 0 {
		f.CancelBound = DefaultCancelBound
	}
	s := suite{p: p, f: f, good: f.Good, missing: f.Missing, broken: f.Broken}
	for i, check := range []func(Reporter){s.kind, s.resolve, s.idempotent, s.noMutation, s.notReused, s.missingBackend, s.errors, s.cancelled, s.concurrent} {
		run(Properties[i], check)
	}
}

// suite holds the fixtures for the checks.
type suite struct {
	p       providers.Provider
	f       Fixtures
	good    []Case
	missing MissingCase
	broken  []FailCase
}

// call resolves a copy of req, so that no check sees another's changes.
func (s suite) call(ctx context.Context, req providers.Request) (providers.Result, error) {
	return s.p.Resolve(ctx, copyRequest(req))
}

func (s suite) kind(t Reporter) {
	k, known := s.p.Kind(), s.f.Kinds
	if known.Of(sourceOfKind(known, k)) == nil {
		t.Errorf("Kind() = %q, not a kind of the table", k)
	}
	if again := s.p.Kind(); again != k {
		t.Errorf("Kind() changed between calls: %q then %q", k, again)
	}
	for _, c := range s.good {
		if got := known.KindOf(c.Request.Source); got != k {
			t.Errorf("case %s: KindOf(source) = %q, but the provider's Kind() = %q", c.Name, got, k)
		}
	}
	if got := known.KindOf(s.missing.Request.Source); got != k {
		t.Errorf("missing case: KindOf(source) = %q, but the provider's Kind() = %q", got, k)
	}
}

func (s suite) resolve(t Reporter) {
	for _, c := range s.good {
		res, err := s.call(context.Background(), c.Request)
		if err != nil {
			t.Errorf("case %s: Resolve: %v", c.Name, err)
			continue
		}
		if res.RefreshAfter < 0 {
			t.Errorf("case %s: RefreshAfter = %v, negative", c.Name, res.RefreshAfter)
		}
		checkShape(t, "case "+c.Name, res.Endpoints)
		if diff := diffEndpoints(c.Want, res.Endpoints); diff != "" {
			t.Errorf("case %s: endpoints differ from want:\n%s", c.Name, diff)
		}
	}
}

func (s suite) idempotent(t Reporter) {
	for _, c := range s.good {
		first, err1 := s.call(context.Background(), c.Request)
		second, err2 := s.call(context.Background(), c.Request)
		if err1 != nil || err2 != nil {
			t.Errorf("case %s: Resolve twice: errors %v, %v", c.Name, err1, err2)
			continue
		}
		if diff := diffEndpoints(first.Endpoints, second.Endpoints); diff != "" {
			t.Errorf("case %s: a second Resolve gave other endpoints (first = want, second = got):\n%s", c.Name, diff)
		}
	}
	for _, c := range s.broken {
		_, err1 := s.call(context.Background(), c.Request)
		_, err2 := s.call(context.Background(), c.Request)
		if err1 == nil || err2 == nil {
			t.Errorf("broken case %s: Resolve twice: errors %v, %v; both must fail", c.Name, err1, err2)
			continue
		}
		e1, e2 := providers.AsError(err1), providers.AsError(err2)
		if e1.Terminal != e2.Terminal || e1.Gone != e2.Gone || e1.Reason != e2.Reason {
			t.Errorf("broken case %s: failed as (terminal=%v, gone=%v, %s) then as (terminal=%v, gone=%v, %s)",
				c.Name, e1.Terminal, e1.Gone, e1.Reason, e2.Terminal, e2.Gone, e2.Reason)
		}
	}
}

func (s suite) noMutation(t Reporter) {
	check := func(name string, req providers.Request) {
		before := copyRequest(req)
		_, _ = s.p.Resolve(context.Background(), req)
		if !reflect.DeepEqual(before, req) {
			t.Errorf("%s: Resolve changed the request it was given:\nbefore %+v\nafter  %+v", name, before, req)
		}
	}
	// Resolve gets req by value, sharing every slice, map and pointer with
	// it as a caller's spec would: a change through them shows in req.
	for _, c := range s.good {
		check("case "+c.Name, copyRequest(c.Request))
	}
	check("missing case", copyRequest(s.missing.Request))
	for _, c := range s.broken {
		check("broken case "+c.Name, copyRequest(c.Request))
	}
}

func (s suite) notReused(t Reporter) {
	for _, c := range s.good {
		first, err := s.call(context.Background(), c.Request)
		if err != nil {
			t.Errorf("case %s: Resolve: %v", c.Name, err)
			continue
		}
		// The caller owns what it got: scribbling over it must not change
		// later answers (a provider that caches must copy).
		for i := range first.Endpoints {
			first.Endpoints[i] = providers.Endpoint{Address: "scribbled.invalid", Zone: "scribbled", Port: 1}
		}
		second, err := s.call(context.Background(), c.Request)
		if err != nil {
			t.Errorf("case %s: second Resolve: %v", c.Name, err)
			continue
		}
		if diff := diffEndpoints(c.Want, second.Endpoints); diff != "" {
			t.Errorf("case %s: changing the endpoints one Resolve returned changed the next answer:\n%s", c.Name, diff)
		}
	}
}

func (s suite) missingBackend(t Reporter) {
	res, err := s.call(context.Background(), s.missing.Request)
	if s.missing.Fail == nil {
		if err != nil {
			t.Errorf("Resolve of a missing backend: %v; want no endpoints and no error", err)
			return
		}
		if len(res.Endpoints) != 0 {
			t.Errorf("Resolve of a missing backend found %d endpoint(s): %+v; want none", len(res.Endpoints), res.Endpoints)
		}
		return
	}
	checkFailure(t, "missing case", err, *s.missing.Fail)
}

func (s suite) errors(t Reporter) {
	for _, c := range s.broken {
		res, err := s.call(context.Background(), c.Request)
		if err == nil {
			t.Errorf("broken case %s: Resolve succeeded with %d endpoint(s); want a failure", c.Name, len(res.Endpoints))
			continue
		}
		checkFailure(t, "broken case "+c.Name, err, c.Failure)
	}
}

// checkFailure checks that err is a *providers.Error as want says.
func checkFailure(t Reporter, name string, err error, want Failure) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: Resolve succeeded; want a failure", name)
		return
	}
	var pe *providers.Error
	if !errors.As(err, &pe) || pe == nil {
		t.Errorf("%s: error %q (%T) is not a *providers.Error; wrap it with providers.Transient or providers.Terminal", name, err, err)
		return
	}
	if got := providers.AsError(err); got != pe {
		t.Errorf("%s: providers.AsError did not return the *providers.Error in the chain", name)
	}
	if providers.IsTerminal(err) != pe.Terminal {
		t.Errorf("%s: providers.IsTerminal = %v, but Terminal = %v", name, providers.IsTerminal(err), pe.Terminal)
	}
	if pe.Terminal != want.Terminal {
		t.Errorf("%s: Terminal = %v, want %v (error %q)", name, pe.Terminal, want.Terminal, err)
	}
	if pe.Gone != want.Gone {
		t.Errorf("%s: Gone = %v, want %v (error %q)", name, pe.Gone, want.Gone, err)
	}
	if pe.Gone && !pe.Terminal {
		t.Errorf("%s: a Gone failure is not terminal; build it with providers.Gone", name)
	}
	if !reasonPattern.MatchString(pe.Reason) {
		t.Errorf("%s: Reason %q is not a CamelCase condition reason", name, pe.Reason)
	}
	if want.Reason != "" && pe.Reason != want.Reason {
		t.Errorf("%s: Reason = %q, want %q", name, pe.Reason, want.Reason)
	}
	if pe.Err == nil {
		t.Errorf("%s: *providers.Error has no Err", name)
		return
	}
	msg := err.Error()
	if strings.TrimSpace(msg) == "" {
		t.Errorf("%s: error message is empty", name)
	}
	for _, sub := range want.MessageContains {
		if !strings.Contains(msg, sub) {
			t.Errorf("%s: error message %q does not contain %q", name, msg, sub)
		}
	}
}

func (s suite) cancelled(t Reporter) {
	type ctxCase struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
	}
	ctxs := []ctxCase{
		{"cancelled before", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx, cancel
		}},
		{"deadline passed", func() (context.Context, context.CancelFunc) {
			return context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		}},
		{"cancelled during", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(time.Millisecond, cancel)
			return ctx, cancel
		}},
	}
	for _, c := range s.good {
		for _, cc := range ctxs {
			name := fmt.Sprintf("case %s, context %s", c.Name, cc.name)
			ctx, cancel := cc.ctx()
			type answer struct {
				res providers.Result
				err error
			}
			done := make(chan answer, 1)
			go func() {
				res, err := s.call(ctx, c.Request)
				done <- answer{res, err}
			}()
			timer := time.NewTimer(s.f.CancelBound)
			select {
			case a := <-done:
				timer.Stop()
				switch {
				case a.err != nil && providers.IsTerminal(a.err):
					t.Errorf("%s: a cancelled context gave a terminal error %q; it must be transient", name, a.err)
				case a.err == nil:
					// An answer is fine, but only a whole one: a partial
					// answer would drain the endpoints left out.
					if diff := diffEndpoints(c.Want, a.res.Endpoints); diff != "" {
						t.Errorf("%s: a cancelled Resolve returned a partial answer without an error:\n%s", name, diff)
					}
				}
			case <-timer.C:
				t.Errorf("%s: Resolve did not return within %v of its context being done", name, s.f.CancelBound)
			}
			cancel()
		}
	}
}

func (s suite) concurrent(t Reporter) {
	start := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var problems []string
	report := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		problems = append(problems, fmt.Sprintf(format, args...))
	}
	for g := range s.f.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			// Every goroutine resolves the same request values, as
			// concurrent reconciles of one backend would.
			for _, c := range s.good {
				res, err := s.p.Resolve(context.Background(), c.Request)
				if err != nil {
					report("goroutine %d, case %s: Resolve: %v", g, c.Name, err)
					continue
				}
				if diff := diffEndpoints(c.Want, res.Endpoints); diff != "" {
					report("goroutine %d, case %s: endpoints differ from want:\n%s", g, c.Name, diff)
				}
			}
			for _, c := range s.broken {
				if _, err := s.p.Resolve(context.Background(), c.Request); err == nil {
					report("goroutine %d, broken case %s: Resolve succeeded", g, c.Name)
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	for _, p := range problems {
		t.Errorf("%s", p)
	}
}

// checkShape reports endpoints that are not what every endpoint must look like.
func checkShape(t Reporter, name string, eps []providers.Endpoint) {
	t.Helper()
	if err := shapeOf(eps); err != nil {
		t.Errorf("%s: %v", name, err)
	}
}

// shapeOf says what is wrong with endpoints: every one has an address, and
// a port that is zero (use the Service's targetPort) or a valid port number.
func shapeOf(eps []providers.Endpoint) error {
	for i, e := range eps {
		if strings.TrimSpace(e.Address) == "" {
			return fmt.Errorf("endpoint %d has an empty address: %+v", i, e)
		}
		if e.Port < 0 || e.Port > 65535 {
			return fmt.Errorf("endpoint %s has port %d; want 0 or 1..65535", e.Address, e.Port)
		}
	}
	return nil
}

// diffEndpoints compares endpoints as sets (with multiplicity), ignoring
// order, and describes what is missing from got and what got has extra.
func diffEndpoints(want, got []providers.Endpoint) string {
	left := map[providers.Endpoint]int{}
	for _, e := range want {
		left[e]++
	}
	var extra []providers.Endpoint
	for _, e := range got {
		if left[e] > 0 {
			left[e]--
			continue
		}
		extra = append(extra, e)
	}
	var missing []providers.Endpoint
	for _, e := range want {
		if left[e] > 0 {
			left[e]--
			missing = append(missing, e)
		}
	}
	if len(missing) == 0 && len(extra) == 0 {
		return ""
	}
	var b strings.Builder
	for _, e := range missing {
		fmt.Fprintf(&b, "  missing: %+v\n", e)
	}
	for _, e := range extra {
		fmt.Fprintf(&b, "  extra:   %+v\n", e)
	}
	return b.String()
}

// copyRequest deep-copies a request.
func copyRequest(r providers.Request) providers.Request {
	out := r
	out.Source = *r.Source.DeepCopy()
	out.AddressTypes = slices.Clone(r.AddressTypes)
	return out
}

// sourceOfKind is a source that kind k's row of ks claims, for the kind
// check: a source with one field of v1alpha1.Source set, tried field by
// field, so that a kind the table gains is found without a list here.
func sourceOfKind(ks providers.Kinds, k providers.Kind) v1alpha1.Source {
	st := reflect.TypeFor[v1alpha1.Source]()
	for i := range st.NumField() {
		f := st.Field(i)
		if f.Type.Kind() != reflect.Pointer || f.Type.Elem().Kind() != reflect.Struct {
			continue
		}
		var src v1alpha1.Source
		reflect.ValueOf(&src).Elem().Field(i).Set(reflect.New(f.Type.Elem()))
		if ks.KindOf(src) == k {
			return src
		}
	}
	return v1alpha1.Source{}
}
