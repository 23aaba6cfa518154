package importer

import (
	"cmp"
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/publish"
)

// inCluster reports whether a dns source refuses n (lower case) as
// pointing back into the cluster, as the CRD's rule does: in
// cluster.local, or ending in .svc.
func inCluster(n string) bool {
	for _, suffix := range []string{"cluster.local", "svc"} {
		if n == suffix || strings.HasSuffix(n, "."+suffix) {
			return true
		}
	}
	return false
}

// externalName imports an ExternalName Service as a dns source on its
// externalName, with a note on what changes for its clients.
func externalName(svc *corev1.Service, in *owned, opt Options, ns string) (*Backend, []Note) {
	obj := name("Service", svc.Namespace, svc.Name)
	target := publish.CanonicalName(svc.Spec.ExternalName)
	refuse := func(format string, args ...any) []Note {
		return []Note{{Kind: Refused, Object: obj, Text: fmt.Sprintf(format, args...)}}
	}
	switch {
	case target == "":
		return nil, refuse("an ExternalName Service without an externalName: nothing to resolve")
	case len(svc.Spec.Ports) == 0:
		return nil, refuse("an ExternalName Service without ports: clients dialled %s on any port, and a ClusterIP Service forwards only the ports it lists; add the ports clients use to the Service and import again", target)
	case inCluster(target):
		return nil, refuse("externalName %s points back into the cluster, and an ExternalBackend publishes outside backends: keep the ExternalName Service", target)
	}
	if _, err := netip.ParseAddr(target); err == nil {
		return nil, refuse("externalName %s is an IP address, which cluster DNS cannot return as a CNAME target; publish it from a static source by hand", target)
	}
	b := newBackend(svc, ns)
	nb := &notebook{}
	for _, s := range sortedSlices(in.slices) {
		o := name("EndpointSlice", s.Namespace, s.Name)
		nb.add(LeftOut, o, "consumers ignore the EndpointSlices of an ExternalName Service: not read")
		b.Replaces = append(b.Replaces, o)
	}
	if ep := in.endpoints; ep != nil {
		o := name("Endpoints", ep.Namespace, ep.Name)
		nb.add(LeftOut, o, "consumers ignore the Endpoints of an ExternalName Service: not read")
		b.Replaces = append(b.Replaces, o)
	}
	nb.add(Changed, obj, "clients got a CNAME to %s and connected to it themselves; now the Service has a cluster IP (DNS answers A/AAAA records of it) and kube-proxy forwards to the addresses the controller resolves for %s, with its resolvers, again at the TTL. "+
		"Only the ports listed here forward (before, clients reached %s on any port). TLS clients still send SNI and check certificates for the name they dial, as before", target, target, target)
	spec := &b.ExternalBackend.Spec
	spec.Service = serviceSpec(svc, nb)
	used := map[string]bool{}
	for _, sp := range svc.Spec.Ports {
		p := v1alpha1.ServicePort{Name: portName(obj, sp, used, nb), Port: sp.Port, AppProtocol: sp.AppProtocol}
		if proto := cmp.Or(sp.Protocol, corev1.ProtocolTCP); proto != corev1.ProtocolTCP {
			p.Protocol = v1alpha1.Protocol(proto)
		}
		if sp.TargetPort.Type == intstr.Int && sp.TargetPort.IntVal != 0 && sp.TargetPort.IntVal != sp.Port {
			nb.add(Info, obj, "port %s: targetPort %d was never used: clients dialled %s on port %d, which is the port the backend is reached on now", p.Name, sp.TargetPort.IntVal, target, sp.Port)
		}
		spec.Service.Ports = append(spec.Service.Ports, p)
	}
	spec.Sources = []v1alpha1.Source{{Name: dnsSourceName, ProviderRef: providerRef(opt.DNSProvider), DNS: &v1alpha1.DNSSource{Name: target}}}
	if opt.DNSProvider == "" {
		nb.add(Info, obj, "its source names no BackendProvider (--dns-provider): the controller resolves it only if started with --allow-sources-without-provider")
	}
	if opt.Adopt {
		nb.add(Info, obj, "not adopted (no spec.service.adopt): %s; delete the Service when applying this, and the controller creates its own",
			adoptionRefusal(svc, nil))
	}
	b.Notes = nb.notes()
	return b, nil
}
