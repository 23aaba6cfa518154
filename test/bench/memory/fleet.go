//go:build bench

// Package memory is the memory benchmark (`make bench-memory`): the live
// heap and RSS of the controller per 1,000 backends and per 10,000
// endpoints on a real API server, and what its informer-cache transforms
// save, written into the memory section of docs/benchmarks-scale.md.
package memory

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/bench/benchspec"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// fleetBackend is backend j of the fleet, as the scale benchmark's.
func fleetBackend(ns string, j int) *v1alpha1.ExternalBackend {
	return benchspec.Small(ns, "b", j)
}

// bigBackend is backend k of the endpoint phase: n IPv4 endpoints in
// static sources of at most 1,000 (the CRD's cap), 100 to a slice, as
// scenario (a) of the scale benchmark. Each k has its own /16.
func bigBackend(ns string, k, n int) *v1alpha1.ExternalBackend {
	xb := benchspec.Backend(ns, fmt.Sprintf("big%d", k), []v1alpha1.AddressType{v1alpha1.AddressTypeIPv4})
	xb.Spec.MaxEndpointsPerSlice = ptr.To[int32](100)
	for i := 0; i < n; i += 1000 {
		var eps []v1alpha1.StaticEndpoint
		for a := i; a < min(n, i+1000); a++ {
			eps = append(eps, benchspec.Endpoint(fmt.Sprintf("10.%d.%d.%d", 20+k, a/250, a%250+1)))
		}
		xb.Spec.Sources = append(xb.Spec.Sources, v1alpha1.Source{
			Name: fmt.Sprintf("s%d", i/1000), Static: &v1alpha1.StaticSource{Endpoints: eps},
		})
	}
	return xb
}

// lastApplied is the annotation in which client-side apply (kubectl apply,
// Argo CD by default) keeps the manifest it applied.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// applied is xb as client-side apply writes it: with its manifest (kind,
// name, namespace and spec) in the lastApplied annotation.
func applied(xb *v1alpha1.ExternalBackend) (*v1alpha1.ExternalBackend, error) {
	manifest, err := json.Marshal(struct {
		metav1.TypeMeta
		Metadata map[string]string            `json:"metadata"`
		Spec     v1alpha1.ExternalBackendSpec `json:"spec"`
	}{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "ExternalBackend"},
		Metadata: map[string]string{"name": xb.Name, "namespace": xb.Namespace},
		Spec:     xb.Spec,
	})
	if err != nil {
		return nil, err
	}
	xb.Annotations = map[string]string{lastApplied: string(manifest)}
	return xb, nil
}

// specWriters is how many creates the test has in flight, as a GitOps tool
// applying a large commit would.
const specWriters = 8

// createBackends creates the backends build gives for indexes from to to-1,
// specWriters at a time. It builds each spec when it sends it, so that the
// test holds no fleet of specs of its own.
func createBackends(ctx context.Context, from, to int, build func(int) *v1alpha1.ExternalBackend) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(specWriters)
	for j := from; j < to; j++ {
		g.Go(func() error {
			xb := build(j)
			if err := framework.E().Client.Create(ctx, xb); err != nil {
				return fmt.Errorf("creating %s: %w", xb.Name, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// pageSize bounds each list of the convergence checks: the test reads the
// fleet a page at a time rather than caching it, so that it holds none of
// it when it measures.
const pageSize = 500

// eachPage lists objects of list's kind in ns a page at a time and calls
// visit with each page.
func eachPage(ctx context.Context, ns string, list client.ObjectList, visit func(), opts ...client.ListOption) error {
	cont := ""
	for {
		o := append([]client.ListOption{client.InNamespace(ns), client.Limit(pageSize), client.Continue(cont)}, opts...)
		if err := framework.E().Client.List(ctx, list, o...); err != nil {
			return err
		}
		visit()
		if cont = list.GetContinue(); cont == "" {
			return nil
		}
	}
}

// notReady tells how many of the n backends of ns are not yet Ready for
// their generation (observedGeneration too), counting missing ones.
func notReady(ctx context.Context, ns string, n int) (int, error) {
	ready := 0
	var page v1alpha1.ExternalBackendList
	err := eachPage(ctx, ns, &page, func() {
		for _, xb := range page.Items {
			r := meta.FindStatusCondition(xb.Status.Conditions, v1alpha1.ConditionReady)
			if r != nil && r.Status == metav1.ConditionTrue && r.ObservedGeneration == xb.Generation && xb.Status.ObservedGeneration == xb.Generation {
				ready++
			}
		}
	})
	return n - ready, err
}

// checkSlices tells how the slices of ns differ from want (addresses by
// Service name, in canonical form), or nil.
func checkSlices(ctx context.Context, ns string, want map[string][]string) error {
	got := map[string][]string{}
	var page discoveryv1.EndpointSliceList
	err := eachPage(ctx, ns, &page, func() {
		for _, s := range page.Items {
			svc := s.Labels[discoveryv1.LabelServiceName]
			for _, e := range s.Endpoints {
				got[svc] = append(got[svc], e.Addresses...)
			}
		}
	}, client.MatchingLabels{discoveryv1.LabelManagedBy: v1alpha1.ManagedByValue})
	if err != nil {
		return err
	}
	if len(got) != len(want) {
		return fmt.Errorf("slices for %d Services, want %d", len(got), len(want))
	}
	for svc, w := range want {
		g := slices.Sorted(slices.Values(got[svc]))
		if w = slices.Sorted(slices.Values(w)); !slices.Equal(g, w) {
			return fmt.Errorf("slices of %s publish %d addresses, want %d", svc, len(g), len(w))
		}
	}
	return nil
}

// addresses are the addresses the slices of the backends build gives for
// indexes 0 to n-1 must publish, by Service name, in canonical form and
// only of the families the API server serves.
func addresses(n int, build func(int) *v1alpha1.ExternalBackend) map[string][]string {
	out := make(map[string][]string, n)
	for j := range n {
		xb := build(j)
		for _, s := range xb.Spec.Sources {
			for _, e := range s.Static.Endpoints {
				out[xb.Name] = append(out[xb.Name], framework.Served(netip.MustParseAddr(e.Address).String())...)
			}
		}
	}
	return out
}

// convergeTimeout bounds each wait for the controller.
const convergeTimeout = 10 * time.Minute

// waitConverged waits until the n backends build gives for ns are all
// Ready for their generation, then checks once that their slices publish
// exactly their addresses. The first check is a paged count every 2 s,
// the second one pass over the slices: the fleet is read, never held.
func waitConverged(ctx context.Context, t *testing.T, ns string, n int, build func(int) *v1alpha1.ExternalBackend) {
	t.Helper()
	start, lastLog := time.Now(), time.Now()
	for {
		left, err := notReady(ctx, ns, n)
		if err != nil {
			t.Fatal(err)
		}
		if left == 0 {
			break
		}
		if time.Since(start) > convergeTimeout {
			t.Fatalf("%s: %d of %d backends not Ready for their generation after %s", ns, left, n, convergeTimeout)
		}
		if time.Since(lastLog) > 30*time.Second {
			t.Logf("%s after %s: %d of %d backends not Ready yet", ns, time.Since(start).Round(time.Second), left, n)
			lastLog = time.Now()
		}
		time.Sleep(2 * time.Second)
	}
	if err := checkSlices(ctx, ns, addresses(n, build)); err != nil {
		t.Fatalf("%s: every backend is Ready but %v", ns, err)
	}
	t.Logf("%s: %d backends converged in %s", ns, n, time.Since(start).Round(time.Second))
}

// namespace creates namespace name.
func namespace(t *testing.T, name string) string {
	t.Helper()
	if err := framework.E().Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	return name
}

// addServiceCIDR adds room for thousands of Services: the control plane's
// own range is a /24. No kube-controller-manager runs to mark it Ready; the
// API server's allocator takes a ServiceCIDR without conditions as ready.
func addServiceCIDR(t *testing.T) {
	t.Helper()
	cidrs := []string{"10.100.0.0/16"}
	if framework.DualStack() {
		cidrs = append(cidrs, "fd00:10:100::/112")
	}
	cidr := &networkingv1.ServiceCIDR{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-memory"},
		Spec:       networkingv1.ServiceCIDRSpec{CIDRs: cidrs},
	}
	if err := framework.E().Client.Create(context.Background(), cidr); err != nil {
		t.Fatal(err)
	}
}
