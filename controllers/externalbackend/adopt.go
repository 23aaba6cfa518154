package externalbackend

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/publish"
)

// +kubebuilder:rbac:groups="",resources=endpoints,verbs=get;delete

// AdoptedAnnotation marks a Service this controller adopted (see
// spec.service.adopt) once none of its hand-written slices, nor a legacy
// Endpoints object, is left: from then on its slices are not listed past
// the cache again.
const AdoptedAnnotation = "backendslice.io/adopted"

// adoptionPoll is how soon an adoption that waits looks again: the
// hand-written slices and Endpoints are not in the cache, so no event
// tells when they change.
const adoptionPoll = 5 * time.Second

// mirrorManagedBy is the managed-by value of the slices
// kube-controller-manager mirrors from an Endpoints object.
const mirrorManagedBy = "endpointslicemirroring-controller.k8s.io"

// errAdoptionRefused says the Service of our name cannot be adopted.
type errAdoptionRefused struct{ msg string }

func (e errAdoptionRefused) Error() string { return e.msg }

// adoptionRefusal says why svc (not ours) cannot be adopted by a backend
// that would make it want, or "" when it can: only a selectorless
// ClusterIP Service that no controller owns, whose cluster IP survives
// the update.
func adoptionRefusal(svc, want *corev1.Service) string {
	name := svc.Namespace + "/" + svc.Name
	switch {
	case len(svc.Spec.Selector) > 0:
		return fmt.Sprintf("Service %s has a selector: Kubernetes' endpoints controller publishes its endpoints, and adopting it would fight that controller; remove spec.selector from the Service first (its cluster IP stays), or set spec.service.name to another name", name)
	case metav1.GetControllerOf(svc) != nil:
		ref := metav1.GetControllerOf(svc)
		return fmt.Sprintf("Service %s is controlled by %s %s: only a Service no controller owns can be adopted; set spec.service.name to another name", name, ref.Kind, ref.Name)
	case svc.Spec.Type != "" && svc.Spec.Type != corev1.ServiceTypeClusterIP:
		return fmt.Sprintf("Service %s is of type %s: backendslice publishes ClusterIP and headless Services, and changing the type would take away what its clients use; write a new Service instead (backendslice import writes the ExternalBackend for it)", name, svc.Spec.Type)
	}
	if why := recreateReason(svc, want); why != "" {
		return fmt.Sprintf("Service %s cannot be adopted as spec.service asks: the Service would have to be recreated %s, which changes its cluster IP; make spec.service.type and spec.addressTypes match the Service", name, why)
	}
	return ""
}

// adoption is what the adoption step found.
type adoption struct {
	// active is true while spec.service.adopt is set.
	active bool
	// done is true when nothing hand-written is left.
	done bool
	// waiting says, for each hand-written object kept, which of its ready
	// endpoints this backend's slices do not carry yet.
	waiting []string
}

// completeAdoption removes an adopted Service's hand-written slices and
// legacy Endpoints object, each only once ours carry every one of its
// ready endpoints as ready, so that kube-proxy never sees fewer ready
// endpoints. Another controller's slices stay, the mirror's included (it
// removes them itself once the Endpoints object is gone). It runs only
// after our slices were written this pass (pub is what they hold).
func (r *Reconciler) completeAdoption(ctx context.Context, xb *v1alpha1.ExternalBackend, svc *corev1.Service, pub publication) (adoption, error) {
	spec := xb.Spec.Service.Adopt
	if spec == nil {
		return adoption{}, nil
	}
	a := adoption{active: true}
	if _, ok := svc.Annotations[AdoptedAnnotation]; ok {
		a.done = true
		return a, nil
	}
	carried := readyEndpoints(pub.Endpoints)
	var list discoveryv1.EndpointSliceList
	if err := r.APIReader.List(ctx, &list, client.InNamespace(svc.Namespace),
		client.MatchingLabels{discoveryv1.LabelServiceName: svc.Name}); err != nil {
		return a, readFailed("listing the EndpointSlices of adopted Service "+svc.Name, err)
	}
	for i := range list.Items {
		s := &list.Items[i]
		// Ours are those we wrote, whatever their owner says: a
		// hand-written slice may name the Service as its controller.
		if wroteByUs(s) || !handWritten(s, svc, spec.HandWrittenManagedBy) {
			continue
		}
		if missing := missingFrom(carried, sliceReady(s)); len(missing) > 0 {
			a.waiting = append(a.waiting, fmt.Sprintf("EndpointSlice %s until ours carry %s ready", s.Name, someOf(missing)))
			continue
		}
		if err := r.removeForeign(ctx, xb, s, "hand-written EndpointSlice"); err != nil {
			return a, err
		}
	}
	waiting, err := r.retireEndpoints(ctx, xb, svc, carried)
	if err != nil {
		return a, err
	}
	a.waiting = append(a.waiting, waiting...)
	if len(a.waiting) > 0 {
		return a, nil
	}
	return r.markAdopted(ctx, xb, svc)
}

// retireEndpoints removes the legacy Endpoints object of svc once ours
// carry its ready addresses on its ports; kube-controller-manager's mirror
// then removes the slices it made of it. Before then it stays, so the
// mirror removes nothing early.
func (r *Reconciler) retireEndpoints(ctx context.Context, xb *v1alpha1.ExternalBackend, svc *corev1.Service, carried map[string]bool) ([]string, error) {
	ep := &corev1.Endpoints{} //nolint:staticcheck // the legacy object being retired
	switch err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}, ep); {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, readFailed("reading the Endpoints of adopted Service "+svc.Name, err)
	}
	if missing := missingFrom(carried, endpointsReady(ep)); len(missing) > 0 {
		return []string{fmt.Sprintf("Endpoints %s until ours carry %s ready", ep.Name, someOf(missing))}, nil
	}
	return nil, r.removeForeign(ctx, xb, ep, "legacy Endpoints")
}

// removeForeign deletes a hand-written object of an adopted Service, only
// as it was read: one edited since is looked at again next pass.
func (r *Reconciler) removeForeign(ctx context.Context, xb *v1alpha1.ExternalBackend, o client.Object, what string) error {
	uid, rv := o.GetUID(), o.GetResourceVersion()
	err := r.Delete(ctx, o, client.Preconditions{UID: &uid, ResourceVersion: &rv})
	switch {
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		return nil
	case err != nil:
		return fmt.Errorf("deleting %s %s of adopted Service: %w", what, o.GetName(), err)
	}
	r.event(xb, corev1.EventTypeNormal, "HandWrittenRemoved", "Delete", "deleted %s %s: this backend's slices carry its ready endpoints", what, o.GetName())
	return nil
}

// markAdopted records on the Service that the adoption is complete.
func (r *Reconciler) markAdopted(ctx context.Context, xb *v1alpha1.ExternalBackend, svc *corev1.Service) (adoption, error) {
	marked := svc.DeepCopy()
	if marked.Annotations == nil {
		marked.Annotations = map[string]string{}
	}
	marked.Annotations[AdoptedAnnotation] = r.Clock.Now().UTC().Format(time.RFC3339)
	if err := r.update(ctx, marked, kindService); err != nil {
		return adoption{active: true}, fmt.Errorf("marking Service %s adopted: %w", svc.Name, err)
	}
	r.event(xb, corev1.EventTypeNormal, v1alpha1.ReasonAdopted, "Adopt", "Service %s adopted: no hand-written EndpointSlice or Endpoints left", svc.Name)
	return adoption{active: true, done: true}, nil
}

// handWritten tells whether a slice of svc that is not ours is
// hand-written, so ours replace it: no managed-by label or one the spec
// names, and no controller but, at most, the Service itself.
func handWritten(s *discoveryv1.EndpointSlice, svc *corev1.Service, managedBy []string) bool {
	if ref := metav1.GetControllerOf(s); ref != nil && ref.UID != svc.UID {
		return false
	}
	by, labelled := s.Labels[discoveryv1.LabelManagedBy]
	return !labelled || slices.Contains(managedBy, by)
}

// endpointKey names a ready endpoint on one port: address, protocol and
// number. Not the port's name: once adopted, the Service's port names are
// the spec's, and kube-proxy reads a hand-written slice's endpoints only
// under the names they share.
func endpointKey(addr string, proto corev1.Protocol, port int32) string {
	return fmt.Sprintf("%s %s:%d", addr, proto, port)
}

// readyEndpoints are the keys of what ours publish ready.
func readyEndpoints(eps []publish.Endpoint) map[string]bool {
	out := map[string]bool{}
	for _, e := range eps {
		if !e.Ready() {
			continue
		}
		for _, p := range e.Ports {
			out[endpointKey(e.Address, ptr.Deref(p.Protocol, corev1.ProtocolTCP), ptr.Deref(p.Port, 0))] = true
		}
	}
	return out
}

// sliceReady are the keys of a slice's ready endpoints. A missing ready
// condition counts as ready, as the API says consumers must read it.
func sliceReady(s *discoveryv1.EndpointSlice) []string {
	var out []string
	for _, ep := range s.Endpoints {
		if len(ep.Addresses) == 0 || !ptr.Deref(ep.Conditions.Ready, true) {
			continue
		}
		addr := publish.CanonicalAddress(ep.Addresses[0])
		for _, p := range s.Ports {
			out = append(out, endpointKey(addr, ptr.Deref(p.Protocol, corev1.ProtocolTCP), ptr.Deref(p.Port, 0)))
		}
	}
	return out
}

// endpointsReady are the keys of an Endpoints object's ready addresses.
func endpointsReady(ep *corev1.Endpoints) []string { //nolint:staticcheck // the legacy object being retired
	var out []string
	for _, sub := range ep.Subsets {
		for _, a := range sub.Addresses {
			for _, p := range sub.Ports {
				out = append(out, endpointKey(publish.CanonicalAddress(a.IP), p.Protocol, p.Port))
			}
		}
	}
	return out
}

// missingFrom lists the keys of want that carried lacks, sorted.
func missingFrom(carried map[string]bool, want []string) []string {
	var out []string
	for _, k := range want {
		if !carried[k] && !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// someOf lists the first few of keys, and how many more there are: a
// status message stays short whatever a slice holds.
func someOf(keys []string) string {
	const shown = 5
	if len(keys) <= shown {
		return strings.Join(keys, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(keys[:shown], ", "), len(keys)-shown)
}
