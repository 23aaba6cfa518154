// Package crd embeds the generated CustomResourceDefinitions, so that the
// binary applies the same schema and defaults the API server does, and the
// two cannot drift: `make manifests` rewrites bases/, and the next build
// embeds it.
package crd

import _ "embed"

// ExternalBackendYAML is bases/backendslice.io_externalbackends.yaml.
//
//go:embed bases/backendslice.io_externalbackends.yaml
var ExternalBackendYAML []byte

// BackendProviderYAML is bases/backendslice.io_backendproviders.yaml.
//
//go:embed bases/backendslice.io_backendproviders.yaml
var BackendProviderYAML []byte
