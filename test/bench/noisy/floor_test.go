//go:build !bench

package noisy

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// TestSliceSizeFloor: a backend asking for one endpoint a slice (the
// attack's lever: 250 addresses made 250 slices, each rewritten at every
// change) gets the controller's floor of 10 instead, and its Synced
// condition names the floor and its flag.
func TestSliceSizeFloor(t *testing.T) {
	const ns, name, provider = "floor", "tiny-slices", "floor-static"
	ctx := context.Background()
	k8s := framework.E().Client
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	createProvider(t, provider, []string{ns}, "198.51.100.0/24")
	addrs := make([]string, 20)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("198.51.100.%d", i+1)
	}
	xb := backend(ns, name, provider, addrs...)
	xb.Spec.MaxEndpointsPerSlice = ptr.To[int32](1)
	framework.Create(t, xb)

	const want = "spec.maxEndpointsPerSlice 1 is raised to the controller's floor of 10 (--min-endpoints-per-slice)"
	deadline := time.Now().Add(framework.Timeout)
	for {
		err := floorApplied(ctx, k8s, ns, name, want, len(addrs))
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// floorApplied checks that the backend's slices hold 10 endpoints each and
// that its Synced condition says why.
func floorApplied(ctx context.Context, c client.Reader, ns, name, want string, total int) error {
	var list discoveryv1.EndpointSliceList
	if err := c.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{v1alpha1.BackendLabel: name}); err != nil {
		return err
	}
	n := 0
	for _, s := range list.Items {
		if len(s.Endpoints) != 10 {
			return fmt.Errorf("slice %s holds %d endpoints, want 10", s.Name, len(s.Endpoints))
		}
		n += len(s.Endpoints)
	}
	if n != total || len(list.Items) != total/10 {
		return fmt.Errorf("%d endpoints in %d slices, want %d in %d", n, len(list.Items), total, total/10)
	}
	var xb v1alpha1.ExternalBackend
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &xb); err != nil {
		return err
	}
	synced := meta.FindStatusCondition(xb.Status.Conditions, v1alpha1.ConditionSynced)
	if synced == nil || synced.Status != metav1.ConditionTrue || !strings.Contains(synced.Message, want) {
		return fmt.Errorf("Synced is %+v, want True naming %q", synced, want)
	}
	return nil
}
