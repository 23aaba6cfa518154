//go:build tools

// Package tools pins kube-apiserver, kube-proxy and kube-controller-manager
// so that `go mod tidy` keeps their dependencies. All three come from
// k8s.io/kubernetes at one version, so one module (and one set of staging
// replaces) builds them.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
)
