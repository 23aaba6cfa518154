package importer

import (
	"cmp"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/backendslice/backendslice/api/v1alpha1"
)

// Values of the endpointslice.kubernetes.io/managed-by label.
const (
	// managedByMirroring marks the slices kube-controller-manager mirrors
	// from an Endpoints object.
	managedByMirroring = "endpointslicemirroring-controller.k8s.io"
	// managedBySliceController marks the slices Kubernetes writes for a
	// Service with a selector.
	managedBySliceController = "endpointslice-controller.k8s.io"
)

// group is endpoints that share ports, as consumers read them: one
// EndpointSlice, or one subset of an Endpoints object as
// kube-controller-manager mirrors it.
type group struct {
	// origin is the object the group comes from, "Kind namespace/name".
	origin string
	// addressType is the slice's; empty for an Endpoints subset, whose
	// addresses are of either IP family.
	addressType discoveryv1.AddressType
	ports       []discoveryv1.EndpointPort
	endpoints   []discoveryv1.Endpoint
}

// readGroups returns the groups of svc's slices and Endpoints, and the
// names of those read, noting labels that are wrong or not carried. The
// Endpoints object is read rather than the slices mirrored from it: it is
// what the team wrote.
func readGroups(svc *corev1.Service, in *owned, nb *notebook) ([]group, []string) {
	var groups []group
	var read []string
	mirrored := in.endpoints != nil && !skipsMirror(in.endpoints)
	for _, s := range sortedSlices(in.slices) {
		obj := name("EndpointSlice", s.Namespace, s.Name)
		if !readSlice(svc, s, obj, mirrored, nb) {
			continue
		}
		extraMetadata(svc, obj, s.Labels, s.Annotations, nb)
		groups = append(groups, group{origin: obj, addressType: s.AddressType, ports: s.Ports, endpoints: s.Endpoints})
		read = append(read, obj)
	}
	if ep := in.endpoints; ep != nil {
		obj := name("Endpoints", ep.Namespace, ep.Name)
		read = append(read, obj)
		if !mirrored {
			nb.add(LeftOut, obj, "labelled %s=true, so kube-controller-manager never mirrored it into EndpointSlices and kube-proxy never routed to it: not read", discoveryv1.LabelSkipMirror)
		} else {
			extraMetadata(svc, obj, ep.Labels, ep.Annotations, nb)
			groups = append(groups, endpointsGroups(obj, ep)...)
		}
	}
	return groups, read
}

// sortedSlices are slices by name, so that files and a live namespace
// give the same order.
func sortedSlices(in []*discoveryv1.EndpointSlice) []*discoveryv1.EndpointSlice {
	return slices.SortedFunc(slices.Values(in), func(a, b *discoveryv1.EndpointSlice) int { return cmp.Compare(a.Name, b.Name) })
}

// readSlice reports whether the slice s of svc is read, noting its labels.
func readSlice(svc *corev1.Service, s *discoveryv1.EndpointSlice, obj string, mirrored bool, nb *notebook) bool {
	switch mb := s.Labels[discoveryv1.LabelManagedBy]; mb {
	case managedByMirroring:
		if mirrored {
			nb.add(Info, obj, "mirrored by kube-controller-manager from Endpoints %s, which is read instead", s.Labels[discoveryv1.LabelServiceName])
			return false
		}
		nb.add(Info, obj, "mirrored by kube-controller-manager from an Endpoints object that is not in the input: read as it is")
	case v1alpha1.ManagedByValue:
		nb.add(LeftOut, obj, "written by backendslice's controller for another ExternalBackend, yet labelled for this hand-written Service: not read")
		return false
	case managedBySliceController:
		nb.add(Info, obj, "labelled %s=%s, the value of Kubernetes' EndpointSlice controller, which writes the slices of Services with a selector only: read as hand-written", discoveryv1.LabelManagedBy, mb)
	case "":
		nb.add(Info, obj, "has no %s label (hand-written slices should carry one, such as cluster-admins): read as hand-written", discoveryv1.LabelManagedBy)
	}
	_, labelled := s.Labels[corev1.IsHeadlessService]
	if headless := svc.Spec.ClusterIP == corev1.ClusterIPNone; labelled != headless {
		nb.add(Info, obj, "the %s label is %s, yet the Service is %s: the controller labels its slices right", corev1.IsHeadlessService,
			map[bool]string{true: "set", false: "missing"}[labelled], map[bool]string{true: "headless", false: "not headless"}[headless])
	}
	return true
}

// skipsMirror reports whether kube-controller-manager leaves ep unmirrored.
func skipsMirror(ep *corev1.Endpoints) bool {
	return ep.Labels[discoveryv1.LabelSkipMirror] == "true"
}

// extraMetadata notes the labels and annotations of a slice or Endpoints
// object that the controller's slices will not carry: they carry the
// Service's labels (spec.service.labels) and the well-known ones.
func extraMetadata(svc *corev1.Service, obj string, labels, annotations map[string]string, nb *notebook) {
	var lost []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if wellKnownSliceLabel(k) || svc.Labels[k] == labels[k] && carriedLabel(k) {
			continue
		}
		lost = append(lost, "label "+k)
	}
	for _, k := range slices.Sorted(maps.Keys(annotations)) {
		if k != corev1.LastAppliedConfigAnnotation && k != corev1.EndpointsLastChangeTriggerTime {
			lost = append(lost, "annotation "+k)
		}
	}
	if len(lost) > 0 {
		nb.add(LeftOut, obj, "%s not carried: the controller's slices carry only the Service's labels (spec.service.labels)", strings.Join(lost, ", "))
	}
}

// wellKnownSliceLabel reports whether the controller sets label k on its
// slices itself.
func wellKnownSliceLabel(k string) bool {
	switch k {
	case discoveryv1.LabelServiceName, discoveryv1.LabelManagedBy, corev1.IsHeadlessService, discoveryv1.LabelSkipMirror:
		return true
	}
	return false
}

// endpointsGroups are the groups of an Endpoints object as
// kube-controller-manager mirrors it: one per subset, ready addresses
// ready, notReadyAddresses not ready (serving and terminating unset).
func endpointsGroups(obj string, ep *corev1.Endpoints) []group {
	var out []group
	for _, ss := range ep.Subsets {
		g := group{origin: obj}
		for _, p := range ss.Ports {
			g.ports = append(g.ports, discoveryv1.EndpointPort{Name: &p.Name, Port: &p.Port, Protocol: &p.Protocol, AppProtocol: p.AppProtocol})
		}
		for _, a := range ss.Addresses {
			g.endpoints = append(g.endpoints, mirroredEndpoint(a, true))
		}
		for _, a := range ss.NotReadyAddresses {
			g.endpoints = append(g.endpoints, mirroredEndpoint(a, false))
		}
		out = append(out, g)
	}
	return out
}

// mirroredEndpoint is an Endpoints address as a mirrored slice holds it.
func mirroredEndpoint(a corev1.EndpointAddress, ready bool) discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{
		Addresses:  []string{a.IP},
		Conditions: discoveryv1.EndpointConditions{Ready: &ready},
		NodeName:   a.NodeName,
		TargetRef:  a.TargetRef,
	}
	if a.Hostname != "" {
		e.Hostname = &a.Hostname
	}
	return e
}
