package controlplane

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// StopAPIServer stops kube-apiserver (SIGTERM, as a node drain or an
// upgrade does) and leaves etcd running, so that StartAPIServer brings back
// the same objects at the same resource versions.
//
// envtest keeps the API server's serving certificate in a directory it
// removes on Stop and makes again, with a new CA, on Start: clients made
// before the restart (a controller's kubeconfig among them) would then
// refuse the new certificate. So the certificates are copied into certDir
// first, and the API server starts again from there. certDir is an empty
// directory that the caller owns and removes once the control plane has
// stopped for good.
func (c *ControlPlane) StopAPIServer(certDir string) error {
	s := c.env.ControlPlane.APIServer
	if s == nil || s.CertDir == "" {
		return errors.New("the API server is not running")
	}
	if s.CertDir != certDir {
		if err := copyFiles(s.CertDir, certDir); err != nil {
			return fmt.Errorf("keeping the API server's certificates: %w", err)
		}
	}
	if err := s.Stop(); err != nil {
		return fmt.Errorf("stopping kube-apiserver: %w", err)
	}
	// The certificates in certDir are kept by Start (it only makes new
	// ones where there are none), and a directory given to envtest is
	// never removed by it.
	s.CertDir = certDir
	return nil
}

// StartAPIServer starts the API server StopAPIServer stopped, on the same
// address, with the same certificates and the same etcd, and waits until it
// answers its health check.
func (c *ControlPlane) StartAPIServer() error {
	if err := c.env.ControlPlane.APIServer.Start(); err != nil {
		return fmt.Errorf("starting kube-apiserver again: %w", err)
	}
	return nil
}

// Kubeconfig is a kubeconfig file's content that reaches the API server as
// user, a member of system:masters, for programs run in another process
// (the controller binary). Its client certificate stays valid across
// StopAPIServer and StartAPIServer.
func (c *ControlPlane) Kubeconfig(user string) ([]byte, error) {
	u, err := c.env.ControlPlane.AddUser(envtest.User{Name: user, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, fmt.Errorf("adding user %s: %w", user, err)
	}
	return u.KubeConfig()
}

// copyFiles copies the regular files of dir src into dir dst.
func copyFiles(src, dst string) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}
