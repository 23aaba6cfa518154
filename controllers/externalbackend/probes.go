package externalbackend

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/connections"
	"github.com/backendslice/backendslice/internal/publish"
	"github.com/backendslice/backendslice/internal/tenancy"
	"github.com/backendslice/backendslice/probe"
)

// Prober checks endpoints for the reconciler (probe.Prober).
type Prober interface {
	Sync(backend types.NamespacedName, targets []probe.Target)
	Passing(t probe.Target) bool
}

// probeOutcome is what the probes did to one reconcile's endpoints.
type probeOutcome struct {
	publish.ProbeOutcome
	// configured is true when some source is probed.
	configured bool
	// err says why a source's probe cannot run (its CA Secret, its path);
	// that source's endpoints are published as it says.
	err error
	// refused names the probes whose port is neither a target port nor
	// allowed by the endpoints' providers; their endpoints are not
	// probed and are published as their sources say.
	refused string
	// limit names the probe targets past --max-probe-targets-per-backend,
	// published as their sources say.
	limit string
}

// sourceProbe is the check one source's endpoints are probed with.
type sourceProbe struct {
	check    probe.Check
	failOpen bool
	// field is the probe's place in the spec, for messages.
	field string
	// portSet is true when the spec names the port; else each endpoint
	// is probed on the port it is published on for the first Service port.
	portSet bool
}

// applyProbes asks the prober to check the endpoints of probed sources and
// takes those whose probes fail out of service. Only endpoints that are to
// be published are probed: admission, the deny list and the families have
// been applied, so a probe never goes where a Service may not point; and
// only on a target port of the Service or a port the endpoint's providers
// allow (tenancy.ProbePortRefusers), so a probe is no port scanner.
func (r *Reconciler) applyProbes(ctx context.Context, xb *v1alpha1.ExternalBackend, res resolved, eps []publish.Endpoint) ([]publish.Endpoint, probeOutcome) {
	var out probeOutcome
	if r.Prober == nil {
		// Render, offline: endpoints as their sources say.
		return eps, out
	}
	var probes map[string]sourceProbe
	probes, out.configured, out.err = r.sourceProbes(ctx, xb)
	key := client.ObjectKeyFromObject(xb)
	if len(probes) == 0 {
		r.Prober.Sync(key, nil)
		return eps, out
	}
	origins := probeOrigins(res)
	var targets []probe.Target
	verdicts := make([]publish.ProbeVerdict, len(eps))
	refused := portRefusals{}
	unprobed := 0
	for i, e := range eps {
		o := origins[e.Address]
		sp, ok := probes[o.source]
		if !ok || e.AddressType == discoveryv1.AddressTypeFQDN {
			continue
		}
		c := sp.check
		if !sp.portSet && len(e.Ports) > 0 {
			c.Port = ptr.Deref(e.Ports[0].Port, c.Port)
		}
		if refusers := tenancy.ProbePortRefusers(c.Port, targetPorts(e), o.grants); len(refusers) > 0 {
			// Not sent: the endpoint is published as its sources say.
			refused.add(sp.field, c.Port, refusers)
			continue
		}
		if most := r.Config.MaxProbeTargets; most > 0 && len(targets) >= most {
			// One backend's probes share the prober with every other
			// tenant's: past its bound, endpoints go unprobed.
			unprobed++
			continue
		}
		t := probe.Target{Address: e.Address, Check: c}
		targets = append(targets, t)
		verdicts[i] = publish.ProbeVerdict{Probed: true, Passing: r.Prober.Passing(t), FailOpen: sp.failOpen}
	}
	if unprobed > 0 {
		out.limit = fmt.Sprintf("%d endpoint(s) past the controller's limit of %d probe targets per backend (--max-probe-targets-per-backend) are not probed and are published as their sources say",
			unprobed, r.Config.MaxProbeTargets)
	}
	out.refused = refused.message()
	r.Prober.Sync(key, targets)
	eps, out.ProbeOutcome = publish.ApplyProbes(eps, verdicts)
	return eps, out
}

// sourceProbes are the checks of xb's probed sources, by source name;
// configured is true when some source has a probe, and err says why some
// cannot run.
func (r *Reconciler) sourceProbes(ctx context.Context, xb *v1alpha1.ExternalBackend) (probes map[string]sourceProbe, configured bool, err error) {
	probes = map[string]sourceProbe{}
	var errs []error
	for _, src := range xb.Spec.Sources {
		spec, field := src.Probe, fmt.Sprintf("spec.sources[%s].probe", src.Name)
		if spec == nil {
			spec, field = xb.Spec.Probe, "spec.probe"
		}
		if spec == nil {
			continue
		}
		configured = true
		c, err := r.checkOf(ctx, xb, field, spec)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		probes[src.Name] = sourceProbe{check: c, failOpen: ptr.Deref(spec.FailOpen, v1alpha1.DefaultProbeFailOpen),
			field: field, portSet: spec.Port != nil}
	}
	return probes, configured, errors.Join(errs...)
}

// probeOrigin is where an address comes from: the first source in spec
// order that publishes it (whose probe checks it, as Normalize merges
// them), and the probe grants of every source that publishes it.
type probeOrigin struct {
	source string
	grants []tenancy.ProbeGrant
}

// probeOrigins are the origins of the addresses the admitted sources
// answered (or whose answers are held), by canonical address.
func probeOrigins(res resolved) map[string]probeOrigin {
	origins := map[string]probeOrigin{}
	for i, sr := range res.results {
		if (sr.Err != nil && !sr.Held) || i >= len(res.admissions) || res.admissions[i].refused != nil {
			continue
		}
		for _, e := range sr.Endpoints {
			a := publish.CanonicalAddress(e.Address)
			o := origins[a]
			if o.source == "" {
				o.source = sr.Name
			}
			o.grants = append(o.grants, res.admissions[i].probes)
			origins[a] = o
		}
	}
	return origins
}

// targetPorts are the ports e is published on: where the Service sends
// the namespace's traffic, whatever the protocol.
func targetPorts(e publish.Endpoint) []int32 {
	out := make([]int32, 0, len(e.Ports))
	for _, p := range e.Ports {
		if p.Port != nil {
			out = append(out, *p.Port)
		}
	}
	return out
}

// portRefusals gathers, by probe field, the endpoints whose probe port was
// refused and who refused it, for one message.
type portRefusals map[string]*portRefusal

// portRefusal is one probe's refused port.
type portRefusal struct {
	port      int32
	endpoints int
	// providers are the BackendProviders that do not allow the port;
	// unreferenced counts sources without a provider among the refusers.
	providers    sets.Set[string]
	unreferenced bool
}

// add counts one endpoint whose probe (field) may not use port.
func (p portRefusals) add(field string, port int32, refusers []tenancy.ProbeGrant) {
	pr, ok := p[field]
	if !ok {
		pr = &portRefusal{port: port, providers: sets.New[string]()}
		p[field] = pr
	}
	pr.endpoints++
	for _, g := range refusers {
		if g.Provider == "" {
			pr.unreferenced = true
		} else {
			pr.providers.Insert(g.Provider)
		}
	}
}

// message names each refused probe's port field, who refused it and the
// fix; "" when none was refused.
func (p portRefusals) message() string {
	msgs := make([]string, 0, len(p))
	for _, field := range slices.Sorted(maps.Keys(p)) {
		pr := p[field]
		var by []string
		for _, name := range sets.List(pr.providers) {
			by = append(by, fmt.Sprintf("BackendProvider %q", name))
		}
		if pr.unreferenced {
			by = append(by, "a source without providerRef")
		}
		msgs = append(msgs, fmt.Sprintf(
			"%s.port: %d is neither a target port of spec.service.ports nor in spec.probes.allowedPorts of every BackendProvider of the endpoints (not allowed by %s): no probe is sent to its %d endpoint(s), which are published as their sources say; probe a port the Service targets, or ask the platform team to allow port %d in spec.probes.allowedPorts of the providers these sources name",
			field, pr.port, strings.Join(by, ", "), pr.endpoints, pr.port))
	}
	return strings.Join(msgs, "; ")
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
		if !v1alpha1.ValidHTTPProbePath(c.Path) {
			// Admission refuses such paths; an object stored before it
			// did is checked here.
			return c, fmt.Errorf("%s.http.path: a path of at most %d characters, '/' and letters, digits, -._~!$&'()*+,;=:@/ and %%XX escapes, with a query after '?' if any; no spaces, '#' or other characters",
				field, v1alpha1.HTTPProbePathMaxLength)
		}
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

// probePort is the probe's port, else the first Service port's target;
// applyProbes probes an endpoint on its own published port where the spec
// names none (a provider's port, as RDS tells, when there is no targetPort).
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
