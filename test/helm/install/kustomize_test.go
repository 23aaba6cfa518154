package install

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/controlplane"
	"github.com/backendslice/backendslice/test/e2e/framework"
	"github.com/backendslice/backendslice/test/kustomizetest"
)

// TestKustomizeBase applies the kustomize base (config/default, built with
// the kustomize library) to the API server as `kubectl apply -k` would, and
// runs the controller binary (cmd/backendslice, built from this checkout)
// with the Deployment's arguments and environment, under the base's
// ServiceAccount and RBAC: it answers its probes, serves its metrics over
// HTTPS to a token bound to the base's metrics-reader ClusterRole alone,
// takes its lease, makes a backend Ready through a BackendProvider, reads
// Secrets in its namespace alone, is refused nothing, and stops on SIGTERM.
func TestKustomizeBase(t *testing.T) {
	objs, err := kustomizetest.BuildDefault()
	if err != nil {
		t.Fatal(err)
	}
	applyAll(t, objs)
	runDeployment(t, buildBinary(t), objs)
}

// runDeployment runs the controller binary bin as the one Deployment of
// the installed objects objs would run it, under its ServiceAccount once
// the API server grants the RBAC of objs: it must answer its probes, take
// its lease, make a backend Ready through a BackendProvider, read Secrets
// in its namespace alone, be refused nothing, and stop on SIGTERM.
func runDeployment(t *testing.T, bin string, objs []*unstructured.Unstructured) {
	d, err := kustomizetest.Deployment(objs)
	if err != nil {
		t.Fatal(err)
	}
	ns := d.Namespace
	id := identity{namespace: ns, name: d.Spec.Template.Spec.ServiceAccountName}
	cluster, namespaced := rulesOfObjects(t, objs)
	waitGranted(t, id, ns, cluster, namespaced)

	c := d.Spec.Template.Spec.Containers[0]
	ctl := startBinary(t, bin, id, c, ns)
	t.Run("it answers its probes", func(t *testing.T) {
		for _, probe := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
			ctl.waitOK(t, ctl.health, probe.HTTPGet.Path)
		}
	})
	t.Run("its metrics answer only a token the metrics-reader role is bound to", func(t *testing.T) {
		checkMetricsAccess(t, ctl.metrics, metricsReader(t, objs))
	})
	t.Run("it leads and makes a backend Ready", func(t *testing.T) {
		backends := framework.Namespace(t)
		bp := createProvider(t, backends, "static", v1alpha1.BackendProviderSpec{
			Static: &v1alpha1.StaticProvider{}, Namespaces: v1alpha1.NamespaceSelection{Names: []string{backends}}, AllowedCIDRs: documentationRanges,
		})
		waitProvider(t, bp.Name, metav1.ConditionTrue, v1alpha1.ReasonProviderReady, "static")
		checkCore(t, startBackend(t, backends, namingProvider(bp.Name)))
		lease := &coordinationv1.Lease{}
		if err := framework.E().Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: leaseName}, lease); err != nil || lease.Spec.HolderIdentity == nil {
			t.Errorf("leader election lease in %s: %v, holder %v", ns, err, lease.Spec.HolderIdentity)
		}
	})
	t.Run("its ServiceAccount reads Secrets in its namespace alone", func(t *testing.T) {
		checkSecretAccess(t, id)
	})
	if !ctl.stop(stopGrace) {
		t.Errorf("the controller did not exit within %s of SIGTERM", stopGrace)
	}
	if err := ctl.exitErr; err != nil {
		t.Errorf("the controller exited with %v", err)
	}
	for _, line := range strings.Split(ctl.log.String(), "\n") {
		if strings.Contains(line, "forbidden") {
			t.Errorf("the API server refused the ServiceAccount %s: %s", id.user(), line)
		}
	}
}

// applyAll applies objs in order with server-side apply, as an
// administrator running `kubectl apply -k --server-side` would, and
// removes what it created (but the Namespace, which no namespace
// controller here would ever finish deleting, and the CRDs the control
// plane started with) when the test ends.
func applyAll(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, o := range objs {
		err := framework.E().Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()),
			client.FieldOwner("kubectl"), client.ForceOwnership)
		if err != nil {
			t.Fatalf("applying %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	t.Cleanup(func() {
		for _, o := range objs {
			if o.GetKind() == "Namespace" || o.GetKind() == "CustomResourceDefinition" {
				continue
			}
			deleteObject(t, o)
		}
	})
}

// binaryProcess is the controller binary running as the base's Deployment
// would run it.
type binaryProcess struct {
	cmd             *exec.Cmd
	log             lockedBuffer
	exited          chan struct{}
	exitErr         error
	health, metrics string
}

// startBinary runs the controller binary bin as id with container c's
// arguments and environment, as the kubelet would start it in a Pod of
// namespace ns, with the probe and metrics addresses moved to free ports
// of the loopback (the test machine is no Pod). It is killed when the test
// ends if it has not stopped.
func startBinary(t *testing.T, bin string, id identity, c corev1.Container, ns string) *binaryProcess {
	t.Helper()
	env, err := kustomizetest.Env(c, ns)
	if err != nil {
		t.Fatal(err)
	}
	args, err := kustomizetest.Args(c, env)
	if err != nil {
		t.Fatal(err)
	}
	p := &binaryProcess{exited: make(chan struct{})}
	p.health = localAddress(t, args, "--health-probe-bind-address", c, c.ReadinessProbe.HTTPGet.Port)
	p.metrics = localAddress(t, args, "--metrics-bind-address", c, intstr.FromString("metrics"))
	// The last of a flag given twice wins.
	args = append(args, "--health-probe-bind-address="+p.health, "--metrics-bind-address="+p.metrics)
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), "KUBECONFIG="+framework.WriteKubeconfig(t, id.config()))
	for k, v := range env {
		p.cmd.Env = append(p.cmd.Env, k+"="+v)
	}
	p.cmd.Stdout, p.cmd.Stderr = &p.log, &p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.exitErr = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.stop(stopGrace)
		if t.Failed() {
			t.Logf("controller (as %s) output:\n%s", id.user(), p.log.String())
		}
	})
	return p
}

// localAddress checks that flag in args binds the port container c names
// port (the one its probe or the metrics Service reaches), and returns a
// free address on the loopback to bind instead.
func localAddress(t *testing.T, args []string, flag string, c corev1.Container, port intstr.IntOrString) string {
	t.Helper()
	want := port.IntValue()
	for _, p := range c.Ports {
		if port.Type == intstr.String && p.Name == port.StrVal {
			want = int(p.ContainerPort)
		}
	}
	bound := ""
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			bound = v
		}
	}
	if _, got, _ := net.SplitHostPort(bound); got != strconv.Itoa(want) {
		t.Errorf("%s=%s, but the container's port %s is %d", flag, bound, port.String(), want)
	}
	return freeAddress(t)
}

// freeAddress is an address on the loopback that no one listens on now.
func freeAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// buildBinary builds cmd/backendslice from this checkout into a
// temporary directory.
func buildBinary(t *testing.T) string {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "backendslice")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/backendslice")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/backendslice: %v\n%s", err, b)
	}
	return out
}

// waitOK waits until GET http://addr/path answers 200.
func (p *binaryProcess) waitOK(t *testing.T, addr, path string) {
	t.Helper()
	client := &http.Client{Timeout: time.Second}
	framework.Eventually(t, framework.Timeout, "GET "+path+" answering 200", func() error {
		select {
		case <-p.exited:
			return fmt.Errorf("the controller exited: %w", p.exitErr)
		default:
		}
		resp, err := client.Get("http://" + addr + path)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		return nil
	})
}

// stop sends SIGTERM, as the kubelet does, and waits for the process; one
// that has not exited within grace is killed. It says whether the process
// exited on its own.
func (p *binaryProcess) stop(grace time.Duration) bool {
	return stopProcess(p.cmd.Process, p.exited, syscall.SIGTERM, grace)
}
