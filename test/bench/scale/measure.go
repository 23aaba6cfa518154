//go:build bench

// Package scale is the scale benchmark (`make bench-scale`): the controller
// converging thousands of endpoints and backends on a real API server, next
// to a bare client making the fewest writes, written up in
// docs/benchmarks-scale.md.
package scale

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/providers/static"
	"github.com/backendslice/backendslice/test/bench/benchspec"
	"github.com/backendslice/backendslice/test/controlplane"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// counter counts the API requests of the clients whose transport it wraps,
// by verb.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

// wrap is for rest.Config.Wrap.
func (c *counter) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripper{c: c, next: next}
}

type roundTripper struct {
	c    *counter
	next http.RoundTripper
}

// RoundTrip counts the request and sends it on.
func (t roundTripper) RoundTrip(r *http.Request) (*http.Response, error) {
	t.c.mu.Lock()
	if t.c.n == nil {
		t.c.n = map[string]int{}
	}
	t.c.n[verb(r)+" "+resource(r.URL.Path)]++
	t.c.mu.Unlock()
	return t.next.RoundTrip(r)
}

// verb names a request as the API server's audit log would, except that a
// get and a list, both GETs, are counted together.
func verb(r *http.Request) string {
	switch r.Method {
	case http.MethodGet:
		if r.URL.Query().Get("watch") == "true" {
			return "watch"
		}
		return "get/list"
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		return "delete"
	}
	return strings.ToLower(r.Method)
}

// resource names what a request path is about: the resource, with its
// subresource (externalbackends/status); the namespace and name are left out.
func resource(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	// /api/v1/... or /apis/group/version/...
	rest := parts[min(len(parts), 2):]
	if parts[0] == "apis" {
		rest = parts[min(len(parts), 3):]
	}
	if len(rest) >= 2 && rest[0] == "namespaces" {
		rest = rest[2:]
	}
	switch len(rest) {
	case 0:
		return "namespaces"
	case 1, 2:
		return rest[0]
	default:
		return rest[0] + "/" + rest[2]
	}
}

// snapshot copies the counts.
func (c *counter) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.n))
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

// latencySamples is how many times a request is timed for its median.
const latencySamples = 21

// median is the median of durations, which it sorts.
func median(took []time.Duration) time.Duration {
	slices.Sort(took)
	return percentile(took, 50)
}

// percentile is the p-th percentile of sorted durations (nearest rank).
func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (p*len(sorted)+99)/100 - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// listLatency is how long a consistent, label-selected list of slices takes
// right after a write of another kind, and right after a slice write.
type listLatency struct {
	afterOtherWrite, afterSliceWrite time.Duration
	samples                          int
}

// measureLists times lists of slices in ns, each right after a ConfigMap
// create (another kind) or a slice create, as an administrator, and gives
// the medians.
func measureLists(ctx context.Context, t *testing.T, ns string) listLatency {
	t.Helper()
	c := framework.E().Client
	timed := func(write func() client.Object) time.Duration {
		var took []time.Duration
		for range latencySamples {
			if err := c.Create(ctx, write()); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			var list discoveryv1.EndpointSliceList
			if err := c.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: "none"}); err != nil {
				t.Fatal(err)
			}
			took = append(took, time.Since(start))
		}
		return median(took)
	}
	meta := metav1.ObjectMeta{Namespace: ns, GenerateName: "latency-"}
	return listLatency{
		afterOtherWrite: timed(func() client.Object { return &corev1.ConfigMap{ObjectMeta: meta} }),
		afterSliceWrite: timed(func() client.Object {
			return &discoveryv1.EndpointSlice{ObjectMeta: meta, AddressType: discoveryv1.AddressTypeIPv4}
		}),
		samples: latencySamples,
	}
}

// patchCost is what one status patch costs for a backend of few endpoints
// and for one of 10,000: the median time of the patch, and the API
// server's CPU time per patch.
type patchCost struct {
	small, large       time.Duration
	smallCPU, largeCPU time.Duration
	samples            int
}

// measurePatches times status patches, as the controller makes them (a
// merge patch of one field), of a suspended backend of 5 endpoints and of
// scenario a's backend of 10,000, in ns. Suspended backends get one status
// write from the controller and none after, so the test's patches are alone.
func measurePatches(ctx context.Context, t *testing.T, ns string) patchCost {
	t.Helper()
	c := framework.E().Client
	timed := func(xb *v1alpha1.ExternalBackend) (time.Duration, time.Duration) {
		xb.Spec.Suspend = true
		if err := c.Create(ctx, xb); err != nil {
			t.Fatal(err)
		}
		// The controller's one status write first: two writers of a large
		// object make each other retry.
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
			err := c.Get(ctx, client.ObjectKeyFromObject(xb), xb)
			return err == nil && xb.Status.ObservedGeneration == xb.Generation, err
		}); err != nil {
			t.Fatal(err)
		}
		var took []time.Duration
		before := serverCPU(t)
		for i := range latencySamples {
			patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"status":{"slices":%d}}`, i+1))
			start := time.Now()
			if err := c.Status().Patch(ctx, xb, patch); err != nil {
				t.Fatal(err)
			}
			took = append(took, time.Since(start))
		}
		return median(took), serverCPU(t).minus(before).apiserver / latencySamples
	}
	small := benchspec.Backend(ns, "small", []v1alpha1.AddressType{v1alpha1.AddressTypeIPv4})
	small.Spec.Sources = []v1alpha1.Source{{Name: "fixed", Static: &v1alpha1.StaticSource{Endpoints: []v1alpha1.StaticEndpoint{
		benchspec.Endpoint("192.0.2.1"), benchspec.Endpoint("192.0.2.2"), benchspec.Endpoint("192.0.2.3"), benchspec.Endpoint("192.0.2.4"), benchspec.Endpoint("192.0.2.5"),
	}}}}
	var out patchCost
	out.small, out.smallCPU = timed(small)
	out.large, out.largeCPU = timed(scenarios[0].backends(ns, false)[0])
	out.samples = latencySamples
	return out
}

// countingStatic is the static provider, counting its calls.
type countingStatic struct {
	static.Provider
	calls *atomic.Int64
}

// Resolve counts the call and resolves as the static provider does.
func (p countingStatic) Resolve(ctx context.Context, req providers.Request) (providers.Result, error) {
	p.calls.Add(1)
	return p.Provider.Resolve(ctx, req)
}

// writeKinds and writeVerbs are the labels of backendslice_writes_total.
var (
	writeKinds = []string{"Service", "EndpointSlice"}
	writeVerbs = []string{"create", "update", "delete"}
)

// sample is the controller's counters at one moment.
type sample struct {
	at            time.Time
	requests      map[string]int
	writes        map[string]float64 // by "kind verb"
	reconciles    float64
	providerCalls int64
	cpu           time.Duration
	// serverCPU is the CPU time of the control plane's processes.
	serverCPU controlPlaneCPU
}

// controlPlaneCPU is the user+system time of the API server and of etcd.
type controlPlaneCPU struct{ apiserver, etcd time.Duration }

func (c controlPlaneCPU) minus(o controlPlaneCPU) controlPlaneCPU {
	return controlPlaneCPU{apiserver: c.apiserver - o.apiserver, etcd: c.etcd - o.etcd}
}

// serverCPU reads the CPU time of this process's kube-apiserver and etcd
// children, so that a phase tells the API server's work from the
// controller's.
func serverCPU(t *testing.T) controlPlaneCPU {
	t.Helper()
	apiserver, etcd, err := controlplane.CPU()
	if err != nil {
		t.Fatal(err)
	}
	return controlPlaneCPU{apiserver: apiserver, etcd: etcd}
}

// take reads the counters: requests from c, the rest from the controller's
// metrics, the provider and the process.
func take(t *testing.T, c *counter, calls *atomic.Int64) sample {
	t.Helper()
	s := sample{at: time.Now(), requests: c.snapshot(), writes: map[string]float64{}, providerCalls: calls.Load(), cpu: cpuTime(t), serverCPU: serverCPU(t)}
	for _, k := range writeKinds {
		for _, v := range writeVerbs {
			s.writes[k+" "+v], _ = framework.MetricValue(t, "backendslice_writes_total", map[string]string{"kind": k, "verb": v})
		}
	}
	s.reconciles, _ = framework.MetricValue(t, "backendslice_reconciles_total", nil)
	return s
}

// phase is what happened between two samples.
type phase struct {
	Name          string
	Took          time.Duration
	Requests      map[string]int
	Writes        map[string]int
	Reconciles    int
	ProviderCalls int
	CPU           time.Duration
	// ServerCPU is the control plane's CPU time in the phase.
	ServerCPU controlPlaneCPU
	// PeakRSSKiB is the process's VmHWM when the phase ended.
	PeakRSSKiB int
	// SpecWrites is how long the test's own ExternalBackend creates or
	// updates took, inside Took: the API server's admission of the specs.
	SpecWrites time.Duration
}

func between(t *testing.T, name string, a, b sample) phase {
	t.Helper()
	p := phase{
		Name: name, Took: b.at.Sub(a.at), Requests: map[string]int{}, Writes: map[string]int{},
		Reconciles: int(b.reconciles - a.reconciles), ProviderCalls: int(b.providerCalls - a.providerCalls),
		CPU: b.cpu - a.cpu, ServerCPU: b.serverCPU.minus(a.serverCPU), PeakRSSKiB: peakRSS(t),
	}
	for k, v := range b.requests {
		if d := v - a.requests[k]; d != 0 {
			p.Requests[k] = d
		}
	}
	for k, v := range b.writes {
		if d := int(v - a.writes[k]); d != 0 {
			p.Writes[k] = d
		}
	}
	return p
}

// total sums counts.
func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// cpuTime is the user and system time of this process.
func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// peakRSS is this process's VmHWM in KiB.
func peakRSS(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal(fmt.Errorf("no VmHWM in /proc/self/status"))
	return 0
}
