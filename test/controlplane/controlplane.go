// Package controlplane starts a real kube-apiserver and etcd (built from Go
// modules by install.sh into bin/) with the ExternalBackend CRD installed,
// for the demo and the end-to-end tests.
package controlplane

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Service ranges of the two kinds of cluster the tests run on.
const (
	// DualStackServiceCIDRs give Services both IP families, as in a
	// dual-stack cluster.
	DualStackServiceCIDRs = "10.96.0.0/24,fd00:10:96::/112"
	// SingleStackServiceCIDRs give Services IPv4 only, as in most clusters
	// (EKS, GKE and kubeadm by default).
	SingleStackServiceCIDRs = "10.96.0.0/24"
)

// AdvertiseAddress is the API server's address in the endpoints of the
// Service default/kubernetes, which it writes itself. Left to choose, it
// takes the machine's own address, which may be one the tests publish as a
// backend (here, 192.0.2.2), and the controller denies endpoints at the API
// server's addresses. A documentation address no test publishes, instead:
// the API server only lists it, it serves on 127.0.0.1.
const AdvertiseAddress = "192.0.2.254"

// StackEnv chooses the kind of cluster Start runs: "single" for an IPv4-only
// API server, anything else (or unset) for a dual-stack one. `make test`
// runs the end-to-end suites once each way.
const StackEnv = "BACKENDSLICE_TEST_STACK"

// ServiceCIDRs are the Service ranges StackEnv chooses.
func ServiceCIDRs() string {
	if os.Getenv(StackEnv) == "single" {
		return SingleStackServiceCIDRs
	}
	return DualStackServiceCIDRs
}

// ControlPlane is a running kube-apiserver and etcd.
type ControlPlane struct {
	env *envtest.Environment
	// Config reaches the API server as an administrator.
	Config *rest.Config
}

// RepoRoot finds the repository root from the working directory, so that
// tests in any package find bin/ and config/.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "config", "crd", "bases")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no config/crd/bases above the working directory: run from inside the repository")
		}
		dir = parent
	}
}

// Start runs the control plane with the Service ranges StackEnv chooses.
func Start() (*ControlPlane, error) { return StartWith(ServiceCIDRs()) }

// StartWith runs the control plane with the given Service ranges (one
// range for a single-stack cluster, one of each family for a dual-stack
// one). Binaries come from $KUBEBUILDER_ASSETS, or bin/ in the repository
// (`make controlplane` puts them there).
func StartWith(serviceCIDRs string) (*ControlPlane, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join(root, "bin")
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, b)); err != nil {
			return nil, fmt.Errorf("%s not found in %s: run `make controlplane` first (it builds it from Go modules once)", b, assets)
		}
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		// envtest waits 20 s for each binary (five tries): on a machine
		// loaded by many suites at once, kube-apiserver once took longer
		// every time, and the package failed before any test ran.
		// KUBEBUILDER_CONTROLPLANE_START_TIMEOUT still overrides it.
		ControlPlaneStartTimeout: startTimeout(),
	}
	api := env.ControlPlane.GetAPIServer().Configure()
	api.Set("service-cluster-ip-range", serviceCIDRs)
	api.Set("advertise-address", AdvertiseAddress)
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting kube-apiserver and etcd: %w", err)
	}
	return &ControlPlane{env: env, Config: cfg}, nil
}

// startTimeout is how long each of etcd and kube-apiserver may take to
// start.
func startTimeout() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("KUBEBUILDER_CONTROLPLANE_START_TIMEOUT")); err == nil {
		return d
	}
	return 90 * time.Second
}

// Stop stops the API server and etcd and removes their data.
func (c *ControlPlane) Stop() error { return c.env.Stop() }

// CPU is the user and system time the kube-apiserver and etcd children of
// this process (envtest starts them) have used so far, from
// /proc/<pid>/stat, so that a benchmark tells the API server's work from
// its own.
func CPU() (apiserver, etcd time.Duration, err error) {
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		return 0, 0, err
	}
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // the process ended
		}
		// pid (comm) state ppid ... utime stime: comm may hold spaces, so
		// the fields are counted after its closing parenthesis.
		open, end := strings.IndexByte(string(b), '('), strings.LastIndexByte(string(b), ')')
		if open < 0 || end < open {
			continue
		}
		comm, f := string(b[open+1:end]), strings.Fields(string(b[end+1:]))
		if len(f) < 13 || f[1] != strconv.Itoa(os.Getpid()) {
			continue
		}
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		// Clock ticks (USER_HZ), 100 a second on Linux.
		took := time.Duration(utime+stime) * 10 * time.Millisecond
		switch comm {
		case "kube-apiserver":
			apiserver += took
		case "etcd":
			etcd += took
		}
	}
	if apiserver == 0 {
		return 0, 0, errors.New("no kube-apiserver child of this process in /proc")
	}
	return apiserver, etcd, nil
}
