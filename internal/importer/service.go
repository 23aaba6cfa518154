package importer

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/utils/ptr"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/publish"
)

// Source names: the one static source of an import (and its sequels when
// one is not enough), or the dns source of an ExternalName Service.
const (
	staticSourceName = "imported"
	dnsSourceName    = "external-name"
)

// maxStatic is the most endpoints one static source lists.
const maxStatic = 1000

// maxSources is the most sources one ExternalBackend has.
const maxSources = 16

// argoCDTrackingLabel is Argo CD's default tracking label (before 3.0)
// and a common label of Helm charts.
const argoCDTrackingLabel = "app.kubernetes.io/instance"

// selectorless imports a Service without a selector from its slices and
// Endpoints.
func selectorless(svc *corev1.Service, in *owned, opt Options, ns string) (*Backend, []Note) {
	b := newBackend(svc, ns)
	obj := b.Replaces[0]
	if len(svc.Spec.Ports) == 0 {
		return nil, []Note{{Kind: Refused, Object: obj, Text: "a Service without ports, and an ExternalBackend's Service has 1 to 100: add the ports clients use to the Service and import again"}}
	}
	nb := &notebook{}
	groups, read := readGroups(svc, in, nb)
	b.Replaces = append(b.Replaces, read...)
	main, kept := choosePorts(candidates(groups, nb), nb)
	kept = dedupe(kept, nb)
	if len(kept) == 0 {
		nb.add(Refused, obj, "no endpoint to publish (an ExternalBackend's static source lists 1 to %d): not imported", maxStatic)
		return nil, nb.notes()
	}
	slices.SortStableFunc(kept, compareCandidates)
	spec := &b.ExternalBackend.Spec
	spec.Service = serviceSpec(svc, nb)
	spec.Service.Ports = servicePorts(svc, main, nb)
	spec.AddressTypes = families(svc, kept)
	spec.Sources = staticSources(obj, kept, opt.StaticProvider, nb)
	compareHints(svc, kept, nb)
	if opt.Adopt {
		spec.Service.Adopt = adoption(svc, in, *spec, kept, nb)
	}
	serviceFieldNotes(svc, spec, nb)
	if opt.StaticProvider == "" {
		nb.add(Info, obj, "its source names no BackendProvider (--static-provider): the controller publishes it only if started with --allow-sources-without-provider")
	}
	b.Notes = nb.notes()
	return b, nil
}

// serviceSpec is what an ExternalBackend's Service keeps of svc, its
// ports aside: headless or not, labels, annotations, trafficDistribution.
func serviceSpec(svc *corev1.Service, nb *notebook) v1alpha1.ServiceSpec {
	spec := v1alpha1.ServiceSpec{TrafficDistribution: svc.Spec.TrafficDistribution}
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		spec.Type = v1alpha1.ServiceTypeHeadless
	}
	obj := name("Service", svc.Namespace, svc.Name)
	for _, k := range slices.Sorted(maps.Keys(svc.Labels)) {
		switch {
		case carriedLabel(k):
			if spec.Labels == nil {
				spec.Labels = map[string]string{}
			}
			spec.Labels[k] = svc.Labels[k]
		case k == argoCDTrackingLabel:
			nb.add(LeftOut, obj, "label %s is not carried: it is Argo CD's default tracking label, and on the controller's Service it would make Argo CD prune that Service; add it to spec.service.labels if Argo CD does not track by it", k)
		default:
			nb.add(LeftOut, obj, "label %s is not carried: Kubernetes or backendslice sets it", k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(svc.Annotations)) {
		switch {
		case k == corev1.LastAppliedConfigAnnotation:
		case strings.HasPrefix(k, "argocd.argoproj.io/"):
			nb.add(LeftOut, obj, "annotation %s is not carried: it is Argo CD's, for the objects in Git, which the controller's Service is not", k)
		default:
			if spec.Annotations == nil {
				spec.Annotations = map[string]string{}
			}
			spec.Annotations[k] = svc.Annotations[k]
		}
	}
	return spec
}

// carriedLabel reports whether a Service's label k is carried to
// spec.service.labels: not one Kubernetes or backendslice sets, which the
// CRD refuses, nor Argo CD's tracking label.
func carriedLabel(k string) bool {
	switch k {
	case discoveryv1.LabelServiceName, corev1.IsHeadlessService, v1alpha1.BackendLabel, argoCDTrackingLabel:
		return false
	}
	return !strings.HasPrefix(k, "endpointslice.kubernetes.io/")
}

// serviceFieldNotes notes the fields of svc an ExternalBackend's Service
// does not have.
func serviceFieldNotes(svc *corev1.Service, spec *v1alpha1.ExternalBackendSpec, nb *notebook) {
	obj := name("Service", svc.Namespace, svc.Name)
	s := svc.Spec
	if s.Type == corev1.ServiceTypeNodePort || s.Type == corev1.ServiceTypeLoadBalancer {
		nb.add(LeftOut, obj, "type %s is not carried: the controller writes a ClusterIP Service (node ports, load-balancer addresses and their settings go)", s.Type)
	}
	switch {
	case spec.Service.Adopt != nil:
		nb.add(Info, obj, "spec.service.adopt: the controller takes this Service over, so its cluster IP and DNS name stay")
	case s.ClusterIP != "" && s.ClusterIP != corev1.ClusterIPNone:
		nb.add(Info, obj, "clusterIP %s is not kept: the controller's Service gets one the cluster allocates; clients that dial the name see no change, those that dial the address must change (--adopt keeps the Service and its address, where the controller can adopt it)", s.ClusterIP)
	}
	if s.SessionAffinity == corev1.ServiceAffinityClientIP {
		nb.add(LeftOut, obj, "sessionAffinity ClientIP is not carried: the controller's Service balances each connection")
	}
	if ptr.Deref(s.InternalTrafficPolicy, corev1.ServiceInternalTrafficPolicyCluster) == corev1.ServiceInternalTrafficPolicyLocal {
		nb.add(LeftOut, obj, "internalTrafficPolicy Local is not carried: outside endpoints are on no node, so Local sent traffic nowhere; the controller's Service sends it to every endpoint")
	}
	if len(s.ExternalIPs) > 0 {
		nb.add(LeftOut, obj, "externalIPs %s are not carried", strings.Join(s.ExternalIPs, ", "))
	}
	if s.PublishNotReadyAddresses {
		nb.add(LeftOut, obj, "publishNotReadyAddresses is not carried: cluster DNS names only the ready endpoints of the controller's Service")
	}
	if p := ptr.Deref(s.IPFamilyPolicy, ""); s.ClusterIP != corev1.ClusterIPNone && p != "" && p != corev1.IPFamilyPolicySingleStack {
		nb.add(Info, obj, "ipFamilyPolicy %s is not carried: the controller gives the Service the families it publishes (%s)", p, joinFamilies(spec.AddressTypes))
	}
}

// families are the address types of the endpoints: the Service's IP
// families in its order first (the first is its cluster IP's, which the
// controller keeps first), then IPv4, IPv6 and FQDN.
func families(svc *corev1.Service, cands []candidate) []v1alpha1.AddressType {
	var out []v1alpha1.AddressType
	for _, c := range cands {
		if !slices.Contains(out, c.family) {
			out = append(out, c.family)
		}
	}
	rank := func(f v1alpha1.AddressType) int {
		if i := slices.Index(svc.Spec.IPFamilies, corev1.IPFamily(f)); i >= 0 {
			return i - len(svc.Spec.IPFamilies)
		}
		return familyOrder(f)
	}
	slices.SortFunc(out, func(a, b v1alpha1.AddressType) int { return rank(a) - rank(b) })
	return out
}

// staticSources list the endpoints, at most maxStatic a source, and at
// most as many of a family as the controller publishes by default.
func staticSources(obj string, cands []candidate, provider string, nb *notebook) []v1alpha1.Source {
	perFamily := map[v1alpha1.AddressType]int{}
	var within []candidate
	for _, c := range cands {
		if perFamily[c.family]++; perFamily[c.family] <= v1alpha1.DefaultMaxEndpointsPerBackend {
			within = append(within, c)
		}
	}
	for _, f := range families(&corev1.Service{}, cands) {
		if n := perFamily[f]; n > v1alpha1.DefaultMaxEndpointsPerBackend {
			nb.add(LeftOut, obj, "%d %s endpoints, and an ExternalBackend publishes at most %d of a family (--max-endpoints-per-backend): the last %d are not carried; split them over several ExternalBackends",
				n, f, v1alpha1.DefaultMaxEndpointsPerBackend, n-v1alpha1.DefaultMaxEndpointsPerBackend)
		}
	}
	cands = within
	var out []v1alpha1.Source
	for chunk := range slices.Chunk(cands, maxStatic) {
		if len(out) == maxSources {
			nb.add(LeftOut, obj, "more than %d endpoints (%d sources of %d): the last %d are not carried",
				maxSources*maxStatic, maxSources, maxStatic, len(cands)-maxSources*maxStatic)
			break
		}
		src := v1alpha1.Source{Name: staticSourceName, ProviderRef: providerRef(provider), Static: &v1alpha1.StaticSource{}}
		if len(out) > 0 {
			src.Name = fmt.Sprintf("%s-%d", staticSourceName, len(out)+1)
		}
		for _, c := range chunk {
			src.Static.Endpoints = append(src.Static.Endpoints, c.endpoint)
		}
		out = append(out, src)
	}
	return out
}

// compareHints notes endpoints whose zone hints the controller's slices
// will not carry as they were: it writes its own, forZones=[the endpoint's
// zone], when the Service asks for them and every ready endpoint of the
// family has a zone, and none otherwise.
func compareHints(svc *corev1.Service, cands []candidate, nb *notebook) {
	wants := publish.WantsZoneHints(svc.Spec.TrafficDistribution, svc.Annotations)
	unzoned := map[v1alpha1.AddressType]bool{}
	for _, c := range cands {
		if c.endpoint.Health == "" && c.endpoint.Zone == "" {
			unzoned[c.family] = true
		}
	}
	for _, c := range cands {
		var want *discoveryv1.EndpointHints
		if wants && !unzoned[c.family] && c.endpoint.Zone != "" {
			want = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: c.endpoint.Zone}}}
		}
		switch {
		case apiequality.Semantic.DeepEqual(want, c.hints):
		case c.hints == nil:
			nb.endpoint(Changed, c.origin, c.endpoint.Address, "the controller adds zone hints: the Service asks for them (trafficDistribution or topology-mode Auto) and every ready endpoint has a zone")
		default:
			nb.endpoint(LeftOut, c.origin, c.endpoint.Address, "hints are not carried: the controller writes its own, forZones=[the endpoint's zone], when the Service asks for them (trafficDistribution or topology-mode Auto) and every ready endpoint has a zone")
		}
	}
}

// joinFamilies lists address types for a note.
func joinFamilies(fs []v1alpha1.AddressType) string {
	parts := make([]string, len(fs))
	for i, f := range fs {
		parts[i] = string(f)
	}
	return strings.Join(parts, ", ")
}
