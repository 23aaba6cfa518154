package controllers

import (
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/test/controlplane"
)

// startControlPlane runs a real kube-apiserver and etcd for the test, and
// returns them with an administrator's client that has made namespaces.
func startControlPlane(t *testing.T, namespaces ...string) (*controlplane.ControlPlane, client.Client) {
	t.Helper()
	scheme, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	return controlplane.ForTest(t, scheme, namespaces...)
}
