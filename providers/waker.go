package providers

import (
	"k8s.io/apimachinery/pkg/types"
)

// Waker lets a push provider (Consul blocking queries) ask the controller to
// look at a backend again as soon as its source changes, instead of waiting
// for the next refresh.
type Waker interface {
	// Wake asks for a reconcile of the named ExternalBackend. It may wait
	// while the controller catches up, but never drops a wake-up.
	Wake(backend types.NamespacedName)
}
