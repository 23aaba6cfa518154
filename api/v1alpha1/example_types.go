package v1alpha1

// The example kind is made up: backendslice's own tests add it end to end
// (test/examplekind), to prove that a kind is a package of its own plus
// its fields here. The shipped CRDs refuse both fields (the rules on
// Source and BackendProviderSpec), so no cluster stores one, and the
// controller's table of kinds has no row for it; the tests install the
// CRDs without those two rules.

// ExampleSource is a source of the made-up example kind: one item of an
// example catalog.
type ExampleSource struct {
	// item names the catalog's entry whose addresses the source publishes.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Item string `json:"item"`
}

// ExampleProvider is a BackendProvider of the made-up example kind: an
// example catalog, and the items its namespaces may read.
type ExampleProvider struct {
	// catalog names the catalog sources read through this provider.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Catalog string `json:"catalog"`

	// allowedItems are the items its namespaces may read; unset allows
	// every item.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=63
	AllowedItems []string `json:"allowedItems,omitempty"`
}
