package tenancy

import (
	"slices"

	"github.com/backendslice/backendslice/api/v1alpha1"
)

// ProbeGrant is one source's say in where the endpoints it publishes may
// be probed: the BackendProvider it publishes through and the ports that
// provider lets probes use besides the Service's target ports.
type ProbeGrant struct {
	// Provider is the BackendProvider's name; "" for a source that names
	// none (the controller's own connections, --allow-sources-without-provider),
	// which grants no port beyond the target ports.
	Provider string
	// Ports are the provider's spec.probes.allowedPorts.
	Ports []v1alpha1.PortRange
}

// GrantOf is what p (the provider a source names, admitted) lets probes do.
func GrantOf(p *v1alpha1.BackendProvider) ProbeGrant {
	g := ProbeGrant{Provider: p.Name}
	if p.Spec.Probes != nil {
		g.Ports = p.Spec.Probes.AllowedPorts
	}
	return g
}

// allows tells whether g lets probes use port.
func (g ProbeGrant) allows(port int32) bool {
	return slices.ContainsFunc(g.Ports, func(r v1alpha1.PortRange) bool { return r.Contains(port) })
}

// ProbePortRefusers decides whether a probe may be sent on port to an
// endpoint reached on targetPorts (the ports its EndpointSlice publishes)
// and published by the sources whose grants are given: it may when port is
// one of the target ports, since a probe there reaches nothing the
// Service does not already send the namespace's traffic to; else only when
// every grant allows port, so that no provider's endpoints are probed on
// a port that provider's platform team did not agree to. It returns the
// grants that refuse, none when the probe may go; an endpoint with no
// grant at all may be probed on its target ports only.
func ProbePortRefusers(port int32, targetPorts []int32, grants []ProbeGrant) []ProbeGrant {
	if slices.Contains(targetPorts, port) {
		return nil
	}
	if len(grants) == 0 {
		return []ProbeGrant{{}}
	}
	var refusers []ProbeGrant
	for _, g := range grants {
		if !g.allows(port) {
			refusers = append(refusers, g)
		}
	}
	return refusers
}
