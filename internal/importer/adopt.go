package importer

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/backendslice/backendslice/api/v1alpha1"
)

// maxHandWritten is how many managed-by values spec.service.adopt lists.
const maxHandWritten = 8

// adoption is spec.service.adopt for svc: the managed-by values of its
// hand-written slices, so that the controller replaces them. It is nil,
// and noted, where the controller refuses to adopt svc. It notes the
// objects adoption will leave in place, or keep waiting for, because this
// import does not carry what they publish: the controller removes a
// hand-written slice or Endpoints object only once its own slices carry
// every one of its ready endpoints as ready.
func adoption(svc *corev1.Service, in *owned, spec v1alpha1.ExternalBackendSpec, kept []candidate, nb *notebook) *v1alpha1.ServiceAdoption {
	obj := name("Service", svc.Namespace, svc.Name)
	if why := adoptionRefusal(svc, spec.AddressTypes); why != "" {
		nb.add(Info, obj, "not adopted (no spec.service.adopt): %s; delete the Service when applying this, and the controller creates its own, with another cluster IP", why)
		return nil
	}
	carried := carriedKeys(kept, spec.Service.Ports)
	a := &v1alpha1.ServiceAdoption{}
	for _, s := range sortedSlices(in.slices) {
		o := name("EndpointSlice", s.Namespace, s.Name)
		by, labelled := s.Labels[discoveryv1.LabelManagedBy]
		switch {
		case by == v1alpha1.ManagedByValue || by == managedByMirroring:
			// Ours are never read; the mirror's go with their Endpoints.
			continue
		case by == managedBySliceController || otherController(s, svc):
			nb.add(Info, o, "adoption leaves it in place as another controller's, and kube-proxy goes on reading it: delete it by hand once the ExternalBackend publishes")
			continue
		case labelled && !slices.Contains(a.HandWrittenManagedBy, by):
			a.HandWrittenManagedBy = append(a.HandWrittenManagedBy, by)
		}
		waitsFor(o, readyKeys(s.AddressType, s.Ports, s.Endpoints), carried, nb)
	}
	if ep := in.endpoints; ep != nil {
		var keys []string
		for _, g := range endpointsGroups("", ep) {
			keys = append(keys, readyKeys("", g.ports, g.endpoints)...)
		}
		waitsFor(name("Endpoints", ep.Namespace, ep.Name), keys, carried, nb)
	}
	if n := len(a.HandWrittenManagedBy); n > maxHandWritten {
		nb.add(Info, obj, "spec.service.adopt.handWrittenManagedBy lists at most %d values: the slices labelled %s stay, delete them by hand once the ExternalBackend publishes",
			maxHandWritten, strings.Join(a.HandWrittenManagedBy[maxHandWritten:], ", "))
		a.HandWrittenManagedBy = a.HandWrittenManagedBy[:maxHandWritten]
	}
	slices.Sort(a.HandWrittenManagedBy)
	return a
}

// adoptionRefusal says why the controller refuses to adopt svc for a
// backend publishing families, or "" when it would not.
func adoptionRefusal(svc *corev1.Service, families []v1alpha1.AddressType) string {
	switch t := svc.Spec.Type; {
	case t != "" && t != corev1.ServiceTypeClusterIP:
		return fmt.Sprintf("the controller refuses to adopt a Service of type %s, as changing its type would take away what its clients use", t)
	case metav1.GetControllerOf(svc) != nil:
		return fmt.Sprintf("the controller refuses to adopt a Service that %s %s controls", metav1.GetControllerOf(svc).Kind, metav1.GetControllerOf(svc).Name)
	case len(svc.Spec.IPFamilies) > 0 && !slices.Contains(families, v1alpha1.AddressType(svc.Spec.IPFamilies[0])):
		return fmt.Sprintf("the Service's primary IP family %s has no endpoint, and the controller refuses to recreate a Service with another", svc.Spec.IPFamilies[0])
	}
	return ""
}

// otherController reports whether s has a controller other than svc.
func otherController(s *discoveryv1.EndpointSlice, svc *corev1.Service) bool {
	ref := metav1.GetControllerOf(s)
	return ref != nil && (ref.Kind != "Service" || ref.Name != svc.Name)
}

// adoptionKey names a ready endpoint on one port as the controller's
// adoption compares them: address, protocol and number, not port name.
func adoptionKey(addr string, proto corev1.Protocol, port int32) string {
	return fmt.Sprintf("%s %s:%d", addr, proto, port)
}

// carriedKeys are the keys the backend's slices publish ready: its ready
// endpoints on each Service port's targetPort.
func carriedKeys(kept []candidate, ports []v1alpha1.ServicePort) map[string]bool {
	out := map[string]bool{}
	for _, c := range kept {
		if c.endpoint.Health != "" {
			continue
		}
		for _, p := range ports {
			proto := corev1.Protocol(p.Protocol)
			if proto == "" {
				proto = corev1.ProtocolTCP
			}
			out[adoptionKey(c.endpoint.Address, proto, ptr.Deref(p.TargetPort, p.Port))] = true
		}
	}
	return out
}

// readyKeys are the keys of the ready endpoints of a slice (or Endpoints
// subset, t empty): a missing ready condition reads as ready.
func readyKeys(t discoveryv1.AddressType, ports []discoveryv1.EndpointPort, eps []discoveryv1.Endpoint) []string {
	var out []string
	for _, e := range eps {
		if len(e.Addresses) == 0 || !ptr.Deref(e.Conditions.Ready, true) {
			continue
		}
		addr, _, why := readAddress(e.Addresses[0], t)
		if why != "" {
			addr = e.Addresses[0]
		}
		for _, p := range ports {
			out = append(out, adoptionKey(addr, ptr.Deref(p.Protocol, corev1.ProtocolTCP), ptr.Deref(p.Port, 0)))
		}
	}
	return out
}

// waitsFor notes the ready endpoints of a hand-written object the backend
// does not carry ready: adoption keeps the object until it does.
func waitsFor(obj string, keys []string, carried map[string]bool, nb *notebook) {
	var missing []string
	for _, k := range keys {
		if !carried[k] && !slices.Contains(missing, k) {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		nb.add(Info, obj, "adoption keeps it until the controller's slices carry %s ready, which this ExternalBackend does not publish: delete it by hand once the ExternalBackend publishes (the Adopted condition names what it waits for)",
			someOf(missing))
	}
}
