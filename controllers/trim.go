package controllers

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

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

// withoutManagedFields clears o's managed fields before it is written
// back: a nil list leaves the API server's own, where the trimmed copy of
// the cache would replace them.
func withoutManagedFields(o metav1.Object) { o.SetManagedFields(nil) }
