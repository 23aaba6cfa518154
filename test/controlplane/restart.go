package controlplane

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// StopAPIServer stops kube-apiserver and leaves etcd running, so that
// StartAPIServer brings back the same objects at the same resource
// versions. It sends SIGTERM, and SIGKILL if the API server is still there
// after grace, as the kubelet does after a Pod's grace period: with
// clients watching, kube-apiserver waits for their streams to end before
// it exits, which (its shutdown timeout being a minute) can take longer
// than a test wants to wait.
//
// envtest keeps the API server's serving certificate in a directory it
// removes on Stop and makes again, with a new CA, on Start: clients made
// before the restart (a controller's kubeconfig among them) would then
// refuse the new certificate. So the certificates are copied into certDir
// first, and the API server starts again from there. certDir is an empty
// directory that the caller owns and removes once the control plane has
// stopped for good.
func (c *ControlPlane) StopAPIServer(certDir string, grace time.Duration) error {
	s := c.env.ControlPlane.APIServer
	if s == nil || s.CertDir == "" {
		return errors.New("the API server is not running")
	}
	if s.CertDir != certDir {
		if err := copyFiles(s.CertDir, certDir); err != nil {
			return fmt.Errorf("keeping the API server's certificates: %w", err)
		}
	}
	// envtest's own Stop waits 20 s after SIGTERM; signal the process
	// here, with the grace asked for, and let Stop find it gone.
	pid, err := processWithArg("--cert-dir=" + s.CertDir)
	if err != nil {
		return err
	}
	if err := stopProcess(pid, grace); err != nil {
		return fmt.Errorf("stopping kube-apiserver (pid %d): %w", pid, err)
	}
	// envtest notes the exit just after it reaps the process: a Stop in
	// between tries to signal it and fails; the next one finds it gone.
	if err := s.Stop(); err != nil {
		time.Sleep(100 * time.Millisecond)
		if err := s.Stop(); err != nil {
			return fmt.Errorf("stopping kube-apiserver: %w", err)
		}
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

// processWithArg finds the one running process whose command line has arg
// (the API server's certificate directory is unique to it).
func processWithArg(arg string) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, fmt.Errorf("finding kube-apiserver: %w", err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue // gone meanwhile
		}
		for _, a := range bytes.Split(cmdline, []byte{0}) {
			if string(a) == arg {
				return pid, nil
			}
		}
	}
	return 0, fmt.Errorf("no process runs with %s", arg)
}

// stopProcess sends SIGTERM to pid, SIGKILL after grace, and waits until
// the process is gone (envtest, its parent, reaps it).
func stopProcess(pid int, grace time.Duration) error {
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return err
	}
	const reapTimeout = 10 * time.Second
	killAt, giveUp := time.Now().Add(grace), time.Now().Add(grace+reapTimeout)
	killed := false
	for syscall.Kill(pid, 0) == nil {
		switch now := time.Now(); {
		case now.After(giveUp):
			return fmt.Errorf("still there %s after SIGKILL", reapTimeout)
		case !killed && now.After(killAt):
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				return err
			}
			killed = true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
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
