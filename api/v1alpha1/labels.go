package v1alpha1

// Names fixed by the design: the labels the controller's objects carry and
// the field manager of its writes. Tools that read our objects (kubectl,
// dashboards, other controllers) match on these.
const (
	// FieldManager is the field manager of every write the controller makes.
	FieldManager = "backendslice"
	// ManagedByValue is our value of the endpointslice.kubernetes.io/managed-by
	// label: a label value, so it holds no '/'.
	ManagedByValue = "externalbackend-controller.backendslice.io"
	// BackendLabel names the ExternalBackend a Service or EndpointSlice
	// belongs to. The controller's cache only holds Services and slices that
	// carry it.
	BackendLabel = "backendslice.io/backend"
)
