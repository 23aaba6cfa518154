package static_test

import (
	"context"
	"strings"
	"testing"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/providers/providertest"
	"github.com/backendslice/backendslice/providers/static"
)

func staticSource(name string, eps ...v1alpha1.StaticEndpoint) v1alpha1.Source {
	return v1alpha1.Source{Name: name, Static: &v1alpha1.StaticSource{Endpoints: eps}}
}

func TestConformance(t *testing.T) {
	providertest.Run(t, providertest.Harness{
		Kind:     static.Kind,
		Kinds:    static.Kinds(),
		Provider: static.New(),
		Good: func(*testing.T) []providertest.Case {
			return []providertest.Case{
				{
					Name: "one",
					Request: providertest.NewRequest(staticSource("one",
						v1alpha1.StaticEndpoint{Address: "192.0.2.10"})),
					Want: []providers.Endpoint{{Address: "192.0.2.10", Serving: true}},
				},
				{
					Name: "mixed",
					Request: providertest.NewRequest(staticSource("mixed",
						v1alpha1.StaticEndpoint{Address: "192.0.2.1", Zone: "eu-west-1a", Hostname: "db-1", Health: v1alpha1.HealthHealthy},
						v1alpha1.StaticEndpoint{Address: "2001:db8::1", Zone: "eu-west-1b"},
						v1alpha1.StaticEndpoint{Address: "198.51.100.7", Health: v1alpha1.HealthUnhealthy},
						v1alpha1.StaticEndpoint{Address: "203.0.113.9", Hostname: "old", Health: v1alpha1.HealthDraining},
					)),
					Want: []providers.Endpoint{
						{Address: "192.0.2.1", Zone: "eu-west-1a", Hostname: "db-1", Serving: true},
						{Address: "2001:db8::1", Zone: "eu-west-1b", Serving: true},
						{Address: "198.51.100.7"},
						{Address: "203.0.113.9", Hostname: "old", Serving: true, Terminating: true},
					},
				},
				{
					Name: "fqdn",
					Request: providertest.NewRequest(staticSource("names",
						v1alpha1.StaticEndpoint{Address: "db.example.com", Zone: "z"}),
						v1alpha1.AddressTypeFQDN),
					Want: []providers.Endpoint{{Address: "db.example.com", Zone: "z", Serving: true}},
				},
			}
		},
		Missing: func(*testing.T) providertest.MissingCase {
			// A static backend with no members: nothing to publish, no failure.
			return providertest.MissingCase{Request: providertest.NewRequest(staticSource("empty"))}
		},
		Broken: func(*testing.T) []providertest.FailCase {
			return []providertest.FailCase{
				{
					Name:    "no static field",
					Request: providertest.NewRequest(v1alpha1.Source{Name: "nostatic"}),
					Failure: providertest.Failure{Terminal: true, Reason: v1alpha1.ReasonInvalidSpec,
						MessageContains: []string{"spec.sources[nostatic]"}},
				},
				{
					Name:    "another kind",
					Request: providertest.NewRequest(v1alpha1.Source{Name: "dns", DNS: &v1alpha1.DNSSource{Name: "db.example.com"}}),
					Failure: providertest.Failure{Terminal: true, Reason: v1alpha1.ReasonInvalidSpec,
						MessageContains: []string{"spec.sources[dns]"}},
				},
				{
					Name: "bad health",
					Request: providertest.NewRequest(staticSource("sick",
						v1alpha1.StaticEndpoint{Address: "192.0.2.2"},
						v1alpha1.StaticEndpoint{Address: "192.0.2.1", Health: "Sick"})),
					Failure: providertest.Failure{Terminal: true, Reason: v1alpha1.ReasonInvalidSpec,
						MessageContains: []string{"spec.sources[sick].static.endpoints[192.0.2.1].health", `"Sick"`}},
				},
			}
		},
	})
}

func TestHealthMapping(t *testing.T) {
	cases := []struct {
		health               v1alpha1.Health
		serving, terminating bool
	}{
		{health: v1alpha1.HealthHealthy, serving: true},
		{health: "", serving: true},
		{health: v1alpha1.HealthUnhealthy},
		{health: v1alpha1.HealthDraining, serving: true, terminating: true},
	}
	for _, c := range cases {
		t.Run(string(c.health)+"/", func(t *testing.T) {
			src := staticSource("s", v1alpha1.StaticEndpoint{Address: "192.0.2.1", Zone: "a", Hostname: "h", Health: c.health})
			res, err := static.New().Resolve(context.Background(), providertest.NewRequest(src))
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			want := providers.Endpoint{Address: "192.0.2.1", Zone: "a", Hostname: "h", Serving: c.serving, Terminating: c.terminating}
			if len(res.Endpoints) != 1 || res.Endpoints[0] != want {
				t.Errorf("endpoints = %+v, want [%+v]", res.Endpoints, want)
			}
			if res.RefreshAfter != 0 {
				t.Errorf("RefreshAfter = %v, want 0: a static answer holds until the spec changes", res.RefreshAfter)
			}
		})
	}
}

func TestBadHealthIsTerminal(t *testing.T) {
	for _, h := range []v1alpha1.Health{"Sick", "healthy", "DRAINING"} {
		src := staticSource("s", v1alpha1.StaticEndpoint{Address: "192.0.2.1", Health: h})
		res, err := static.New().Resolve(context.Background(), providertest.NewRequest(src))
		if err == nil {
			t.Errorf("health %q: Resolve succeeded with %+v; want a terminal failure", h, res.Endpoints)
			continue
		}
		pe := providers.AsError(err)
		if !pe.Terminal || pe.Reason != v1alpha1.ReasonInvalidSpec {
			t.Errorf("health %q: error terminal=%v reason=%q, want terminal InvalidSpec", h, pe.Terminal, pe.Reason)
		}
		if !strings.Contains(err.Error(), "Healthy, Unhealthy, Draining") {
			t.Errorf("health %q: message %q does not list the valid values", h, err)
		}
	}
}

func TestKind(t *testing.T) {
	if k := static.New().Kind(); k != static.Kind {
		t.Errorf("Kind() = %q, want %q", k, static.Kind)
	}
}
