// Package providertest runs the conformance suite (providers/conformance)
// as a Go test: every provider's own test describes the provider and its
// fixtures in a Harness and calls Run:
//
//	func TestConformance(t *testing.T) {
//		providertest.Run(t, providertest.Harness{
//			Kind:     mine.Kind,
//			Kinds:    mine.Kinds(),
//			Provider: myprovider.New(...),
//			Good:     func(t *testing.T) []providertest.Case { ... },
//			Missing:  func(t *testing.T) providertest.MissingCase { ... },
//			Broken:   func(t *testing.T) []providertest.FailCase { ... },
//		})
//	}
//
// Each property is a subtest; run the tests with -race, since one checks
// that Resolve is safe for concurrent use. Outside a test, the
// `backendslice plugin-check` command runs the same suite against a
// running plugin.
package providertest

import (
	"testing"
	"time"

	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/providers/conformance"
)

// The suite's types, under the names provider tests use.
type (
	// Case is a request that resolves successfully.
	Case = conformance.Case
	// Failure is how a request must fail.
	Failure = conformance.Failure
	// FailCase is a request that makes Resolve fail.
	FailCase = conformance.FailCase
	// MissingCase is a request whose backend does not exist.
	MissingCase = conformance.MissingCase
)

// DefaultConcurrency and DefaultCancelBound are the suite's.
const (
	DefaultConcurrency = conformance.DefaultConcurrency
	DefaultCancelBound = conformance.DefaultCancelBound
)

// NewRequest returns a request for src in a test namespace and backend
// (see conformance.NewRequest).
var NewRequest = conformance.NewRequest

// Harness describes a provider under test and the fixtures that drive it.
// Provider, Good, Missing and Broken are required: Run fails when one is
// missing, so that no provider passes the suite by leaving a check out.
type Harness struct {
	// Kind is the source kind the harness checks, a constant of the
	// kind's package: Run fails when the provider's Kind() is another, and
	// a test of the controller's table finds every kind of the table in
	// some harness's Kind, so that no kind goes unchecked.
	Kind providers.Kind

	// Kinds are the rows of the kind's package (providers/<kind>.Kinds),
	// which must claim the sources of the cases.
	Kinds providers.Kinds

	// Provider is the provider under test.
	Provider providers.Provider

	// Good returns sources that resolve successfully, each to exactly its
	// Want endpoints. It may set up backing fixtures (DNS records, Consul
	// registrations, fake AWS answers) and register their cleanup on t. At
	// least one case must expect at least one endpoint.
	Good func(t *testing.T) []Case

	// Missing returns a source whose backend does not exist (an unknown
	// Consul service, an RDS identifier that is not there, a DNS name that
	// answers NXDOMAIN). Every provider has such a case: it answers with no
	// endpoints (a static list or a Consul service with no members), or
	// fails with a Gone error (providers.Gone), so that what the backend
	// published drains instead of being kept as last known good.
	Missing func(t *testing.T) MissingCase

	// Broken returns sources that make Resolve fail, with the failure each
	// must give. At least one is required: every provider can be given a
	// source of another kind, or one its spec rules refuse.
	Broken func(t *testing.T) []FailCase

	// Concurrency is how many goroutines resolve at once in the concurrency
	// check; zero means DefaultConcurrency.
	Concurrency int

	// CancelBound is how long Resolve may take to return once its context
	// is done; zero means DefaultCancelBound.
	CancelBound time.Duration
}

// Run runs the conformance suite against h, one subtest a property.
func Run(t *testing.T, h Harness) {
	t.Helper()
	switch {
	case h.Provider == nil:
		t.Fatal("providertest: Harness.Provider is required")
	case h.Kind == "" || h.Provider.Kind() != h.Kind:
		t.Fatalf("providertest: Harness.Kind is %q, but the provider's Kind() is %q: say the kind the harness checks", h.Kind, h.Provider.Kind())
	case h.Good == nil:
		t.Fatal("providertest: Harness.Good is required")
	case h.Missing == nil:
		t.Fatal("providertest: Harness.Missing is required")
	case h.Broken == nil:
		t.Fatal("providertest: Harness.Broken is required")
	}
	f := conformance.Fixtures{Kinds: h.Kinds, Good: h.Good(t), Missing: h.Missing(t), Broken: h.Broken(t),
		Concurrency: h.Concurrency, CancelBound: h.CancelBound}
	if err := f.Validate(); err != nil {
		t.Fatal("providertest: Harness: " + err.Error())
	}
	conformance.Check(h.Provider, f, func(property string, check func(conformance.Reporter)) {
		t.Run(property, func(t *testing.T) { check(t) })
	})
}
