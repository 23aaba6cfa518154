//go:build bench

package churn

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/backendslice/backendslice/internal/sliceplan"
	"github.com/backendslice/backendslice/test/controlplane"
	"github.com/backendslice/backendslice/test/docsection"
)

// watchers is how many watchers stand in for nodes.
var watchers = flag.Int("watchers", 100, "watchers standing in for nodes in the fan-out benchmark")

// nodes is the cluster size the bytes are extrapolated to.
const nodes = 5000

// countingConn counts the bytes read from a connection: what a watcher
// receives on the wire, TLS and HTTP/2 framing included.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.n.Add(int64(n))
	return n, err
}

// watcher is one stand-in node: a watch of the backend's slices over a
// connection of its own, in protobuf as kube-proxy asks.
type watcher struct {
	received atomic.Int64
	events   atomic.Int64
	w        watch.Interface
	// view is what the first watcher sees: address -> serving.
	view chan map[string]bool
}

// startWatcher watches the slices of Service db in ns from resourceVersion rv.
// The first watcher (keepView) keeps its view of the slices, starting from
// those of the list at rv.
func startWatcher(ctx context.Context, cfg *rest.Config, ns string, list *discoveryv1.EndpointSliceList, keepView bool) (*watcher, error) {
	rv := list.ResourceVersion
	w := &watcher{}
	c := rest.CopyConfig(cfg)
	c.ContentType = "application/vnd.kubernetes.protobuf"
	c.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	c.QPS, c.Burst = -1, 0
	dialer := &net.Dialer{}
	c.Dial = func(ctx context.Context, network, address string) (net.Conn, error) {
		conn, err := dialer.DialContext(ctx, network, address)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: conn, n: &w.received}, nil
	}
	cs, err := kubernetes.NewForConfig(c)
	if err != nil {
		return nil, err
	}
	w.w, err = cs.DiscoveryV1().EndpointSlices(ns).Watch(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + serviceName, ResourceVersion: rv,
	})
	if err != nil {
		return nil, err
	}
	if keepView {
		w.view = make(chan map[string]bool, 1)
		w.view <- map[string]bool{}
	}
	go func() {
		slices := map[string]*discoveryv1.EndpointSlice{}
		for i := range list.Items {
			slices[list.Items[i].Name] = &list.Items[i]
		}
		for ev := range w.w.ResultChan() {
			w.events.Add(1)
			if w.view == nil {
				continue
			}
			s, ok := ev.Object.(*discoveryv1.EndpointSlice)
			if !ok {
				continue
			}
			if ev.Type == watch.Deleted {
				delete(slices, s.Name)
			} else {
				slices[s.Name] = s
			}
			view := map[string]bool{}
			for _, sl := range slices {
				for _, ep := range sl.Endpoints {
					view[ep.Addresses[0]] = ep.Conditions.Serving == nil || *ep.Conditions.Serving
				}
			}
			<-w.view
			w.view <- view
		}
	}()
	return w, nil
}

// countingWriter counts the writes a writer's client sends.
type countingWriter struct {
	rt     http.RoundTripper
	writes *atomic.Int64
}

// RoundTrip counts the slice writes (POST, PUT, DELETE) it sends.
func (c countingWriter) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodGet && strings.Contains(r.URL.Path, "/endpointslices") {
		c.writes.Add(1)
	}
	return c.rt.RoundTrip(r)
}

// FanoutRow is one sequence applied by one writer on the real API server.
type FanoutRow struct {
	Sequence, Writer string
	Writes           int64
	// PerWatcher is the mean bytes a watcher received during the sequence.
	PerWatcher float64
	// Events is the watch events each watcher received.
	Events int64
	// APIServerCPU is the API server's CPU time during the sequence.
	APIServerCPU time.Duration
	Wall         time.Duration
}

// fanoutWriters are the writers compared, in report order.
var fanoutWriters = []string{"ours", "ours without churn-aware placement", "upstream"}

// TestFanoutReport applies the realistic sequences and the uniform flapping
// one (seed 1, IPv4) by each writer on a real API server, with watchers
// counting the bytes they receive, and writes the fan-out section of
// docs/benchmarks.md and docs/fanout.svg.
func TestFanoutReport(t *testing.T) {
	cp, err := controlplane.StartWith(controlplane.SingleStackServiceCIDRs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	ctx := context.Background()
	admin, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	var rows []FanoutRow
	for i, s := range append(realistic[:len(realistic):len(realistic)], flapping) {
		seq := s.sequence(1)
		for j, name := range fanoutWriters {
			ns := fmt.Sprintf("fanout-%d-%d", i, j)
			row, err := fanout(ctx, cp.Config, admin, ns, seq, name)
			if err != nil {
				t.Fatalf("%s, %s: %v", seq.Name, name, err)
			}
			t.Logf("%-45s %-36s writes %5d  per watcher %9.1f KiB  events %5d  API server CPU %6s  wall %s",
				row.Sequence, row.Writer, row.Writes, row.PerWatcher/1024, row.Events, row.APIServerCPU, row.Wall.Round(time.Millisecond))
			rows = append(rows, row)
		}
	}
	var svg bytes.Buffer
	writeFanoutChart(&svg, rows)
	if err := os.WriteFile(filepath.Join(*docs, "fanout.svg"), svg.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := docsection.Replace(filepath.Join(*docs, "benchmarks.md"), "fanout", fanoutMarkdown(rows, "fanout.svg")); err != nil {
		t.Fatal(err)
	}
}

// fanout applies seq by the named writer in namespace ns with the watchers
// on, and measures.
func fanout(ctx context.Context, cfg *rest.Config, admin kubernetes.Interface, ns string, seq Sequence, name string) (FanoutRow, error) {
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return FanoutRow{}, err
	}
	var writes atomic.Int64
	wc := rest.CopyConfig(cfg)
	wc.QPS, wc.Burst = -1, 0
	wc.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return countingWriter{rt: rt, writes: &writes} }
	client, err := kubernetes.NewForConfig(wc)
	if err != nil {
		return FanoutRow{}, err
	}
	var w writer
	switch name {
	case fanoutWriters[0]:
		w = onClient(client, ns, false, churn)
	case fanoutWriters[1]:
		w = onClient(client, ns, false, sliceplan.Churn{})
	default:
		if w, err = upstreamOn(client, ns, false); err != nil {
			return FanoutRow{}, err
		}
	}
	var epoch time.Time
	if err := w.sync(ctx, seq.Setup, epoch); err != nil {
		return FanoutRow{}, fmt.Errorf("setup: %w", err)
	}
	list, err := admin.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return FanoutRow{}, err
	}
	ws := make([]*watcher, *watchers)
	for k := range ws {
		if ws[k], err = startWatcher(ctx, cfg, ns, list, k == 0); err != nil {
			return FanoutRow{}, err
		}
		defer ws[k].w.Stop()
	}
	time.Sleep(time.Second) // the watches are established
	before := make([]int64, len(ws))
	for k, x := range ws {
		before[k] = x.received.Load()
	}
	writes.Store(0)
	cpu0, _, err := controlplane.CPU()
	if err != nil {
		return FanoutRow{}, err
	}
	start := time.Now()
	for i, st := range seq.Steps {
		if err := w.sync(ctx, st, epoch.Add(time.Duration(i+1)*seq.Gap)); err != nil {
			return FanoutRow{}, fmt.Errorf("step %d: %w", i, err)
		}
		// The same changes visible at the same time: the first watcher sees
		// the step's state before the next step starts.
		if err := waitView(ws[0], st); err != nil {
			return FanoutRow{}, fmt.Errorf("step %d: %w", i, err)
		}
	}
	n := writes.Load()
	deadline := time.Now().Add(time.Minute)
	for _, x := range ws {
		for x.events.Load() < n {
			if time.Now().After(deadline) {
				return FanoutRow{}, fmt.Errorf("a watcher received %d events of %d writes", x.events.Load(), n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	wall := time.Since(start)
	cpu1, _, err := controlplane.CPU()
	if err != nil {
		return FanoutRow{}, err
	}
	var total int64
	for k, x := range ws {
		total += x.received.Load() - before[k]
	}
	return FanoutRow{Sequence: seq.Name, Writer: name, Writes: n, PerWatcher: float64(total) / float64(len(ws)),
		Events: ws[0].events.Load(), APIServerCPU: cpu1 - cpu0, Wall: wall}, nil
}

// waitView waits until the first watcher sees st: every backend's address,
// serving as st says.
func waitView(w *watcher, st state) error {
	want := map[string]bool{}
	for _, b := range st {
		want[v4(b.id)] = b.serving
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		view := <-w.view
		w.view <- view
		if len(view) == len(want) && equalViews(view, want) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the watcher sees %d endpoints, not the %d of the step", len(view), len(want))
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func equalViews(a, b map[string]bool) bool {
	for k, v := range b {
		if got, ok := a[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// fanoutMarkdown is the fan-out section.
func fanoutMarkdown(rows []FanoutRow, chart string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `## Fan-out: bytes to every watching node, ours against upstream

Generated by `+"`make bench-churn`"+` (TestFanoutReport); do not edit by hand.

Every change to an EndpointSlice is sent whole to every watcher: each node's
kube-proxy, each mesh sidecar. Each sequence (seed 1, IPv4; the first five are the
realistic ones of the churn section, the last the uniform flapping one) is applied on
a real kube-apiserver (envtest) by three writers in one run, each in a namespace of its
own: **ours** (the planner with churn-aware placement, as the controller runs it),
**ours without** churn-aware placement (today's planner) and **upstream**'s reconciler.
%d watchers stand in for nodes: each watches the slices over a connection of its own,
in protobuf as kube-proxy asks, and counts the bytes it reads from the socket (TLS and
HTTP/2 framing included). After every step the first watcher must see the step's state
(every address, serving as the step says) before the next step is applied: the same
changes are visible at the same time, none held back. **Writes** are the slice writes
the writer sent; **per watcher** the mean bytes a watcher received during the sequence;
**5,000 nodes** is per watcher times 5,000, an extrapolation, not a measurement; **API
server CPU** is the kube-apiserver's user+system time during the sequence
(`+"`/proc/<pid>/stat`"+`), serving the writes and the %d watches.

| sequence | writer | writes | per watcher | 5,000 nodes (extrapolated) | vs upstream (writes, bytes) | API server CPU |
| --- | --- | ---: | ---: | ---: | ---: | ---: |
`, *watchers, *watchers)
	up := map[string]FanoutRow{}
	for _, r := range rows {
		if r.Writer == "upstream" {
			up[r.Sequence] = r
		}
	}
	for _, r := range rows {
		u := up[r.Sequence]
		fmt.Fprintf(&b, "| %s | %s | %d | %.1f KiB | %.1f MiB | %.2f, %.3f | %s |\n", r.Sequence, r.Writer, r.Writes, r.PerWatcher/1024,
			r.PerWatcher*nodes/(1<<20), float64(r.Writes)/float64(max(1, u.Writes)), r.PerWatcher/max(1, u.PerWatcher), r.APIServerCPU.Round(10*time.Millisecond))
	}
	fmt.Fprintf(&b, "\n![bytes per watcher per sequence: ours, ours without churn-aware placement, upstream](%s)\n\nMachine: %s.\n", chart, Machine())
	return b.String()
}

// writeFanoutChart draws bytes per watcher as horizontal bars, log scale, in SVG.
func writeFanoutChart(w *bytes.Buffer, rows []FanoutRow) {
	const labelW, barW, barH = 330, 420, 12
	colours := map[string]string{fanoutWriters[0]: "#1f77b4", fanoutWriters[1]: "#9467bd", fanoutWriters[2]: "#ff7f0e"}
	maxV := 1.0
	for _, r := range rows {
		maxV = max(maxV, r.PerWatcher)
	}
	length := func(v float64) float64 { return math.Log10(1+v) / math.Log10(1+maxV) * barW }
	height := 40 + len(rows)*(barH+2) + (len(rows)/3)*8
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", labelW+barW+120, height)
	fmt.Fprintf(w, `<text x="4" y="14">Bytes received per watcher over each sequence (log scale): ours, ours without churn-aware placement, upstream</text>`+"\n")
	y := 28
	for i, r := range rows {
		if i%3 == 0 {
			fmt.Fprintf(w, `<text x="4" y="%d">%s</text>`+"\n", y+10, r.Sequence)
		}
		fmt.Fprintf(w, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"><title>%s</title></rect>`+"\n", labelW, y, max(1, length(r.PerWatcher)), barH, colours[r.Writer], r.Writer)
		fmt.Fprintf(w, `<text x="%.1f" y="%d">%.1f KiB</text>`+"\n", float64(labelW)+length(r.PerWatcher)+4, y+10, r.PerWatcher/1024)
		y += barH + 2
		if i%3 == 2 {
			y += 8
		}
	}
	fmt.Fprintf(w, "</svg>\n")
}
