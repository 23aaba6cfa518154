package providertest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/providers/dns"
	"github.com/backendslice/backendslice/providers/static"
)

// faultEnv selects, in a child test process, the fault the fake provider
// has; the parent checks that the suite catches it.
const faultEnv = "PROVIDERTEST_FAULT"

// fake is a static-like provider that can be given one fault.
type fake struct {
	fault    string
	calls    atomic.Int32
	inflight atomic.Int32
	mu       sync.Mutex
	cache    []providers.Endpoint
}

func (f *fake) Kind() providers.Kind {
	if f.fault == "wrong-kind" {
		return dns.Kind
	}
	return static.Kind
}

func (f *fake) Resolve(ctx context.Context, req providers.Request) (providers.Result, error) {
	call := f.calls.Add(1)
	if f.fault == "not-concurrent" {
		if f.inflight.Add(1) > 1 {
			f.inflight.Add(-1)
			return providers.Result{}, providers.Transient(errors.New("called while another call runs"))
		}
		defer f.inflight.Add(-1)
		time.Sleep(20 * time.Millisecond)
	}
	if ctx.Err() != nil {
		switch f.fault {
		case "ignores-cancel":
			time.Sleep(2 * time.Second)
		case "terminal-on-cancel":
			return providers.Result{}, providers.Terminalf(v1alpha1.ReasonInvalidSpec, "context: %v", ctx.Err())
		}
	}
	src := req.Source.Static
	if src == nil {
		switch f.fault {
		case "untyped-error":
			return providers.Result{}, errors.New("not a static source")
		case "bad-reason":
			return providers.Result{}, &providers.Error{Terminal: true, Reason: "not a reason", Err: errors.New("not a static source")}
		case "empty-message":
			return providers.Result{}, providers.Terminal(v1alpha1.ReasonInvalidSpec, errors.New(""))
		case "wrong-terminal":
			return providers.Result{}, providers.Transient(errors.New("spec.sources[broken]: not a static source"))
		case "broken-succeeds":
			return providers.Result{}, nil
		}
		return providers.Result{}, providers.Terminalf(v1alpha1.ReasonInvalidSpec, "spec.sources[%s]: not a static source", req.Source.Name)
	}
	eps := make([]providers.Endpoint, 0, len(src.Endpoints))
	for _, e := range src.Endpoints {
		eps = append(eps, providers.Endpoint{Address: e.Address, Zone: e.Zone, Serving: true})
	}
	if len(src.Endpoints) == 0 {
		switch f.fault {
		case "missing-fails-gone":
			return providers.Result{}, providers.Gone(v1alpha1.ReasonBackendNotFound, errors.New("spec.sources[none]: no such backend"))
		case "missing-fails-not-gone":
			return providers.Result{}, providers.Terminalf(v1alpha1.ReasonBackendNotFound, "spec.sources[none]: no such backend")
		case "gone-not-terminal":
			return providers.Result{}, &providers.Error{Gone: true, Reason: v1alpha1.ReasonBackendNotFound, Err: errors.New("no such backend")}
		}
	}
	switch f.fault {
	case "missing-finds-endpoints":
		if len(eps) == 0 {
			eps = append(eps, providers.Endpoint{Address: "192.0.2.99", Serving: true})
		}
	case "extra-endpoint":
		eps = append(eps, providers.Endpoint{Address: "192.0.2.200", Serving: true})
	case "not-idempotent":
		if call%2 == 0 && len(eps) > 0 {
			eps = eps[:len(eps)-1]
		}
	case "mutates-request":
		if len(src.Endpoints) > 0 {
			src.Endpoints[0].Zone = "changed-by-provider"
		}
	case "bad-port":
		for i := range eps {
			eps[i].Port = 70000
		}
	case "empty-address":
		if len(eps) > 0 {
			eps[0].Address = ""
		}
	case "reuses-result":
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.cache == nil {
			f.cache = eps
		}
		return providers.Result{Endpoints: f.cache}, nil
	case "partial-on-cancel":
		if ctx.Err() != nil && len(eps) > 1 {
			eps = eps[:1]
		}
	}
	return providers.Result{Endpoints: eps}, nil
}

// fakeHarness is a harness for the fake provider that passes when the
// fake has no fault.
func fakeHarness(fault string) Harness {
	good := func(*testing.T) []Case {
		src := v1alpha1.Source{Name: "db", Static: &v1alpha1.StaticSource{Endpoints: []v1alpha1.StaticEndpoint{
			{Address: "192.0.2.10", Zone: "zone-a"},
			{Address: "2001:db8::10", Zone: "zone-b"},
		}}}
		return []Case{{
			Name:    "two",
			Request: NewRequest(src),
			Want: []providers.Endpoint{
				{Address: "2001:db8::10", Zone: "zone-b", Serving: true},
				{Address: "192.0.2.10", Zone: "zone-a", Serving: true},
			},
		}}
	}
	h := Harness{
		Kind:     static.Kind,
		Kinds:    static.Kinds(),
		Provider: &fake{fault: fault},
		Good:     good,
		Missing: func(*testing.T) MissingCase {
			return MissingCase{Request: NewRequest(v1alpha1.Source{Name: "none", Static: &v1alpha1.StaticSource{}})}
		},
		Broken: func(*testing.T) []FailCase {
			return []FailCase{{
				Name:    "no-static",
				Request: NewRequest(v1alpha1.Source{Name: "broken"}),
				Failure: Failure{Terminal: true, Reason: v1alpha1.ReasonInvalidSpec, MessageContains: []string{"spec.sources[broken]"}},
			}}
		},
		CancelBound: 200 * time.Millisecond,
	}
	switch fault {
	case "harness-no-provider":
		h.Provider = nil
	case "harness-no-good":
		h.Good = nil
	case "harness-wrong-kind":
		h.Kind = dns.Kind
	case "wrong-kind":
		// The harness says the kind the provider claims, so that the
		// suite's own check of the sources' kind runs.
		h.Kind = dns.Kind
	case "harness-no-kinds":
		h.Kinds = nil
	case "harness-no-missing":
		h.Missing = nil
	case "harness-no-broken":
		h.Broken = func(*testing.T) []FailCase { return nil }
	case "harness-only-empty-good":
		h.Good = func(*testing.T) []Case {
			return []Case{{Name: "empty", Request: NewRequest(v1alpha1.Source{Name: "e", Static: &v1alpha1.StaticSource{}})}}
		}
	case "harness-bad-want":
		h.Good = func(t *testing.T) []Case {
			cs := good(t)
			cs[0].Want[0].Port = -1
			return cs
		}
	case "missing-expects-gone", "missing-fails-gone", "missing-fails-not-gone", "gone-not-terminal", "harness-missing-not-gone":
		fail := &Failure{Terminal: true, Gone: true, Reason: v1alpha1.ReasonBackendNotFound}
		if fault == "harness-missing-not-gone" {
			fail.Gone = false
		}
		h.Missing = func(*testing.T) MissingCase {
			return MissingCase{
				Request: NewRequest(v1alpha1.Source{Name: "none", Static: &v1alpha1.StaticSource{}}),
				Fail:    fail,
			}
		}
	}
	return h
}

// TestSuiteUnderFault runs the suite in a child process started by
// TestSuiteCatchesFaults; run directly it does nothing.
func TestSuiteUnderFault(t *testing.T) {
	fault, ok := os.LookupEnv(faultEnv)
	if !ok {
		// Only the child process that TestSuiteCatchesFaults starts runs it.
		return
	}
	Run(t, fakeHarness(fault))
}

// TestSuitePassesGoodProvider runs the suite in this process against the
// fake without a fault.
func TestSuitePassesGoodProvider(t *testing.T) {
	Run(t, fakeHarness(""))
}

// TestSuiteCatchesFaults checks that the suite fails each faulty provider
// or harness, with a message that says what is wrong.
func TestSuiteCatchesFaults(t *testing.T) {
	if _, ok := os.LookupEnv(faultEnv); ok {
		// In the child process only TestSuiteUnderFault does anything.
		return
	}
	cases := map[string]string{
		"":                         "", // the child passes
		"missing-fails-gone":       "", // a missing backend may fail as Gone
		"wrong-kind":               "KindOf(source) = \"static\", but the provider's Kind() = \"dns\"",
		"extra-endpoint":           "extra:   {Address:192.0.2.200",
		"not-idempotent":           "a second Resolve gave other endpoints",
		"mutates-request":          "Resolve changed the request it was given",
		"untyped-error":            "is not a *providers.Error",
		"bad-reason":               "Reason \"not a reason\" is not a CamelCase condition reason",
		"empty-message":            "error message is empty",
		"wrong-terminal":           "Terminal = false, want true",
		"broken-succeeds":          "Resolve succeeded with 0 endpoint(s); want a failure",
		"missing-finds-endpoints":  "Resolve of a missing backend found 1 endpoint(s)",
		"missing-expects-gone":     "missing case: Resolve succeeded; want a failure",
		"missing-fails-not-gone":   "missing case: Gone = false, want true",
		"gone-not-terminal":        "a Gone failure is not terminal",
		"harness-missing-not-gone": "the missing case's failure must be Gone and Terminal",
		"bad-port":                 "has port 70000",
		"empty-address":            "has an empty address",
		"reuses-result":            "changing the endpoints one Resolve returned changed the next answer",
		"ignores-cancel":           "Resolve did not return within 200ms of its context being done",
		"terminal-on-cancel":       "a cancelled context gave a terminal error",
		"partial-on-cancel":        "a cancelled Resolve returned a partial answer without an error",
		"not-concurrent":           "called while another call runs",
		"harness-no-provider":      "Harness.Provider is required",
		"harness-no-good":          "Harness.Good is required",
		"harness-wrong-kind":       `Harness.Kind is "dns", but the provider's Kind() is "static"`,
		"harness-no-missing":       "Harness.Missing is required",
		"harness-no-kinds":         "Harness: no rows of the table of source kinds",
		"harness-no-broken":        "Harness: no broken case",
		"harness-only-empty-good":  "Harness: every good case expects no endpoint",
		"harness-bad-want":         "Harness: good case two expects endpoint 2001:db8::10 has port -1",
	}
	for fault, want := range cases {
		name := fault
		if name == "" {
			name = "no-fault"
		}
		if want == "" {
			name = "passes/" + name
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestSuiteUnderFault$", "-test.count=1")
			cmd.Env = append(os.Environ(), faultEnv+"="+fault)
			out, err := cmd.CombinedOutput()
			if want == "" {
				if err != nil {
					t.Fatalf("the suite failed a provider without fault: %v\n%s", err, out)
				}
				return
			}
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("the suite passed a provider with fault %q (err %v); output:\n%s", fault, err, out)
			}
			if !strings.Contains(string(out), want) {
				t.Errorf("the suite failed fault %q without saying %q; output:\n%s", fault, want, out)
			}
		})
	}
}
