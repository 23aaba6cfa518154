package framework

import "github.com/backendslice/backendslice/test/controlplane"

// ControlPlane is the running kube-apiserver and etcd, for tests that stop
// and start the API server or run the controller binary in a process of
// its own (which needs a kubeconfig).
func (e *Env) ControlPlane() *controlplane.ControlPlane { return e.cp }
