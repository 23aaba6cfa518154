//go:build tools

// Package tools pins kube-apiserver and kube-proxy so that `go mod tidy`
// keeps their dependencies. Both come from k8s.io/kubernetes at one
// version, so one module (and one set of staging replaces) builds them,
// and the tests' kube-controller-manager (./controllermanager) too.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
)
