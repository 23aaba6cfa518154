package chaos_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/e2e/framework"
	"github.com/backendslice/backendslice/test/replica"
)

// faultAPIServer is the report's name of the API server restart.
func faultAPIServer() string {
	return fmt.Sprintf("kube-apiserver stopped and started while %d backends converge", *backends)
}

// apiServerGrace is how long kube-apiserver may take to stop after SIGTERM
// before it is killed: it waits up to a minute for the controller's
// watches to end, and a restart that slow would only make the test slower.
const apiServerGrace = 3 * time.Second

// TestAPIServerRestartMidSync creates -backends ExternalBackends (static,
// both families, drain 2s), and once the controller has written the
// Services of a quarter of them, stops kube-apiserver (etcd keeps running)
// for one to four seconds and starts it again on the same address. The
// controller is not restarted: it must recover by itself, stay up, and
// bring every backend to the invariants.
func TestAPIServerRestartMidSync(t *testing.T) {
	ns := namespace(t)
	rng := newRand(t)
	r := newReplica(t, "controller")
	r.Start()
	for i := range *backends {
		env.world.createBackend(t, replica.Backend(ns, fmt.Sprintf("b%03d", i), 2*time.Second,
			replica.StaticSource("vms", ip4(i%3, i/3), ip4((i+1)%3, i/3), ip6(10+i/200, i%200))))
	}
	// Mid-sync: a quarter of the Services written, the rest to come.
	var synced int
	framework.Eventually(t, convergeTimeout, "a quarter of the backends' Services", func() error {
		var list corev1.ServiceList
		if err := framework.E().Client.List(context.Background(), &list, client.InNamespace(ns), client.HasLabels{v1alpha1.BackendLabel}); err != nil {
			return err
		}
		if synced = len(list.Items); synced*4 < *backends {
			return fmt.Errorf("%d of %d", synced, *backends)
		}
		return nil
	})
	time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)

	cp := framework.E().ControlPlane()
	running := true
	t.Cleanup(func() {
		// Never leave the API server down for the tests after this one.
		if !running {
			if err := cp.StartAPIServer(); err != nil {
				t.Errorf("starting kube-apiserver again: %v", err)
			}
		}
	})
	stopped := time.Now()
	env.world.down(stopped)
	running = false
	if err := cp.StopAPIServer(env.certDir, apiServerGrace); err != nil {
		t.Fatal(err)
	}
	down := time.Second + time.Duration(rng.IntN(3000))*time.Millisecond
	time.Sleep(down)
	if err := cp.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	running = true
	up := time.Now()
	env.world.up(up)
	t.Logf("kube-apiserver stopped with %d of %d Services written, for %s (%s with its restart)",
		synced, *backends, down, up.Sub(stopped).Round(time.Millisecond))
	env.ledger.note(faultAPIServer(), "stopped once %d of %d Services were written; down %s (stop to healthy again). "+
		"The backends still to write then take their turns within the controller's request budget (--kube-api-qps, --kube-api-burst; "+
		"the defaults here), one for all its clients: the time to converge is mostly that budget", synced, *backends, up.Sub(stopped).Round(100*time.Millisecond))

	r.RequireRunning()
	converge(t, faultAPIServer(), up, ns)
	r.RequireRunning()
}
