package externalbackend

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/tenancy"
	"github.com/backendslice/backendslice/providers"
	consulprovider "github.com/backendslice/backendslice/providers/consul"
	dnsprovider "github.com/backendslice/backendslice/providers/dns"
	staticprovider "github.com/backendslice/backendslice/providers/static"
)

// scripted is a static-kind provider whose answer the test sets, and which
// counts how many calls run at once.
type scripted struct {
	mu      sync.Mutex
	err     error
	eps     []providers.Endpoint
	limit   string
	block   bool
	running int
	most    int
}

func (*scripted) Kind() providers.Kind { return staticprovider.Kind }

func (s *scripted) Resolve(ctx context.Context, _ providers.Request) (providers.Result, error) {
	s.mu.Lock()
	s.running++
	s.most = max(s.most, s.running)
	block, err, eps, limit := s.block, s.err, s.eps, s.limit
	s.mu.Unlock()
	defer func() { s.mu.Lock(); s.running--; s.mu.Unlock() }()
	if block {
		<-ctx.Done()
		return providers.Result{}, providers.Transient(ctx.Err())
	}
	return providers.Result{Endpoints: eps, Limit: limit}, err
}

// newResolver is a reconciler with only what resolveSources uses.
func newResolver(t *testing.T, p providers.Provider) *Reconciler {
	t.Helper()
	reg, err := testKinds().NewRegistry(p)
	if err != nil {
		t.Fatal(err)
	}
	return &Reconciler{Providers: reg, Config: Config{ResolveTimeout: 50 * time.Millisecond}}
}

// staticXB is a backend with one static source per address set.
func staticXB(addrs ...string) *v1alpha1.ExternalBackend {
	xb := &v1alpha1.ExternalBackend{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db"}}
	for _, a := range addrs {
		xb.Spec.Sources = append(xb.Spec.Sources, v1alpha1.Source{Name: "src-" + a,
			Static: &v1alpha1.StaticSource{Endpoints: []v1alpha1.StaticEndpoint{{Address: a}}}})
	}
	return xb
}

// TestResolveHoldsAcrossFailures follows one source through the cases of a
// failure: a known answer is held; a failure since a restart holds what the
// slices publish on every pass, not only the first; a source edited while
// it fails holds nothing of its old target; a gone backend holds nothing.
func TestResolveHoldsAcrossFailures(t *testing.T) {
	answer := []providers.Endpoint{{Address: "192.0.2.1", Serving: true}}
	failures := map[string]error{
		"transient":            providers.Transient(errors.New("timeout")),
		"AccessDenied":         providers.Terminalf(v1alpha1.ReasonAccessDenied, "denied"),
		"NoCredentials":        providers.Terminalf(v1alpha1.ReasonNoCredentials, "no credentials"),
		"ProviderNotAvailable": providers.Terminalf(v1alpha1.ReasonProviderNotAvailable, "no provider"),
	}
	for name, failure := range failures {
		t.Run(name, func(t *testing.T) {
			p := &scripted{eps: answer}
			r := newResolver(t, p)
			xb := staticXB("192.0.2.1")

			if res := r.resolveSources(context.Background(), xb, admitted(xb)); res.holdVanished || res.results[0].Err != nil {
				t.Fatalf("answering source: %+v", res)
			}
			p.err = failure
			res := r.resolveSources(context.Background(), xb, admitted(xb))
			if !res.results[0].Held || len(res.results[0].Endpoints) != 1 || res.holdVanished || res.fates["src-192.0.2.1"] != fateKept {
				t.Errorf("known answer not held, or not told kept: %+v", res)
			}

			// A restart: nothing known. Every pass while it fails holds.
			r = newResolver(t, p)
			for pass := range 3 {
				if res := r.resolveSources(context.Background(), xb, admitted(xb)); !res.holdVanished || res.results[0].Held || res.fates["src-192.0.2.1"] != fateKept {
					t.Errorf("pass %d after a restart: holdVanished=%v held=%v fate %d, want the published endpoints held and told kept",
						pass, res.holdVanished, res.results[0].Held, res.fates["src-192.0.2.1"])
				}
			}

			// Edited while failing: the old target is not held.
			xb.Spec.Sources[0].Static.Endpoints[0].Address = "192.0.2.2"
			if res := r.resolveSources(context.Background(), xb, admitted(xb)); res.holdVanished || res.results[0].Held || res.fates["src-192.0.2.1"] != fateEdited {
				t.Errorf("source edited while failing: holdVanished=%v held=%v fate %d, want its old endpoints to drain, and told so",
					res.holdVanished, res.results[0].Held, res.fates["src-192.0.2.1"])
			}
		})
	}
	t.Run("gone", func(t *testing.T) {
		p := &scripted{eps: answer}
		r := newResolver(t, p)
		xb := staticXB("192.0.2.1")
		r.resolveSources(context.Background(), xb, admitted(xb))
		p.err = providers.Gone(v1alpha1.ReasonBackendNotFound, errors.New("NXDOMAIN"))
		for pass := range 2 {
			if res := r.resolveSources(context.Background(), xb, admitted(xb)); res.holdVanished || res.results[0].Held || res.fates["src-192.0.2.1"] != fateDrains {
				t.Errorf("pass %d: a gone backend's endpoints are held, or not told to drain (fate %d)", pass, res.fates["src-192.0.2.1"])
			}
		}
		p.err = providers.Transient(errors.New("timeout"))
		if res := r.resolveSources(context.Background(), xb, admitted(xb)); res.holdVanished {
			t.Error("a failure after a gone answer holds the drained endpoints again")
		}
	})
}

// TestResolveAsksSourcesAtOnce: sixteen sources that never answer are asked
// together, so a pass costs one resolve timeout, not sixteen.
func TestResolveAsksSourcesAtOnce(t *testing.T) {
	p := &scripted{block: true}
	r := newResolver(t, p)
	var addrs []string
	for i := range 16 {
		addrs = append(addrs, "192.0.2."+string(rune('a'+i)))
	}
	res := r.resolveSources(context.Background(), staticXB(addrs...), make([]sourceAdmission, len(addrs)))
	if p.most != 16 {
		t.Errorf("at most %d sources were asked at once, want all 16", p.most)
	}
	for _, s := range res.results {
		if s.Err == nil {
			t.Errorf("source %s answered, want its timeout", s.Name)
		}
	}
}

// admitted is the admissions of a backend whose every source is admitted
// without a connection of its own.
func admitted(xb *v1alpha1.ExternalBackend) []sourceAdmission {
	return make([]sourceAdmission, len(xb.Spec.Sources))
}

// TestResolveRefusedSourceIsWithdrawn: a source that admission refuses
// is asked nothing, holds nothing (unlike a failing one), and what it
// published before is withdrawn; admitted again, it is asked again.
func TestResolveRefusedSourceIsWithdrawn(t *testing.T) {
	p := &scripted{eps: []providers.Endpoint{{Address: "::ffff:192.0.2.1", Serving: true}}}
	r := newResolver(t, p)
	xb := staticXB("192.0.2.1")
	if res := r.resolveSources(context.Background(), xb, admitted(xb)); res.results[0].Err != nil || len(res.withdrawn) != 0 {
		t.Fatalf("admitted: %+v", res)
	}
	refused := []sourceAdmission{{refused: &tenancy.Refusal{Provider: "p", Rule: tenancy.RuleNamespace, Message: "namespace ns is not admitted"}}}
	p.mu.Lock()
	p.most = 0
	p.mu.Unlock()
	for pass := range 2 {
		res := r.resolveSources(context.Background(), xb, refused)
		e := providers.AsError(res.results[0].Err)
		if e == nil || e.Reason != v1alpha1.ReasonProviderNotAdmitted || res.results[0].Held || len(res.results[0].Endpoints) != 0 || res.holdVanished ||
			res.fates["src-192.0.2.1"] != fateWithdrawn {
			t.Fatalf("pass %d: refused source resolved to %+v", pass, res)
		}
		if want := pass == 0; res.withdrawn.Has("192.0.2.1") != want {
			t.Errorf("pass %d: withdrawn %v, want 192.0.2.1 withdrawn only on the pass that refuses", pass, res.withdrawn)
		}
	}
	p.mu.Lock()
	calls := p.most
	p.mu.Unlock()
	if calls != 0 {
		t.Errorf("the provider was asked %d time(s) for a refused source", calls)
	}
	if res := r.resolveSources(context.Background(), xb, admitted(xb)); res.results[0].Err != nil || len(res.results[0].Endpoints) != 1 {
		t.Errorf("admitted again: %+v", res)
	}
}

// TestResolveCollectsLimits: a provider's note that a limit cut its answer
// short reaches the pass, which puts it on the Synced condition.
func TestResolveCollectsLimits(t *testing.T) {
	p := &scripted{eps: []providers.Endpoint{{Address: "192.0.2.1"}}, limit: "spec.sources[x].dns.name: 2000 addresses answered, the first 1000 published"}
	r := newResolver(t, p)
	xb := staticXB("192.0.2.1")
	res := r.resolveSources(context.Background(), xb, admitted(xb))
	if len(res.limits) != 1 || res.limits[0] != p.limit {
		t.Errorf("limits %q, want the provider's %q", res.limits, p.limit)
	}
}

// testKinds is a table of the kinds these tests use, from their packages.
func testKinds() providers.Kinds {
	return slices.Concat(staticprovider.Kinds(), dnsprovider.Kinds(), consulprovider.Kinds())
}
