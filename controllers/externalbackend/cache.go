package externalbackend

import (
	"github.com/backendslice/backendslice/api/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/internal/slicestore"
)

// BackendIndex indexes our cached Services and slices by the backend they
// belong to (their v1alpha1.BackendLabel).
const BackendIndex = "backendslice.io/backend"

// backendOf is the BackendIndex value of an object.
func backendOf(o client.Object) []string {
	if key, ok := slicestore.BackendKey(o); ok {
		return []string{key.Name}
	}
	return nil
}

// CacheOptions narrow and trim what the manager's cache holds: Services
// and slices that carry our label (a cluster's others are none of our
// business and could be many), Secrets of the controller's own namespace
// only (the one namespace whose Secrets its Role lets it read), and of
// each object only what the controller reads (trim.go). The scale
// benchmarks build caches from them too.
func CacheOptions(namespace string) (cache.Options, error) {
	ours, err := labels.NewRequirement(v1alpha1.BackendLabel, selection.Exists, nil)
	if err != nil {
		return cache.Options{}, err
	}
	ourObjects := cache.ByObject{Label: labels.NewSelector().Add(*ours), Transform: trimManagedFields}
	by := map[client.Object]cache.ByObject{
		&corev1.Service{}:            ourObjects,
		&discoveryv1.EndpointSlice{}: ourObjects,
		&v1alpha1.ExternalBackend{}:  {Transform: trimBackend},
		// Only their addresses, denied to endpoints, and Pod ranges.
		&corev1.Node{}: {Transform: hostFieldsOnly},
	}
	if namespace != "" {
		by[&corev1.Secret{}] = cache.ByObject{Namespaces: map[string]cache.Config{namespace: {}}}
	}
	return cache.Options{ByObject: by}, nil
}

// lastApplied is the annotation client-side apply (kubectl apply, Argo CD)
// keeps a whole copy of the object in.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// trimBackend drops from a cached ExternalBackend what the controller never
// reads: its managed fields (a field set per writer, as large as the spec)
// and the last-applied copy of the spec. A backend of 10,000 endpoints
// would otherwise be cached about three times over. Status patches are
// computed between two such copies, so nothing dropped is ever written.
func trimBackend(o any) (any, error) {
	if obj, ok := o.(client.Object); ok {
		obj.SetManagedFields(nil)
		if a := obj.GetAnnotations(); a[lastApplied] != "" {
			delete(a, lastApplied)
			obj.SetAnnotations(a)
		}
	}
	return o, nil
}

// trimManagedFields keeps, of a cached Service's or slice's managed
// fields, who wrote it (wroteByUs reads that to re-adopt our objects) but
// not the field sets, which list every endpoint of a slice. An update
// sends no managed fields (update clears them), so the API server keeps
// the object's own.
func trimManagedFields(o any) (any, error) {
	if obj, ok := o.(client.Object); ok {
		mf := obj.GetManagedFields()
		for i := range mf {
			mf[i].FieldsV1 = nil
		}
		obj.SetManagedFields(mf)
	}
	return o, nil
}
