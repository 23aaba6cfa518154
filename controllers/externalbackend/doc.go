// Package externalbackend holds the ExternalBackend reconciler. Each pass
// runs a short list of steps, one file each, every step taking what the one
// before returned:
//
//	admit.go        which sources may publish, and through which connection
//	resolve.go      ask the admitted sources' providers, hold failing ones
//	observe.go      read the Service and our slices from the cache
//	publication.go  what to publish: the pure decision (internal/decide), probed
//	service.go      write the selectorless Service
//	slices.go       plan and write the EndpointSlices
//	status.go       patch status once, from the pure summary in summarize.go
//
// What the controller remembers of a backend between passes is one record
// (state.go), dropped whole when the backend goes; what it knows of the
// cache's view of the backend's Service and slices is the slice store's
// (internal/slicestore), forgotten at the same time.
package externalbackend
