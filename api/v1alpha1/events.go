package v1alpha1

// Reasons of the Events that tell an ExternalBackend's transitions which no
// condition's change names. Each is CamelCase, as the condition reasons are.
const (
	// ReasonPublished (Normal): the backend's Service has ready endpoints,
	// for the first time or again after it had none.
	ReasonPublished = "Published"
	// ReasonNoReadyEndpoints (Warning): the backend's Service had ready
	// endpoints and has none now, while Ready does not say why (every
	// source calls its endpoints unhealthy, or every probe fails).
	ReasonNoReadyEndpoints = "NoReadyEndpoints"
	// ReasonProviderAdmitted (Normal): a source that its BackendProvider
	// did not admit (ProviderNotAdmitted) is admitted now, and published
	// through it. Its revocation is told by the Warning ProviderNotAdmitted.
	ReasonProviderAdmitted = "ProviderAdmitted"
)
