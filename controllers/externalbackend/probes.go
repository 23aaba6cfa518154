package externalbackend

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/connections"
	"github.com/backendslice/backendslice/internal/publish"
	"github.com/backendslice/backendslice/probe"
)

// Prober checks endpoints for the reconciler (probe.Prober).
type Prober interface {
	Sync(backend types.NamespacedName, targets []probe.Target)
	Verdict(t probe.Target) (ready, known bool)
}

// probeOutcome is what the probes did to one reconcile's endpoints.
type probeOutcome struct {
	publish.ProbeOutcome
	// configured is true when some source is probed.
	configured bool
	// err says why a source's probe cannot run (its CA Secret); that
	// source's endpoints are published as it says.
	err error
	// limit names the probe targets past --max-probe-targets-per-backend,
	// published as their sources say.
	limit string
}

// applyProbes asks the prober to check the endpoints of probed sources and
// takes those whose probes fail out of service. Only endpoints that are to
// be published are probed: admission, the deny list and the families have
// been applied, so a probe never goes where a Service may not point.
func (r *Reconciler) applyProbes(ctx context.Context, xb *v1alpha1.ExternalBackend, res resolved, eps []publish.Endpoint) ([]publish.Endpoint, probeOutcome) {
	var out probeOutcome
	if r.Prober == nil {
		// Render, offline: endpoints as their sources say.
		return eps, out
	}
	type sourceProbe struct {
		check    probe.Check
		failOpen bool
	}
	probes := map[string]sourceProbe{}
	var errs []error
	for _, src := range xb.Spec.Sources {
		spec, field := src.Probe, fmt.Sprintf("spec.sources[%s].probe", src.Name)
		if spec == nil {
			spec, field = xb.Spec.Probe, "spec.probe"
		}
		if spec == nil {
			continue
		}
		out.configured = true
		c, err := r.checkOf(ctx, xb, field, spec)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		probes[src.Name] = sourceProbe{check: c, failOpen: ptr.Deref(spec.FailOpen, v1alpha1.DefaultProbeFailOpen)}
	}
	out.err = errors.Join(errs...)
	key := client.ObjectKeyFromObject(xb)
	if len(probes) == 0 {
		r.Prober.Sync(key, nil)
		return eps, out
	}
	// Each address is checked as the source that publishes it says: the
	// first in spec order, as Normalize merges them.
	sourceOf := map[string]string{}
	for _, sr := range res.results {
		if sr.Err != nil && !sr.Held {
			continue
		}
		for _, e := range sr.Endpoints {
			if a := publish.CanonicalAddress(e.Address); sourceOf[a] == "" {
				sourceOf[a] = sr.Name
			}
		}
	}
	var targets []probe.Target
	verdicts := make([]publish.ProbeVerdict, len(eps))
	unprobed := 0
	for i, e := range eps {
		sp, ok := probes[sourceOf[e.Address]]
		if !ok || e.AddressType == discoveryv1.AddressTypeFQDN {
			continue
		}
		if most := r.Config.MaxProbeTargets; most > 0 && len(targets) >= most {
			// One backend's probes share the prober with every other
			// tenant's: past its bound, endpoints go unprobed.
			unprobed++
			continue
		}
		t := probe.Target{Address: e.Address, Check: sp.check}
		targets = append(targets, t)
		passing, _ := r.Prober.Verdict(t)
		verdicts[i] = publish.ProbeVerdict{Probed: true, Passing: passing, FailOpen: sp.failOpen}
	}
	if unprobed > 0 {
		out.limit = fmt.Sprintf("%d endpoint(s) past the controller's limit of %d probe targets per backend (--max-probe-targets-per-backend) are not probed and are published as their sources say",
			unprobed, r.Config.MaxProbeTargets)
	}
	r.Prober.Sync(key, targets)
	eps, out.ProbeOutcome = publish.ApplyProbes(eps, verdicts)
	return eps, out
}

// checkOf is the check a probe spec asks for, with the API's defaults
// (v1alpha1.DefaultProbePeriod and the others) where it has none.
func (r *Reconciler) checkOf(ctx context.Context, xb *v1alpha1.ExternalBackend, field string, p *v1alpha1.Probe) (probe.Check, error) {
	c := probe.Check{
		Kind:             probe.TCP,
		Port:             probePort(xb, p),
		Period:           ptr.Deref(p.Period, metav1.Duration{}).Duration,
		Timeout:          ptr.Deref(p.Timeout, metav1.Duration{}).Duration,
		SuccessThreshold: int(p.SuccessThreshold),
		FailureThreshold: int(p.FailureThreshold),
		InitialReady:     cmp.Or(p.InitialState, v1alpha1.DefaultProbeInitialState) != v1alpha1.ProbeStateNotReady,
	}
	if c.Period <= 0 {
		c.Period = v1alpha1.DefaultProbePeriod
	}
	if c.Timeout <= 0 || c.Timeout >= c.Period {
		c.Timeout = min(v1alpha1.DefaultProbeTimeout, c.Period/2)
	}
	if c.SuccessThreshold <= 0 {
		c.SuccessThreshold = v1alpha1.DefaultProbeSuccessThreshold
	}
	if c.FailureThreshold <= 0 {
		c.FailureThreshold = v1alpha1.DefaultProbeFailureThreshold
	}
	switch {
	case p.HTTP != nil:
		c.Kind = probe.HTTP
		if cmp.Or(p.HTTP.Scheme, v1alpha1.DefaultHTTPProbeScheme) == v1alpha1.HTTPSchemeHTTPS {
			c.Kind = probe.HTTPS
		}
		c.Path = cmp.Or(p.HTTP.Path, v1alpha1.DefaultHTTPProbePath)
		// Empty means probe.DefaultStatusCodes, which the check applies.
		c.StatusCodes = strings.Join(p.HTTP.StatusCodes, ",")
		c.ServerName = p.HTTP.ServerName
		if ref := p.HTTP.CASecretRef; ref != nil {
			ca, err := r.probeCA(ctx, field+".http.caSecretRef", *ref)
			if err != nil {
				return c, err
			}
			c.CAPEM = string(ca)
		}
	case p.GRPC != nil:
		c.Kind = probe.GRPC
		c.GRPCService = p.GRPC.Service
	}
	return c, nil
}

// probePort is the probe's port, else the first Service port's target.
func probePort(xb *v1alpha1.ExternalBackend, p *v1alpha1.Probe) int32 {
	if p.Port != nil {
		return *p.Port
	}
	first := xb.Spec.Service.Ports[0]
	return ptr.Deref(first.TargetPort, first.Port)
}

// probeCA reads a probe's CA from a Secret of the controller's namespace
// that the platform team lets probes use (--probe-ca-secrets). The
// namespace is the admin's, so a tenant may not pick any Secret of it, and
// one message answers every failure (not listed, missing, no such key), so
// that status tells a tenant nothing of which Secrets exist there.
func (r *Reconciler) probeCA(ctx context.Context, field string, ref v1alpha1.SecretKeyReference) ([]byte, error) {
	unusable := connections.SecretError{Err: fmt.Errorf(
		"%s: Secret %q with key %q is not a probe CA this controller offers (the platform team lists them in --probe-ca-secrets, in the controller's namespace); name one of those, or leave caSecretRef out to verify with the system's roots",
		field, ref.Name, ref.Key)}
	if !slices.Contains(r.Config.ProbeCASecrets, ref.Name) {
		return nil, unusable
	}
	ca, err := r.connections.SecretValue(ctx, field, ref)
	if err != nil {
		return nil, unusable
	}
	return ca, nil
}
