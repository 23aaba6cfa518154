// Package argocd holds the Argo CD health check of ExternalBackend,
// health.lua, which users install in argocd-cm. Tests run it through
// test/argocdtest, which takes it from here.
package argocd

import _ "embed"

// HealthLua is config/argocd/health.lua, embedded so that what the tests run
// is byte for byte the file users install.
//
//go:embed health.lua
var HealthLua string
