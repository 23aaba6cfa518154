package noisy

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/controllers"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// bareWrites is how many writes in a row a bare client makes for one
// timed change: as many as a victim's create to Ready takes at the least
// (its create; the controller's Service, slice and status patch).
const bareWrites = 4

// bareStepLabel holds the number of the bare client's last write on its
// slice, so that the watch sees when the last one has arrived.
const bareStepLabel = "bench.backendslice.dev/bare-write"

// newBareClient is a client of its own, with no client-side limit: what
// the API server and the machine allow, and nothing of the controller's.
func newBareClient(t *testing.T) client.Client {
	t.Helper()
	scheme, err := controllers.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(framework.E().Config())
	cfg.QPS, cfg.Burst = -1, 0
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// runBare times n changes of the bare client in the victim's namespace,
// with the quiet victim's pause before each: the API server's own pace in
// the phase, which no controller beats. A zero deadline means none.
func runBare(t *testing.T, w *watcher, c client.Client, phase string, n int, deadline time.Time) []time.Duration {
	t.Helper()
	var took []time.Duration
	for i := range n {
		if !deadline.IsZero() && time.Now().After(deadline) {
			t.Logf("%s, bare client: deadline reached after %d of %d changes", phase, i, n)
			break
		}
		time.Sleep(*quietGap)
		took = append(took, timeBare(t, w, c, fmt.Sprintf("bare-%s-%d", phase, i)))
	}
	t.Logf("%s, bare client: %d changes of %d writes: p50 %s p99 %s", phase, len(took), bareWrites, pct(took, 50), pct(took, 99))
	return took
}

// timeBare creates a Service and an EndpointSlice of it and updates the
// slice until bareWrites writes are made, each after the one before, and
// times them until the watch sees the last; both are deleted after,
// untimed. The slice is not the controller's (no managed-by of ours) and
// the Service has no ExternalBackend: the controller leaves both alone.
func timeBare(t *testing.T, w *watcher, c client.Client, name string) time.Duration {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: victimNS, Name: name},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "tcp", Port: 5432}}},
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: victimNS, Name: name, Labels: map[string]string{
			discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "bench-bare-client", bareStepLabel: "2",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{newAddrs[0]}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("tcp"), Port: ptr.To[int32](5432)}},
	}
	start := time.Now()
	for _, obj := range []client.Object{svc, slice} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatalf("bare client: creating %s: %v", name, err)
		}
	}
	for step := 3; step <= bareWrites; step++ {
		slice.Labels[bareStepLabel] = strconv.Itoa(step)
		slice.Endpoints[0].Conditions.Ready = ptr.To(step%2 == 0)
		if err := c.Update(ctx, slice); err != nil {
			t.Fatalf("bare client: updating %s: %v", name, err)
		}
	}
	at, err := w.until(*opTimeout, func(r client.Reader) error {
		var seen discoveryv1.EndpointSlice
		if err := r.Get(ctx, client.ObjectKeyFromObject(slice), &seen); err != nil {
			return err
		}
		if got := seen.Labels[bareStepLabel]; got != strconv.Itoa(bareWrites) {
			return fmt.Errorf("slice %s at write %s", name, got)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("bare client: %v", err)
	}
	for _, obj := range []client.Object{slice, svc} {
		if err := c.Delete(ctx, obj); err != nil {
			t.Fatalf("bare client: deleting %s: %v", name, err)
		}
	}
	return at.Sub(start)
}
