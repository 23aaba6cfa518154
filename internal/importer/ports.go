package importer

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/backendslice/backendslice/api/v1alpha1"
)

// maxPortName is the longest port name an ExternalBackend takes (the
// IANA service-name limit), shorter than a Service's 63.
const maxPortName = 15

// slicePort is an EndpointSlice port with its defaults filled in.
type slicePort struct {
	name        string
	port        int32
	protocol    corev1.Protocol
	appProtocol string
}

// String is the port as notes print it: name:port/protocol.
func (p slicePort) String() string {
	s := fmt.Sprintf("%s:%d/%s", p.name, p.port, p.protocol)
	if p.name == "" {
		s = fmt.Sprintf("%d/%s", p.port, p.protocol)
	}
	if p.appProtocol != "" {
		s += " (" + p.appProtocol + ")"
	}
	return s
}

// portSet is the ports of a group, by name and protocol.
type portSet []slicePort

// String is the set as notes print it, and the key sets are compared by.
func (ps portSet) String() string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = p.String()
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// find is the port of the set with a name and protocol.
func (ps portSet) find(portName string, protocol corev1.Protocol) (slicePort, bool) {
	i := slices.IndexFunc(ps, func(p slicePort) bool { return p.name == portName && p.protocol == protocol })
	if i < 0 {
		return slicePort{}, false
	}
	return ps[i], true
}

// newPortSet reads the ports of a group; one without a number (which
// kube-proxy ignores) is noted and left out.
func newPortSet(origin string, ports []discoveryv1.EndpointPort, nb *notebook) portSet {
	var ps portSet
	for _, p := range ports {
		sp := slicePort{
			name:        ptr.Deref(p.Name, ""),
			protocol:    ptr.Deref(p.Protocol, corev1.ProtocolTCP),
			appProtocol: ptr.Deref(p.AppProtocol, ""),
		}
		if p.Port == nil {
			nb.add(LeftOut, origin, "port %q has no number, which kube-proxy ignores: not read", sp.name)
			continue
		}
		sp.port = *p.Port
		ps = append(ps, sp)
	}
	slices.SortFunc(ps, func(a, b slicePort) int {
		return cmp.Or(cmp.Compare(a.name, b.name), cmp.Compare(a.protocol, b.protocol))
	})
	return ps
}

// choosePorts picks the port set most endpoints are reached on: an
// ExternalBackend gives every endpoint the same ports (its Service's
// targetPorts), so endpoints on other ports are noted and left out.
func choosePorts(cands []candidate, nb *notebook) (portSet, []candidate) {
	count := map[string]int{}
	sets := map[string]portSet{}
	for _, c := range cands {
		count[c.ports.String()]++
		sets[c.ports.String()] = c.ports
	}
	mainKey := ""
	for k, n := range count {
		if mainKey == "" || n > count[mainKey] || n == count[mainKey] && k < mainKey {
			mainKey = k
		}
	}
	main := sets[mainKey]
	var kept []candidate
	for _, c := range cands {
		if c.ports.String() == mainKey {
			kept = append(kept, c)
			continue
		}
		nb.endpoint(LeftOut, c.origin, c.endpoint.Address, fmt.Sprintf(
			"reached on ports %s, while most endpoints are on %s: an ExternalBackend gives every endpoint the same ports, so these are not carried; publish them from an ExternalBackend of their own (another Service name)",
			c.ports, main))
	}
	return main, kept
}

// servicePorts are the ExternalBackend's ports for svc's: each port's
// targetPort is the port its endpoints are reached on (a selectorless
// Service's own targetPort is never used), read from main.
func servicePorts(svc *corev1.Service, main portSet, nb *notebook) []v1alpha1.ServicePort {
	obj := name("Service", svc.Namespace, svc.Name)
	used := map[string]bool{}
	var out []v1alpha1.ServicePort
	for _, sp := range svc.Spec.Ports {
		proto := cmp.Or(sp.Protocol, corev1.ProtocolTCP)
		p := v1alpha1.ServicePort{Name: portName(obj, sp, used, nb), Port: sp.Port, AppProtocol: sp.AppProtocol}
		if proto != corev1.ProtocolTCP {
			p.Protocol = v1alpha1.Protocol(proto)
		}
		target := intTarget(sp)
		if ep, ok := main.find(sp.Name, proto); ok {
			// A targetPort equal to port is the API server's default: it
			// says nothing, whether written or not.
			if target != ep.port && target != sp.Port {
				nb.add(Info, obj, "port %s: targetPort %d was never used (a selectorless Service's endpoints carry their own ports): the endpoints' port %d is the targetPort", p.Name, target, ep.port)
			}
			target = ep.port
			p.AppProtocol = appProtocol(obj, p.Name, sp.AppProtocol, ep.appProtocol, nb)
		} else {
			nb.add(Changed, obj, "port %s (%d/%s) had no endpoint port of that name and protocol, so it reached no endpoint: now it reaches port %d of every endpoint%s",
				p.Name, sp.Port, proto, target, namedTargetPort(sp))
		}
		if target != sp.Port {
			p.TargetPort = ptr.To(target)
		}
		out = append(out, p)
	}
	for _, ep := range main {
		if !slices.ContainsFunc(svc.Spec.Ports, func(sp corev1.ServicePort) bool {
			return sp.Name == ep.name && cmp.Or(sp.Protocol, corev1.ProtocolTCP) == ep.protocol
		}) {
			nb.add(LeftOut, obj, "endpoint port %s has no Service port of that name and protocol, so consumers ignored it: not carried", ep)
		}
	}
	return out
}

// intTarget is the backend port a Service port names: its numeric
// targetPort, else its port.
func intTarget(sp corev1.ServicePort) int32 {
	if sp.TargetPort.Type == intstr.Int && sp.TargetPort.IntVal != 0 {
		return sp.TargetPort.IntVal
	}
	return sp.Port
}

// namedTargetPort says why a named targetPort was not used.
func namedTargetPort(sp corev1.ServicePort) string {
	if sp.TargetPort.Type == intstr.String && sp.TargetPort.StrVal != "" {
		return fmt.Sprintf(" (its targetPort %q is a Pod's port name, which no outside endpoint has)", sp.TargetPort.StrVal)
	}
	return ""
}

// portName is the ExternalBackend's name for a Service port: the same, or
// one made for a port without a name or with a longer one than an
// ExternalBackend takes.
func portName(obj string, sp corev1.ServicePort, used map[string]bool, nb *notebook) string {
	n := sp.Name
	switch {
	case n == "":
		n = strings.ToLower(fmt.Sprintf("%s-%d", cmp.Or(sp.Protocol, corev1.ProtocolTCP), sp.Port))
	case len(n) > maxPortName:
		n = strings.TrimRight(n[:maxPortName], "-")
	}
	for i := 2; used[n]; i++ {
		suffix := fmt.Sprintf("-%d", i)
		n = strings.TrimRight(n[:min(len(n), maxPortName-len(suffix))], "-") + suffix
	}
	used[n] = true
	switch {
	case sp.Name == "":
		nb.add(Info, obj, "port %d has no name, and an ExternalBackend's ports are named: named %s (clients that use the number see no change)", sp.Port, n)
	case n != sp.Name:
		nb.add(Changed, obj, "port name %s is longer than the %d characters an ExternalBackend takes: renamed %s; clients that look the port up by name (SRV records, Ingress or Gateway backends) must use the new one",
			sp.Name, maxPortName, n)
	}
	return n
}

// appProtocol is the appProtocol the ExternalBackend gives a port, which
// the controller writes on the Service and its slices alike, noting where
// the two differed.
func appProtocol(obj, port string, onService *string, onSlices string, nb *notebook) *string {
	svc := ptr.Deref(onService, "")
	switch {
	case svc == onSlices:
	case svc == "":
		nb.add(Changed, obj, "port %s: the endpoints' appProtocol %s is now the Service port's too", port, onSlices)
		return ptr.To(onSlices)
	case onSlices == "":
		nb.add(Changed, obj, "port %s: the Service port's appProtocol %s is now the endpoints' too", port, svc)
	default:
		nb.add(Changed, obj, "port %s: the endpoints said appProtocol %s, the Service %s: both say %s now", port, onSlices, svc, svc)
	}
	return onService
}
