// Package v1alpha1 holds the ExternalBackend API: a backend that lives outside
// the cluster, published to in-cluster clients as a selectorless Service and
// its EndpointSlices.
//
// +kubebuilder:object:generate=true
// +groupName=backendslice.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the API group and version of ExternalBackend and BackendProvider.
	GroupVersion = schema.GroupVersion{Group: "backendslice.io", Version: "v1alpha1"}

	// SchemeBuilder adds the types of this group to a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this group to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &ExternalBackend{}, &ExternalBackendList{}, &BackendProvider{}, &BackendProviderList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
