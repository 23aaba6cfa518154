// Package argocd holds the Argo CD health checks users install in
// argocd-cm: health.lua for ExternalBackend, backendprovider-health.lua for
// BackendProvider. Tests run them through test/argocdtest, which takes them
// from here.
package argocd

import _ "embed"

// HealthLua is config/argocd/health.lua, the check of ExternalBackend,
// embedded so that what the tests run is byte for byte the file users
// install.
//
//go:embed health.lua
var HealthLua string

// BackendProviderHealthLua is config/argocd/backendprovider-health.lua, the
// check of BackendProvider.
//
//go:embed backendprovider-health.lua
var BackendProviderHealthLua string
