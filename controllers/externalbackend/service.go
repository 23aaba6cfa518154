package externalbackend

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/publish"
	"github.com/backendslice/backendslice/internal/slicestore"
	"github.com/backendslice/backendslice/internal/speccheck"
)

// ipFamilies are the Service's IP families: those of the published
// endpoints in the order of allowed (the spec's families the cluster
// serves), or all of allowed while none is published.
func ipFamilies(allowed []v1alpha1.AddressType, eps []publish.Endpoint) []corev1.IPFamily {
	present := map[discoveryv1.AddressType]bool{}
	for _, e := range eps {
		present[e.AddressType] = true
	}
	var fams, all []corev1.IPFamily
	for _, t := range allowed {
		if t == v1alpha1.AddressTypeFQDN {
			continue
		}
		all = append(all, corev1.IPFamily(t))
		if present[discoveryv1.AddressType(t)] {
			fams = append(fams, corev1.IPFamily(t))
		}
	}
	if len(fams) == 0 {
		return all
	}
	return fams
}

// keepPrimary keeps the Service's current primary family first while the
// spec still publishes it, even when no endpoint of it is resolved just now:
// the API server cannot change a primary family in place, and recreating the
// Service would change its cluster IP under every client.
func keepPrimary(fams, current []corev1.IPFamily, spec []v1alpha1.AddressType) []corev1.IPFamily {
	if len(current) == 0 || slices.Contains(fams, current[0]) || !slices.Contains(spec, v1alpha1.AddressType(current[0])) {
		return fams
	}
	return append([]corev1.IPFamily{current[0]}, fams...)
}

// managedMetadataAnnotation lists the label and annotation keys the spec set
// on the Service, so that a key removed from the spec is removed from the
// Service too, while keys others set are kept.
const managedMetadataAnnotation = "backendslice.io/managed-metadata"

// managedMetadata is the value of managedMetadataAnnotation.
type managedMetadata struct {
	Labels      []string `json:"labels,omitempty"`
	Annotations []string `json:"annotations,omitempty"`
}

// managedKeys reads which keys we set last time.
func managedKeys(svc *corev1.Service) managedMetadata {
	var m managedMetadata
	// A missing or mangled annotation means we know of no keys to remove.
	_ = json.Unmarshal([]byte(svc.Annotations[managedMetadataAnnotation]), &m)
	return m
}

// desiredService is the Service for the backend: selectorless, owned by the
// ExternalBackend, with the spec's ports, labels and annotations.
func desiredService(xb *v1alpha1.ExternalBackend, fams []corev1.IPFamily) *corev1.Service {
	spec := xb.Spec.Service
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name:            speccheck.ServiceName(xb),
			Namespace:       xb.Namespace,
			Labels:          ourLabels(spec.Labels, xb.Name),
			Annotations:     maps.Clone(spec.Annotations),
			OwnerReferences: []metav1.OwnerReference{ownerRef(xb, v1alpha1.GroupVersion.WithKind("ExternalBackend"))},
		},
		Spec: corev1.ServiceSpec{
			Type:                corev1.ServiceTypeClusterIP,
			TrafficDistribution: spec.TrafficDistribution,
		},
	}
	owned, _ := json.Marshal(managedMetadata{
		Labels: slices.Sorted(maps.Keys(spec.Labels)), Annotations: slices.Sorted(maps.Keys(spec.Annotations)),
	})
	if svc.Annotations == nil {
		svc.Annotations = map[string]string{}
	}
	svc.Annotations[managedMetadataAnnotation] = string(owned)
	if spec.Type == v1alpha1.ServiceTypeHeadless {
		svc.Spec.ClusterIP = corev1.ClusterIPNone
	}
	for _, p := range spec.Ports {
		proto := corev1.Protocol(p.Protocol)
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{
			Name:        p.Name,
			Port:        p.Port,
			Protocol:    proto,
			AppProtocol: p.AppProtocol,
			TargetPort:  intOrPort(ptr.Deref(p.TargetPort, p.Port)),
		})
	}
	if len(fams) > 0 {
		svc.Spec.IPFamilies = fams
		svc.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicySingleStack)
		if len(fams) > 1 {
			// PreferDualStack rather than Require: a single-stack cluster
			// still gets a Service, with its one family.
			svc.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicyPreferDualStack)
		}
	}
	return svc
}

// ourLabels are the spec's labels plus the one that ties an object to its
// ExternalBackend (and keeps it in the controller's cache).
func ourLabels(spec map[string]string, backend string) map[string]string {
	l := maps.Clone(spec)
	if l == nil {
		l = map[string]string{}
	}
	l[v1alpha1.BackendLabel] = backend
	return l
}

// ownerRef is a controller reference to owner, of kind gvk.
func ownerRef(owner metav1.Object, gvk schema.GroupVersionKind) metav1.OwnerReference {
	return *metav1.NewControllerRef(owner, gvk)
}

// intOrPort is a numeric targetPort.
func intOrPort(p int32) intstr.IntOrString { return intstr.FromInt32(p) }

// mergeService returns current with every field we own set as want says,
// and whether anything changed. Fields the API server or others own (cluster
// IPs, foreign labels and annotations) are kept; a selector is always
// removed, since a selector would let the endpoints controller fight us.
func mergeService(current, want *corev1.Service) (*corev1.Service, bool) {
	out := current.DeepCopy()
	previous := managedKeys(current)
	for _, k := range previous.Labels {
		delete(out.Labels, k)
	}
	for _, k := range previous.Annotations {
		delete(out.Annotations, k)
	}
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	maps.Copy(out.Labels, want.Labels)
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	maps.Copy(out.Annotations, want.Annotations)
	out.OwnerReferences = want.OwnerReferences
	out.Spec.Selector = nil
	out.Spec.Type = want.Spec.Type
	out.Spec.Ports = mergePorts(current.Spec.Ports, want.Spec.Ports)
	out.Spec.TrafficDistribution = want.Spec.TrafficDistribution
	if want.Spec.IPFamilyPolicy != nil && !familiesSatisfied(current.Spec, want.Spec) {
		out.Spec.IPFamilyPolicy = want.Spec.IPFamilyPolicy
		out.Spec.IPFamilies = want.Spec.IPFamilies
		if len(want.Spec.IPFamilies) < len(current.Spec.ClusterIPs) {
			// Going back to one family drops the second cluster IP.
			out.Spec.ClusterIPs = current.Spec.ClusterIPs[:len(want.Spec.IPFamilies)]
		}
	}
	return out, !apiequality.Semantic.DeepEqual(current, out)
}

// mergePorts keeps the API server's defaults (none for a selectorless
// ClusterIP Service besides what we set) and otherwise takes want's ports.
func mergePorts(current, want []corev1.ServicePort) []corev1.ServicePort {
	out := slices.Clone(want)
	for i := range out {
		for _, c := range current {
			if c.Name == out[i].Name && c.Protocol == out[i].Protocol {
				out[i].NodePort = c.NodePort
			}
		}
	}
	return out
}

// familiesSatisfied tells whether the current families already give what
// want asks: the same policy and primary family, and for PreferDualStack
// either both families or only the primary (on a single-stack cluster).
func familiesSatisfied(current, want corev1.ServiceSpec) bool {
	if ptr.Deref(current.IPFamilyPolicy, "") != ptr.Deref(want.IPFamilyPolicy, "") || len(current.IPFamilies) == 0 {
		return false
	}
	if current.IPFamilies[0] != want.IPFamilies[0] {
		return false
	}
	return slices.Equal(current.IPFamilies, want.IPFamilies) ||
		(*want.IPFamilyPolicy == corev1.IPFamilyPolicyPreferDualStack && len(current.IPFamilies) == 1)
}

// recreateReason says why the Service must be deleted and created again, or
// "" when it can be updated: the API server lets neither the primary IP
// family nor the choice between a cluster IP and none change.
func recreateReason(current, want *corev1.Service) string {
	if (current.Spec.ClusterIP == corev1.ClusterIPNone) != (want.Spec.ClusterIP == corev1.ClusterIPNone) {
		return "to switch between ClusterIP and Headless"
	}
	if len(current.Spec.IPFamilies) > 0 && len(want.Spec.IPFamilies) > 0 && current.Spec.IPFamilies[0] != want.Spec.IPFamilies[0] {
		return fmt.Sprintf("to change its primary IP family from %s to %s", current.Spec.IPFamilies[0], want.Spec.IPFamilies[0])
	}
	return ""
}

// errServiceConflict says a Service of our name exists that we do not own.
type errServiceConflict struct{ msg string }

func (e errServiceConflict) Error() string { return e.msg }

// conflictMessage explains who holds the Service name and the way out.
func conflictMessage(svc *corev1.Service) string {
	owner := "no owner"
	if ref := metav1.GetControllerOf(svc); ref != nil {
		owner = fmt.Sprintf("owned by %s %s", ref.Kind, ref.Name)
	}
	extra := ""
	if len(svc.Spec.Selector) > 0 {
		extra = " and has a selector"
	}
	return fmt.Sprintf("Service %s/%s exists, %s%s; backendslice never takes over a Service it did not create: delete or rename that Service, or set spec.service.name to another name",
		svc.Namespace, svc.Name, owner, extra)
}

// ensureService creates or corrects the Service, re-adopting ours where
// someone stripped its label or owner reference, and removes Services this
// backend made under a previous name. It returns the Service as written,
// and whether this pass created it.
func (r *Reconciler) ensureService(ctx context.Context, xb *v1alpha1.ExternalBackend, pub publication, current *corev1.Service) (svc *corev1.Service, created bool, err error) {
	name := speccheck.ServiceName(xb)
	fams := ipFamilies(pub.Families, pub.Endpoints)
	if current == nil {
		made, err := r.createService(ctx, xb, desiredService(xb, fams))
		if err != nil || made != nil {
			return made, made != nil, err
		}
		// Our cache only holds Services that carry our label: the name is
		// taken by someone else's Service, or by ours with the label stripped.
		current = &corev1.Service{}
		if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: xb.Namespace, Name: name}, current); err != nil {
			return nil, false, readFailed("reading Service "+name+" that holds our name", err)
		}
	}
	want := desiredService(xb, keepPrimary(fams, current.Spec.IPFamilies, pub.Families))
	adopting := !ours(current, xb)
	switch {
	case adopting && xb.Spec.Service.Adopt == nil:
		return nil, false, errServiceConflict{conflictMessage(current)}
	case adopting:
		if why := adoptionRefusal(current, want); why != "" {
			return nil, false, errAdoptionRefused{why}
		}
	case recreateReason(current, want) != "":
		why := recreateReason(current, want)
		if err := r.remove(ctx, current, kindService, client.Preconditions{UID: &current.UID, ResourceVersion: &current.ResourceVersion}); err != nil {
			return nil, false, fmt.Errorf("deleting Service %s %s: %w", name, why, err)
		}
		r.event(xb, corev1.EventTypeNormal, "ServiceRecreated", "Delete", "deleted Service %s %s; it is created again", name, why)
		return nil, false, errRecreating
	}
	merged, changed := mergeService(current, want)
	if changed {
		if err := r.update(ctx, merged, kindService); err != nil {
			return nil, false, fmt.Errorf("updating Service %s: %w", name, err)
		}
		if adopting {
			r.event(xb, corev1.EventTypeNormal, "ServiceAdopted", "Adopt", "adopted Service %s (cluster IP %s kept)", name, merged.Spec.ClusterIP)
		} else {
			r.event(xb, corev1.EventTypeNormal, "ServiceUpdated", "Update", "updated Service %s", name)
		}
	}
	return merged, false, r.removeOldServices(ctx, xb, merged)
}

// createService creates want. It returns nil and no error when the name is
// already taken, for the caller to look at what holds it.
func (r *Reconciler) createService(ctx context.Context, xb *v1alpha1.ExternalBackend, want *corev1.Service) (*corev1.Service, error) {
	switch err := r.create(ctx, want, kindService); {
	case apierrors.IsAlreadyExists(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("creating Service %s: %w", want.Name, err)
	}
	// A new backend's Service is what was asked for: no event, which would
	// be one more API write per backend. One that status says existed was
	// deleted behind our back: that is worth telling.
	if xb.Status.ServiceName == want.Name {
		r.event(xb, corev1.EventTypeWarning, "ServiceRestored", "Create", "Service %s was deleted by someone else; created it again", want.Name)
	}
	return want, r.removeOldServices(ctx, xb, want)
}

// ours tells whether the Service is this backend's: controlled by it, or
// without any controller but written by us and labelled for this backend
// (someone removed its owner reference). Any other Service is never touched.
func ours(svc *corev1.Service, xb *v1alpha1.ExternalBackend) bool {
	if metav1.GetControllerOf(svc) == nil {
		return svc.Labels[v1alpha1.BackendLabel] == xb.Name && wroteByUs(svc)
	}
	return metav1.IsControlledBy(svc, xb)
}

// removeOldServices deletes Services (and their slices) that this backend
// created under another name, after a rename of spec.service.name.
func (r *Reconciler) removeOldServices(ctx context.Context, xb *v1alpha1.ExternalBackend, svc *corev1.Service) error {
	var list corev1.ServiceList
	if err := r.List(ctx, &list, client.InNamespace(xb.Namespace), client.MatchingFields{BackendIndex: xb.Name}); err != nil {
		return readFailed("listing Services of this backend", err)
	}
	for i := range list.Items {
		old := &list.Items[i]
		if old.Name == svc.Name || !metav1.IsControlledBy(old, xb) {
			continue
		}
		// Garbage collection would remove the slices too; deleting them
		// first takes the old name out of service discovery at once. Only
		// slices the old Service controls go, never another backend's.
		sl := slicestore.SliceMetaList()
		if err := r.List(ctx, sl, client.InNamespace(xb.Namespace), client.MatchingLabels{
			discoveryv1.LabelServiceName: old.Name, v1alpha1.BackendLabel: xb.Name,
		}); err != nil {
			return readFailed("listing EndpointSlices of Service "+old.Name, err)
		}
		for j := range sl.Items {
			s := &sl.Items[j]
			if !metav1.IsControlledBy(s, old) {
				continue
			}
			s.SetGroupVersionKind(slicestore.SliceGVK)
			if err := r.remove(ctx, s, kindEndpointSlice, client.Preconditions{UID: &s.UID}); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("deleting EndpointSlice %s of Service %s: %w", s.Name, old.Name, err)
			}
		}
		if err := r.remove(ctx, old, kindService, client.Preconditions{UID: &old.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting Service %s left by a rename: %w", old.Name, err)
		}
		r.event(xb, corev1.EventTypeNormal, "ServiceRemoved", "Delete", "deleted Service %s after spec.service.name changed to %s", old.Name, svc.Name)
	}
	return nil
}
