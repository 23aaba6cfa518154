// Package consistency checks, on a real kube-apiserver, that the controller
// never publishes an endpoint in two of its slices: not with a stale cache,
// not with two instances writing at once without leader election. It also
// checks zone hints. The tests run their controller instances themselves,
// so that they decide when each one reconciles and what its cache shows.
package consistency

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/cmd/backendslice/wiring"
	"github.com/backendslice/backendslice/controllers"
	"github.com/backendslice/backendslice/controllers/externalbackend"
	"github.com/backendslice/backendslice/providers/static"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

func TestMain(m *testing.M) {
	os.Exit(framework.Run(m, framework.Options{ControlPlaneOnly: true}))
}

// ctx is the context of API calls in tests.
var ctx = context.Background()

// newManager returns a manager for one controller instance, without leader
// election. Several instances run in this process, so controller-runtime's
// check that controller names are unique is off (controllers.ManagerOptions
// has no such option, hence a manager of our own).
func newManager(t *testing.T) ctrl.Manager {
	t.Helper()
	scheme, err := controllers.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(framework.E().Config(), ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	return mgr
}

// newReconciler registers the controller with mgr, reading and writing
// through c, with the static provider and the test configuration.
func newReconciler(t *testing.T, mgr ctrl.Manager, c client.Client) *externalbackend.Reconciler {
	t.Helper()
	reg, err := wiring.Kinds().NewRegistry(static.New())
	if err != nil {
		t.Fatal(err)
	}
	metrics, err := externalbackend.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	r := &externalbackend.Reconciler{
		Client:    c,
		APIReader: mgr.GetAPIReader(),
		// The managers of these tests are never started: the API
		// server's own slices are read directly.
		HostsReader: directClient(t),
		Events:      mgr.GetEventRecorder("backendslice"),
		Providers:   reg,
		Config:      framework.TestConfig(),
		Metrics:     metrics,
	}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	return r
}

// startInstance runs a controller instance until the test ends.
func startInstance(t *testing.T) {
	t.Helper()
	mgr := newManager(t)
	newReconciler(t, mgr, mgr.GetClient())
	run, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(run) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("controller instance: %v", err)
		}
	})
}

// directClient reads and writes the API server with no cache in between.
func directClient(t *testing.T) client.WithWatch {
	t.Helper()
	scheme, err := controllers.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.NewWithWatch(framework.E().Config(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return labelIndexed{c}
}

// labelIndexed serves the controller cache's index by backend, a field
// selector the API server does not know, as the label selector it stands
// for, so that the direct client can stand for a cache.
type labelIndexed struct{ client.WithWatch }

func (c labelIndexed) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	lo := (&client.ListOptions{}).ApplyOptions(opts)
	if lo.FieldSelector != nil {
		if v, ok := lo.FieldSelector.RequiresExactMatch(externalbackend.BackendIndex); ok {
			lo.FieldSelector = nil
			lo.LabelSelector = labels.SelectorFromSet(labels.Set{v1alpha1.BackendLabel: v})
			return c.WithWatch.List(ctx, list, lo)
		}
	}
	return c.WithWatch.List(ctx, list, opts...)
}

// backend is an ExternalBackend with a static source of endpoints and port 5432.
func backend(ns, name string, eps []v1alpha1.StaticEndpoint) *v1alpha1.ExternalBackend {
	return &v1alpha1.ExternalBackend{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.ExternalBackendSpec{
			Service: v1alpha1.ServiceSpec{Ports: []v1alpha1.ServicePort{{Name: "pg", Port: 5432}}},
			Sources: []v1alpha1.Source{{Name: "fixed", Static: &v1alpha1.StaticSource{Endpoints: eps}}},
		},
	}
}

// addresses are n addresses of a documentation range, from 1 up:
// prefix is "192.0.2." or "198.51.100.".
func addresses(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i+1)
	}
	return out
}

// static are healthy static endpoints of addrs.
func staticEndpoints(addrs ...string) []v1alpha1.StaticEndpoint {
	out := make([]v1alpha1.StaticEndpoint, len(addrs))
	for i, a := range addrs {
		out[i] = v1alpha1.StaticEndpoint{Address: a, Health: v1alpha1.HealthHealthy}
	}
	return out
}

// setEndpoints replaces the backend's static endpoints.
func setEndpoints(t *testing.T, xb *v1alpha1.ExternalBackend, eps []v1alpha1.StaticEndpoint) {
	t.Helper()
	if err := framework.Update(t, xb, func(cur *v1alpha1.ExternalBackend) {
		cur.Spec.Sources[0].Static.Endpoints = eps
	}); err != nil {
		t.Fatal(err)
	}
}

// duplicates watches the slices of one Service and checks every state the
// API server went through: events of one namespace arrive in the order they
// were committed, so applying them one by one replays each state.
type duplicates struct {
	stop func()
	done chan struct{}

	mu       sync.Mutex
	stopping bool
	states   int
	found    []string
	err      error
}

// watchDuplicates starts watching our slices of svc in ns; call check at the end.
func watchDuplicates(t *testing.T, ns, svc string) *duplicates {
	t.Helper()
	w, err := directClient(t).Watch(ctx, &discoveryv1.EndpointSliceList{}, client.InNamespace(ns),
		client.MatchingLabelsSelector{Selector: labels.SelectorFromSet(labels.Set{
			discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: v1alpha1.ManagedByValue,
		})})
	if err != nil {
		t.Fatal(err)
	}
	d := &duplicates{stop: w.Stop, done: make(chan struct{})}
	go d.run(w)
	t.Cleanup(w.Stop)
	return d
}

func (d *duplicates) run(w watch.Interface) {
	defer close(d.done)
	live := map[types.UID]discoveryv1.EndpointSlice{}
	for ev := range w.ResultChan() {
		s, ok := ev.Object.(*discoveryv1.EndpointSlice)
		d.mu.Lock()
		if !ok {
			// Stopping the watch ends it with an error event.
			if d.stopping {
				d.mu.Unlock()
				continue
			}
			d.err = errors.Join(d.err, fmt.Errorf("watch: unexpected %s event: %w", ev.Type, apierrors.FromObject(ev.Object)))
			d.mu.Unlock()
			continue
		}
		if ev.Type == watch.Deleted {
			delete(live, s.UID)
		} else {
			live[s.UID] = *s
		}
		all := make([]discoveryv1.EndpointSlice, 0, len(live))
		for _, s := range live {
			all = append(all, s)
		}
		d.states++
		if _, err := framework.Published(all); err != nil {
			d.found = append(d.found, fmt.Sprintf("after %s of %s (resourceVersion %s): %v", ev.Type, s.Name, s.ResourceVersion, err))
		}
		d.mu.Unlock()
	}
}

// check stops watching and fails the test if any state held an address twice.
func (d *duplicates) check(t *testing.T) {
	t.Helper()
	d.mu.Lock()
	d.stopping = true
	d.mu.Unlock()
	d.stop()
	<-d.done
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.err != nil {
		t.Error(d.err)
	}
	if d.states == 0 {
		t.Error("no slice state observed")
	}
	for _, f := range d.found {
		t.Errorf("an address in two slices %s", f)
	}
	t.Logf("%d slice states observed", d.states)
}
