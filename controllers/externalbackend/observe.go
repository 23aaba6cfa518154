package externalbackend

import (
	"context"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/publish"
	"github.com/backendslice/backendslice/internal/slicestore"
	"github.com/backendslice/backendslice/internal/speccheck"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// observed is what is published now, as the cache shows it.
type observed struct {
	// service is our Service, or nil when the cache holds none of its name.
	service *corev1.Service
	// slices are the slices of the Service that are ours (see ownedBy).
	slices []discoveryv1.EndpointSlice
	// taken are the names of every cached slice of the Service, ours or not.
	taken sets.Set[string]
	// served are the IP families the cluster gives Services addresses of.
	served sets.Set[corev1.IPFamily]
	// cluster are the cluster's own networks and hosts: no endpoint may be there.
	cluster publish.ClusterNetworks
}

// observe reads the Service, our slices and the cluster's families from the cache.
func (r *Reconciler) observe(ctx context.Context, xb *v1alpha1.ExternalBackend) (observed, error) {
	name := speccheck.ServiceName(xb)
	var seen observed
	svc := &corev1.Service{}
	switch err := r.Get(ctx, client.ObjectKey{Namespace: xb.Namespace, Name: name}, svc); {
	case err == nil:
		seen.service = svc
	case !apierrors.IsNotFound(err):
		return seen, readFailed("reading Service "+name, err)
	}
	list := slicestore.SliceMetaList()
	if err := r.List(ctx, list, client.InNamespace(xb.Namespace), client.MatchingFields{BackendIndex: xb.Name}); err != nil {
		return seen, readFailed("listing EndpointSlices of Service "+name, err)
	}
	// Slices of the Service, and ours that lost its label (kube-proxy no
	// longer reads them, but they are the Service's: relabelled by the
	// plan rather than left until the Service goes).
	metas := slices.DeleteFunc(list.Items, func(s metav1.PartialObjectMetadata) bool {
		svc, labelled := s.Labels[discoveryv1.LabelServiceName]
		if !labelled {
			ref := metav1.GetControllerOf(&s)
			return ref == nil || ref.Kind != "Service" || ref.Name != name
		}
		return svc != name
	})
	of, err := r.store.Slices(ctx, client.ObjectKeyFromObject(xb), metas)
	if err != nil {
		return seen, readFailed("reading the EndpointSlices of this backend past the cache", err)
	}
	seen.slices, seen.taken = ownedBy(of, name, seen.service)
	net, err := r.families.read(ctx)
	if err != nil {
		return seen, errRead{err}
	}
	seen.served, seen.cluster = net.served, net.cluster
	return seen, nil
}

// ownedBy picks the slices of Service name that are ours, and returns the
// names of all of them (see owns).
func ownedBy(all []discoveryv1.EndpointSlice, name string, svc *corev1.Service) ([]discoveryv1.EndpointSlice, sets.Set[string]) {
	taken := sets.New[string]()
	var ours []discoveryv1.EndpointSlice
	for _, s := range all {
		taken.Insert(s.Name)
		if owns(&s, name, uidOf(svc)) {
			ours = append(ours, s)
		}
	}
	return ours, taken
}

// uidOf is the Service's UID, or "" when there is none yet.
func uidOf(svc *corev1.Service) types.UID {
	if svc == nil {
		return ""
	}
	return svc.UID
}

// owns tells whether the slice belongs to the Service name whose UID is uid
// ("" while the Service is not known). Ours are the slices the Service
// controls, and two kinds of slice our field manager wrote: one whose owner
// reference someone stripped, and one of an earlier Service of this name
// (deleted and created again), handed over to the new one rather than left
// to publish its endpoints a second time until garbage collection. A slice
// that carries our labels but that we never wrote (made by hand, or by
// another tool) is never ours: never adopted, rewritten or deleted.
func owns(s *discoveryv1.EndpointSlice, name string, uid types.UID) bool {
	ref := metav1.GetControllerOf(s)
	switch {
	case ref == nil:
		return s.Labels[discoveryv1.LabelServiceName] == name && wroteByUs(s)
	case ref.Kind != "Service" || ref.Name != name:
		return false
	case uid == "" || ref.UID == uid:
		return true
	}
	return wroteByUs(s)
}

// wroteByUs tells whether our field manager ever wrote the object. An
// object we never wrote is never taken over, whatever labels it carries.
func wroteByUs(o metav1.Object) bool {
	return slices.ContainsFunc(o.GetManagedFields(), func(f metav1.ManagedFieldsEntry) bool {
		return f.Manager == v1alpha1.FieldManager
	})
}
