//go:build bench

package scale

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/cmd/backendslice/wiring"
	"github.com/backendslice/backendslice/controllers/externalbackend"
	"github.com/backendslice/backendslice/internal/publish"
	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/providers/static"
	"github.com/backendslice/backendslice/test/bench/benchspec"
)

// scenario is a set of ExternalBackends and the 10% change made to them.
type scenario struct {
	Name, Description, Change string
	// backends builds the specs in namespace ns; changed gives the spec after
	// the change.
	backends func(ns string, changed bool) []*v1alpha1.ExternalBackend
}

// scenarios are (a) one backend of 10,000 IPv4 endpoints in 10 static
// sources (the CRD caps a source at 1000 endpoints) and (b) 2,000 dual-stack
// backends of 5 endpoints each.
var scenarios = []scenario{
	{
		Name:        "a",
		Description: "1 ExternalBackend, 10,000 IPv4 endpoints (10 static sources of 1,000), maxEndpointsPerSlice 100",
		Change:      "the first 100 addresses of each source replaced (1,000 of 10,000)",
		backends: func(ns string, changed bool) []*v1alpha1.ExternalBackend {
			xb := benchspec.Backend(ns, "big", []v1alpha1.AddressType{v1alpha1.AddressTypeIPv4})
			xb.Spec.MaxEndpointsPerSlice = ptr.To[int32](100)
			for s := range 10 {
				var eps []v1alpha1.StaticEndpoint
				for i := s * 1000; i < (s+1)*1000; i++ {
					net := 0
					if changed && i%1000 < 100 {
						net = 1
					}
					eps = append(eps, benchspec.Endpoint(fmt.Sprintf("10.%d.%d.%d", net, i/250, i%250+1)))
				}
				xb.Spec.Sources = append(xb.Spec.Sources, v1alpha1.Source{
					Name: fmt.Sprintf("s%d", s), Static: &v1alpha1.StaticSource{Endpoints: eps},
				})
			}
			return []*v1alpha1.ExternalBackend{xb}
		},
	},
	{
		Name:        "b",
		Description: "2,000 ExternalBackends, 5 endpoints each, dual-stack (3 IPv4 + 2 IPv6)",
		Change:      "one IPv4 address replaced in every other backend (1,000 of 10,000)",
		backends: func(ns string, changed bool) []*v1alpha1.ExternalBackend {
			out := make([]*v1alpha1.ExternalBackend, 2000)
			for j := range out {
				xb := benchspec.Backend(ns, fmt.Sprintf("b%04d", j), []v1alpha1.AddressType{v1alpha1.AddressTypeIPv4, v1alpha1.AddressTypeIPv6})
				var eps []v1alpha1.StaticEndpoint
				for m := range 3 {
					k := j*3 + m
					net := 2
					if changed && m == 0 && j%2 == 0 {
						net = 3
					}
					eps = append(eps, benchspec.Endpoint(fmt.Sprintf("10.%d.%d.%d", net, k/250, k%250+1)))
				}
				for m := range 2 {
					eps = append(eps, benchspec.Endpoint(fmt.Sprintf("2001:db8::%x:%x", j, m+1)))
				}
				xb.Spec.Sources = []v1alpha1.Source{{Name: "fixed", Static: &v1alpha1.StaticSource{Endpoints: eps}}}
				out[j] = xb
			}
			return out
		},
	},
}

// want maps each Service name to the addresses its slices must publish, in
// the canonical form the slices have them (2001:db8::0:1 is 2001:db8::1).
func want(xbs []*v1alpha1.ExternalBackend) map[string][]string {
	out := map[string][]string{}
	for _, xb := range xbs {
		for _, s := range xb.Spec.Sources {
			for _, e := range s.Static.Endpoints {
				out[xb.Name] = append(out[xb.Name], netip.MustParseAddr(e.Address).String())
			}
		}
	}
	return out
}

// converged tells why the backends of ns are not yet all Ready for their
// generation with exactly the wanted addresses in their slices, or nil.
func converged(ctx context.Context, c client.Reader, ns string, addrs map[string][]string) error {
	var xbs v1alpha1.ExternalBackendList
	if err := c.List(ctx, &xbs, client.InNamespace(ns)); err != nil {
		return err
	}
	if len(xbs.Items) != len(addrs) {
		return fmt.Errorf("%d backends, want %d", len(xbs.Items), len(addrs))
	}
	var notReady []string
	for _, xb := range xbs.Items {
		r := meta.FindStatusCondition(xb.Status.Conditions, v1alpha1.ConditionReady)
		if r == nil || r.Status != metav1.ConditionTrue || r.ObservedGeneration != xb.Generation || xb.Status.ObservedGeneration != xb.Generation {
			notReady = append(notReady, xb.Name)
		}
	}
	if len(notReady) > 0 {
		return fmt.Errorf("%d backends not Ready for their generation, first %s", len(notReady), notReady[0])
	}
	var sl discoveryv1.EndpointSliceList
	if err := c.List(ctx, &sl, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelManagedBy: v1alpha1.ManagedByValue}); err != nil {
		return err
	}
	got := map[string][]string{}
	for _, s := range sl.Items {
		svc := s.Labels[discoveryv1.LabelServiceName]
		for _, e := range s.Endpoints {
			got[svc] = append(got[svc], e.Addresses...)
		}
	}
	for svc, w := range addrs {
		g := got[svc]
		slices.Sort(g)
		w = slices.Sorted(slices.Values(w))
		if !slices.Equal(g, w) {
			return fmt.Errorf("slices of %s publish %d addresses, want %d", svc, len(g), len(w))
		}
	}
	return nil
}

// waitConverged checks converged every 250 ms until it holds, telling what
// is missing every half minute.
func waitConverged(ctx context.Context, t *testing.T, c client.Reader, ns string, addrs map[string][]string, timeout time.Duration) error {
	start := time.Now()
	lastLog := start
	for {
		err := converged(ctx, c, ns, addrs)
		if err == nil {
			return nil
		}
		if time.Since(start) > timeout {
			return fmt.Errorf("not converged after %s: %w", timeout, err)
		}
		if time.Since(lastLog) > 30*time.Second {
			t.Logf("%s after %s: %v", ns, time.Since(start).Round(time.Second), err)
			lastLog = time.Now()
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// planned is the Service and slices the controller would write for one
// backend, as externalbackend.Render computes them, and the slices as the bare
// client created them.
type planned struct {
	svc     *corev1.Service
	slices  []*discoveryv1.EndpointSlice
	created []*discoveryv1.EndpointSlice
}

// plan renders the objects of every backend, moved to namespace ns. Our
// backend label is taken off so that the controller's watches ignore them,
// and the Service's owner reference, as no ExternalBackend owns it.
func plan(ctx context.Context, xbs []*v1alpha1.ExternalBackend, ns string, cfg externalbackend.Config) ([]planned, error) {
	out := make([]planned, 0, len(xbs))
	for _, xb := range xbs {
		var results []publish.SourceResult
		for _, src := range xb.Spec.Sources {
			res, err := static.New().Resolve(ctx, providers.Request{Namespace: ns, Backend: xb.Name, Source: src, AddressTypes: xb.Spec.AddressTypes})
			if err != nil {
				return nil, err
			}
			results = append(results, publish.SourceResult{Name: src.Name, Endpoints: res.Endpoints})
		}
		xb := xb.DeepCopy()
		xb.Namespace = ns
		svc, sl, dropped, err := externalbackend.Render(wiring.Kinds(), xb, results, cfg, publish.ClusterNetworks{})
		if err != nil {
			return nil, err
		}
		if len(dropped) > 0 {
			return nil, fmt.Errorf("%s: %d addresses dropped", xb.Name, len(dropped))
		}
		delete(svc.Labels, v1alpha1.BackendLabel)
		svc.OwnerReferences = nil
		for _, s := range sl {
			delete(s.Labels, v1alpha1.BackendLabel)
		}
		out = append(out, planned{svc: svc, slices: sl})
	}
	return out, nil
}

// eachBackend runs step for backends 0..n-1, as many at once as the
// controller has workers (-concurrent), and sums the objects the steps
// wrote.
func eachBackend(ctx context.Context, n int, step func(ctx context.Context, i int) (int, error)) (int, error) {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(*workers)
	var writes atomic.Int64
	for i := range n {
		g.Go(func() error {
			wrote, err := step(ctx, i)
			writes.Add(int64(wrote))
			return err
		})
	}
	err := g.Wait()
	return int(writes.Load()), err
}

// createAll issues the minimal creates: each Service, then the slices it
// owns, one after another.
func createAll(ctx context.Context, c client.Client, ps []planned) (int, error) {
	return eachBackend(ctx, len(ps), func(ctx context.Context, i int) (int, error) {
		return createOne(ctx, c, &ps[i])
	})
}

// createOne creates one backend's Service, then its slices.
func createOne(ctx context.Context, c client.Client, p *planned) (int, error) {
	svc := p.svc.DeepCopy()
	if err := c.Create(ctx, svc); err != nil {
		return 0, fmt.Errorf("creating Service %s: %w", svc.Name, err)
	}
	for _, s := range p.slices {
		s := s.DeepCopy()
		for i := range s.OwnerReferences {
			s.OwnerReferences[i].UID = svc.UID
		}
		if err := c.Create(ctx, s); err != nil {
			return 0, fmt.Errorf("creating slice of %s: %w", svc.Name, err)
		}
		p.created = append(p.created, s)
	}
	return 1 + len(p.slices), nil
}

// createAllWithStatus makes createAll's writes, then patches the status
// of each backend of xbs (ps[i] is xbs[i]'s), as the controller's one
// patch of a new backend would.
func createAllWithStatus(ctx context.Context, c client.Client, ps []planned, xbs []*v1alpha1.ExternalBackend) (int, error) {
	return eachBackend(ctx, len(ps), func(ctx context.Context, i int) (int, error) {
		n, err := createOne(ctx, c, &ps[i])
		if err != nil {
			return n, err
		}
		return n, patchReady(ctx, c, xbs[i], &ps[i])
	})
}

// patchReady patches xb's status as the controller does once p is
// published: Ready for its generation, with its counts.
func patchReady(ctx context.Context, c client.Client, xb *v1alpha1.ExternalBackend, p *planned) error {
	before := xb.DeepCopy()
	endpoints := int32(len(want([]*v1alpha1.ExternalBackend{xb})[xb.Name]))
	now := metav1.Now()
	xb.Status = v1alpha1.ExternalBackendStatus{
		ObservedGeneration: xb.Generation,
		ServiceName:        p.svc.Name,
		Slices:             int32(len(p.slices)),
		Endpoints:          v1alpha1.EndpointCounts{Total: endpoints, Ready: endpoints, Serving: endpoints},
		Conditions: []metav1.Condition{{
			Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonReady,
			ObservedGeneration: xb.Generation, LastTransitionTime: now,
		}},
		Sources: []v1alpha1.SourceStatus{{Name: "fixed", Kind: "static", Endpoints: endpoints, LastSuccessTime: &now}},
	}
	if err := c.Status().Patch(ctx, xb, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("patching the status of %s: %w", xb.Name, err)
	}
	return nil
}

// updateAll issues the minimal updates for a change from the addresses of
// before to those of after (by Service name): each removed address is
// swapped in place for an added one of its family, so that only the slices
// that held a removed address are written.
func updateAll(ctx context.Context, c client.Client, ps []planned, before, after map[string][]string) (int, error) {
	return eachBackend(ctx, len(ps), func(ctx context.Context, i int) (int, error) {
		return updateOne(ctx, c, &ps[i], before, after)
	})
}

// updateAllWithStatus makes updateAll's writes, then patches the status of
// each backend whose slices changed (xbs[i], at its new generation, is
// ps[i]'s), as the controller's one patch of a change would.
func updateAllWithStatus(ctx context.Context, c client.Client, ps []planned, xbs []*v1alpha1.ExternalBackend, before, after map[string][]string) (int, error) {
	return eachBackend(ctx, len(ps), func(ctx context.Context, i int) (int, error) {
		n, err := updateOne(ctx, c, &ps[i], before, after)
		if err != nil || n == 0 {
			return n, err
		}
		return n, patchReady(ctx, c, xbs[i], &ps[i])
	})
}

// updateOne swaps one backend's replaced addresses in place.
func updateOne(ctx context.Context, c client.Client, p *planned, before, after map[string][]string) (int, error) {
	swap := swaps(before[p.svc.Name], after[p.svc.Name])
	n := 0
	for _, s := range p.created {
		changed := false
		for i := range s.Endpoints {
			if to, ok := swap[s.Endpoints[i].Addresses[0]]; ok {
				s.Endpoints[i].Addresses[0], changed = to, true
			}
		}
		if !changed {
			continue
		}
		if err := c.Update(ctx, s); err != nil {
			return n, fmt.Errorf("updating slice %s: %w", s.Name, err)
		}
		n++
	}
	return n, nil
}

// onlyIn lists the addresses of a that b lacks, by family (true for IPv4),
// in a's order.
func onlyIn(a, b []string) map[bool][]string {
	inB := sets.New(b...)
	out := map[bool][]string{}
	for _, addr := range a {
		if !inB.Has(addr) {
			is4 := netip.MustParseAddr(addr).Is4()
			out[is4] = append(out[is4], addr)
		}
	}
	return out
}

// swaps pairs the addresses only in before with those only in after, family
// by family, in order.
func swaps(before, after []string) map[string]string {
	removed, added := onlyIn(before, after), onlyIn(after, before)
	out := map[string]string{}
	for family, from := range removed {
		for i, a := range from {
			out[a] = added[family][i]
		}
	}
	return out
}
