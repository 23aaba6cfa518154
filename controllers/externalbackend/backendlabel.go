package externalbackend

import (
	"github.com/backendslice/backendslice/api/v1alpha1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// BackendIndex indexes our cached Services and slices by the backend they
// belong to (their v1alpha1.BackendLabel).
const BackendIndex = "backendslice.io/backend"

// backendKey is the backend a Service or slice of ours belongs to, by its label.
func backendKey(o client.Object) (types.NamespacedName, bool) {
	name, ok := o.GetLabels()[v1alpha1.BackendLabel]
	return types.NamespacedName{Namespace: o.GetNamespace(), Name: name}, ok
}

// backendOf is the BackendIndex value of an object.
func backendOf(o client.Object) []string {
	if key, ok := backendKey(o); ok {
		return []string{key.Name}
	}
	return nil
}
