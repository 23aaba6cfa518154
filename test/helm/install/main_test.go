// Package install installs the backendslice chart into a real kube-apiserver
// with the Helm Go SDK and proves its RBAC: the controller, run under the
// chart's ServiceAccount through impersonation, passes the end-to-end
// scenarios; the same identity may read Secrets in the release namespace
// alone and is refused everything else; and every rule the chart grants is
// shown to be needed by taking it away. The kustomize base (config/default)
// is applied the same way, and the controller binary run from its
// Deployment (TestKustomizeBase).
//
// The controller runs in a child process (this test binary, started again):
// controller-runtime allows one controller of a name per process, and each
// rule taken away needs a controller of its own.
package install

import (
	"fmt"
	"os"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/kube"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/controllers"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

func TestMain(m *testing.M) {
	if kubeconfig := os.Getenv(childKubeconfigEnv); kubeconfig != "" {
		os.Exit(runChildController(kubeconfig, os.Getenv(childLeaseNamespaceEnv)))
	}
	os.Exit(framework.Run(m, framework.Options{ControlPlaneOnly: true}))
}

// identity is a ServiceAccount the controller runs as.
type identity struct{ namespace, name string }

// user is the name the API server authenticates the ServiceAccount as.
func (id identity) user() string {
	return fmt.Sprintf("system:serviceaccount:%s:%s", id.namespace, id.name)
}

// config reaches the API server as id, by impersonation: the API server
// then authorises every request against id's RBAC, and adds the groups a
// ServiceAccount token would carry.
func (id identity) config() *rest.Config {
	cfg := rest.CopyConfig(framework.E().Config())
	cfg.Impersonate = rest.ImpersonationConfig{UserName: id.user()}
	return cfg
}

// client is a client that acts as id.
func (id identity) client(t *testing.T) client.Client {
	t.Helper()
	scheme, err := controllers.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(id.config(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// helmConfig is Helm's configuration for namespace ns of the test's API
// server, as an administrator, with releases stored in Secrets as the helm
// CLI stores them.
func helmConfig(t *testing.T, ns string) *action.Configuration {
	t.Helper()
	cfg := new(action.Configuration)
	getter := kube.GetConfig(framework.WriteKubeconfig(t, framework.E().Config()), "", ns)
	if err := cfg.Init(getter, ns, "secret", t.Logf); err != nil {
		t.Fatal(err)
	}
	return cfg
}
