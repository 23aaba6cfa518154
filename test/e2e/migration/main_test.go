// Package migration_test moves hand-written Services onto ExternalBackends
// (spec.service.adopt) while a client on a cluster node connects to their
// cluster IPs every few milliseconds through the real kube-proxy (nftables
// mode, in a network namespace of test/netlab), and checks that no
// connection fails, that the cluster IP stays, and that the ready endpoints
// across every slice of the Service never drop below the starting set.
//
// kube-controller-manager runs beside it with two controllers: the
// EndpointSlice mirror, which turns a legacy Endpoints object into the
// slices kube-proxy reads (and removes them when the object goes), and the
// garbage collector, which carries out an orphaning delete (the rollback).
//
// It is a package of its own so that it runs in parallel with the other
// suites (test/e2e/datapath builds its own lab).
package migration_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/providers/static"
	"github.com/backendslice/backendslice/test/e2e/framework"
	"github.com/backendslice/backendslice/test/netlab"
)

// nodeName is the node kube-proxy runs as.
const nodeName = "node-m"

// echoPort is where the hosts' name-and-echo servers listen.
const echoPort = 5000

// hostNames are the three backend hosts the hand-written objects list.
var hostNames = []string{"h1", "h2", "h3"}

var (
	lab   *netlab.Lab
	hosts []*netlab.Host
)

func TestMain(m *testing.M) {
	os.Exit(framework.RunWithLab(m, framework.Options{
		Providers: func(providers.Waker) ([]providers.Provider, error) {
			return []providers.Provider{static.New()}, nil
		},
	}, startLab))
}

// startLab adds the three hosts to the lab, and starts kube-proxy and
// kube-controller-manager in its node.
func startLab(e *framework.Env, l *netlab.Lab, logs string) error {
	lab = l
	for _, name := range hostNames {
		h, err := lab.AddHost(name)
		if err != nil {
			return err
		}
		if err := h.ServeTCP(echoPort); err != nil {
			return fmt.Errorf("host %s: %w", name, err)
		}
		hosts = append(hosts, h)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kubeconfig, err := framework.StartKubeProxy(ctx, e, lab, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}, logs)
	if err != nil {
		return err
	}
	bin, err := framework.LabBinary("kube-controller-manager")
	if err != nil {
		return err
	}
	kcm, err := lab.ControllerManager(bin, kubeconfig, logs, kcmControllers...)
	if err != nil {
		return err
	}
	if err := controllersWork(ctx, e, kcm); err != nil {
		return errors.Join(err, errors.New("kube-controller-manager's log: "+filepath.Join(logs, "kube-controller-manager.log")))
	}
	return nil
}

// kcmControllers are the controllers of kube-controller-manager the
// migrations need: the mirror (legacy Endpoints to slices) and the garbage
// collector (orphaning deletes).
var kcmControllers = []string{"endpointslice-mirroring-controller", "garbage-collector-controller"}
