package framework

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/test/controlplane"
	"github.com/backendslice/backendslice/test/netlab"
)

// The Service ranges of the data-path suites: documentation blocks, so
// that every cluster IP the API server gives is a test address too.
const (
	LabServiceRange4 = "198.51.100.0/24"
	LabServiceRange6 = "2001:db8:5::/112"
)

// LabServiceRanges are the Service ranges of a data-path suite on the stack
// controlplane.StackEnv chooses: IPv4 only on a single-stack run.
func LabServiceRanges() string {
	if os.Getenv(controlplane.StackEnv) == "single" {
		return LabServiceRange4
	}
	return LabServiceRange4 + "," + LabServiceRange6
}

// RunWithLab is a TestMain body for a data-path suite: it starts the
// control plane with LabServiceRanges (opts.ServiceCIDRs is set to them)
// and the controller, builds a lab (test/netlab) whose node routes those
// ranges, and calls started with it and a directory for the logs of what
// started runs there (kube-proxy and the like) before the tests. After the
// tests the lab is closed before the control plane stops, and the
// directory is removed unless something failed.
func RunWithLab(m *testing.M, opts Options, started func(e *Env, lab *netlab.Lab, logs string) error) int {
	opts.ServiceCIDRs = LabServiceRanges()
	logs, err := os.MkdirTemp("", "netlab-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var lab *netlab.Lab
	var closeErr error
	opts.Started = func(e *Env) error {
		var prefixes []netip.Prefix
		for _, r := range strings.Split(opts.ServiceCIDRs, ",") {
			prefixes = append(prefixes, netip.MustParsePrefix(r))
		}
		var err error
		if lab, err = netlab.New(func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }, prefixes...); err != nil {
			return fmt.Errorf("the data-path tests build network namespaces and cannot run without them: %w", err)
		}
		return started(e, lab, logs)
	}
	opts.Stopping = func() {
		if lab != nil {
			closeErr = lab.Close()
		}
	}
	code := Run(m, opts)
	if closeErr != nil {
		fmt.Fprintln(os.Stderr, "removing the lab's namespaces:", closeErr)
		code = max(code, 1)
	}
	if code == 0 {
		_ = os.RemoveAll(logs)
	} else {
		fmt.Fprintln(os.Stderr, "the logs of the lab's programs are in", logs)
	}
	return code
}

// StartKubeProxy registers node with the API server, with the lab node's
// bridge addresses as its InternalIPs, and runs bin/kube-proxy as that node
// in the lab's node namespace, with a kubeconfig (written to
// logs/kubeconfig, and returned) that reaches the API server from there.
// It returns once kube-proxy has programmed its first rules and, when node
// has a zone label, once its proxiers have taken that zone. (kube-proxy
// waits 30 s for a Node without addresses before it starts.)
//
// The zone label is added only after kube-proxy is up. kube-proxy 1.37
// adds its topology handler to a Node informer that is already running and
// only then registers the proxier with it, so the informer's replay of the
// Node can run first and record the zone with nobody told; the proxier then
// ignores every hint for good ("node is missing label"). A label that
// changes after start-up always reaches the proxier.
func StartKubeProxy(ctx context.Context, e *Env, lab *netlab.Lab, node *corev1.Node, logs string) (kubeconfig string, err error) {
	zone, hasZone := node.Labels[corev1.LabelTopologyZone]
	delete(node.Labels, corev1.LabelTopologyZone)
	if err := e.Client.Create(ctx, node); err != nil {
		return "", fmt.Errorf("registering node %s: %w", node.Name, err)
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: netlab.NodeAddr4.String()}}
	if DualStack() {
		node.Status.Addresses = append(node.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: netlab.NodeAddr6.String()})
	}
	if err := e.Client.Status().Update(ctx, node); err != nil {
		return "", fmt.Errorf("giving node %s its addresses: %w", node.Name, err)
	}
	bin, err := LabBinary("kube-proxy")
	if err != nil {
		return "", err
	}
	kubeconfig = filepath.Join(logs, "kubeconfig")
	if err := lab.Kubeconfig(e.Config(), kubeconfig); err != nil {
		return "", err
	}
	kubeProxyLog := filepath.Join(logs, "kube-proxy.log")
	if _, err := lab.KubeProxy(ctx, bin, kubeconfig, node.Name, logs); err != nil {
		return "", errors.Join(err, errors.New("kube-proxy's log: "+kubeProxyLog))
	}
	if !hasZone {
		return kubeconfig, nil
	}
	patch := client.MergeFrom(node.DeepCopy())
	metav1.SetMetaDataLabel(&node.ObjectMeta, corev1.LabelTopologyZone, zone)
	if err := e.Client.Patch(ctx, node, patch); err != nil {
		return "", fmt.Errorf("labelling node %s with its zone: %w", node.Name, err)
	}
	return kubeconfig, waitForZone(ctx, kubeProxyLog, zone)
}

// waitForZone waits until every proxier in kube-proxy's log (one per
// family) says it took zone, which it logs at the verbosity lab.KubeProxy
// gives proxier.go.
func waitForZone(ctx context.Context, kubeProxyLog, zone string) error {
	taken := fmt.Sprintf(`"Updated proxier node topology labels" ipFamily=%%q labels={%q:%q}`, corev1.LabelTopologyZone, zone)
	families := []string{"IPv4"}
	if DualStack() {
		families = append(families, "IPv6")
	}
	missing := ""
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
		text, err := os.ReadFile(kubeProxyLog)
		if err != nil {
			return false, err
		}
		missing = ""
		for _, family := range families {
			if !strings.Contains(string(text), fmt.Sprintf(taken, family)) {
				missing = family
			}
		}
		return missing == "", nil
	})
	if err != nil && missing != "" {
		return fmt.Errorf("kube-proxy's %s proxier never took zone %s (look for %q in %s): %w",
			missing, zone, "Updated proxier node topology labels", kubeProxyLog, err)
	}
	return err
}

// LabBinary is the path of bin/name, which `make dataplane` builds.
func LabBinary(name string) (string, error) {
	return controlplane.Binary(name, "dataplane")
}
