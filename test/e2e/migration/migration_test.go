package migration_test

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/importer"
	"github.com/backendslice/backendslice/test/e2e/framework"
	"github.com/backendslice/backendslice/test/netlab"
)

var (
	runs   = flag.Int("runs", 1, "migrations TestMigration runs of each kind (`make bench-migration` runs 20)")
	report = flag.String("report", "", "if set, the Markdown file (docs/benchmarks.md) whose migration section TestMigration rewrites")
)

// The hand-written Service: db, port echo 80 to the hosts' echoPort.
const (
	svcName     = "db"
	portName    = "echo"
	servicePort = 80
)

// settle is how long the client goes on after the last change of a
// migration: longer than kube-proxy's minSyncPeriod (1 s), so that the
// rules it programs after the last change carry connections too.
const settle = 2 * time.Second

// scenario is one way a Service is served by hand before it migrates.
type scenario struct {
	name string
	// what the hand-written side is, for the report.
	what string
	// before writes the hand-written objects of the Service in ns.
	before func(t *testing.T, ns string)
	// endpoints: the hand-written side is a legacy Endpoints object.
	endpoints bool
	// rollback: once adopted, the ExternalBackend is deleted with orphan
	// propagation, and the Service must go on serving from its slices.
	rollback bool
}

func scenarios() []scenario {
	return []scenario{
		{name: "Slices", what: "two hand-written EndpointSlices (one `managed-by: cluster-admins`, one without the label)", before: handWrittenSlices},
		{name: "Endpoints", what: "a legacy Endpoints object, mirrored into a slice by kube-controller-manager", before: legacyEndpoints, endpoints: true},
		{name: "Rollback", what: "as Slices, then the ExternalBackend deleted with `PropagationPolicy: Orphan`", before: handWrittenSlices, rollback: true},
	}
}

// TestMigration migrates hand-written Services onto ExternalBackends, -runs
// times for each scenario, with a client connecting to the cluster IP every
// 5 ms through kube-proxy from before the ExternalBackend (imported from
// the live namespace, as `backendslice import --adopt` does) is written
// until settle after the migration (and, for Rollback, the orphaning
// delete) is complete. Each run asserts: no connection failed; the Service
// kept its UID and cluster IP; the ready addresses across all slices of
// the Service never fell below the three hosts; no address stood in two of
// our slices; the hand-written slices, or the Endpoints object and the
// mirror's slices, are gone; and the three hosts still answer.
func TestMigration(t *testing.T) {
	results := map[string][]runResult{}
	for _, sc := range scenarios() {
		t.Run(sc.name, func(t *testing.T) {
			for i := range *runs {
				r := migrate(t, sc)
				if t.Failed() {
					t.Fatalf("run %d of %d failed", i+1, *runs)
				}
				results[sc.name] = append(results[sc.name], r)
			}
			t.Logf("%s: %s", sc.name, summary(results[sc.name]))
		})
	}
	if *report != "" && !t.Failed() {
		if err := writeReport(*report, results); err != nil {
			t.Fatal(err)
		}
	}
}

// runResult is what one migration measured.
type runResult struct {
	traffic netlab.ClientResult
	// From writing the ExternalBackend: to Adopted=True (polled every
	// 100 ms), to the last slice not ours going, to the Endpoints object
	// going (Endpoints only).
	adopted, othersGone, endpointsGone time.Duration
	// rolledBack is from the orphaning delete to the ExternalBackend
	// being gone (Rollback only).
	rolledBack time.Duration
	// clusterIPKept: the Service after the migration is the hand-written
	// one, with its cluster IP.
	clusterIPKept bool
	// lows and dups count the moments the watch saw fewer ready addresses
	// than at the start, or an address in two of our slices.
	lows, dups int
}

// migrate runs one migration of sc in a namespace of its own.
func migrate(t *testing.T, sc scenario) runResult {
	t.Helper()
	ns := framework.Namespace(t)
	svc := handWrittenService(t, ns)
	sc.before(t, ns)
	addr := netlab.HostPort(svc.Spec.ClusterIP, servicePort)
	waitServed(t, addr)

	w := watchService(t, ns, hostAddrs())
	tr := lab.Node.StartClient(addr, netlab.DefaultClientLimits())
	t.Cleanup(func() { tr.Stop(); w.stop() })
	xb := adopting(t, ns)
	start := time.Now()
	framework.Create(t, xb)
	framework.WaitCondition(t, xb, v1alpha1.ConditionAdopted, metav1.ConditionTrue, v1alpha1.ReasonAdopted)
	r := runResult{adopted: time.Since(start)}
	waitOthersGone(t, ns)
	if sc.rollback {
		r.rolledBack = rollBack(t, xb)
	}
	time.Sleep(settle)
	r.traffic = tr.Stop()
	seen := w.stop()

	checkTraffic(t, r.traffic)
	checkWatch(t, seen, sc)
	r.othersGone = seen.othersGone.Sub(start)
	if sc.endpoints {
		r.endpointsGone = seen.endpointsGone.Sub(start)
	}
	r.lows, r.dups = len(seen.lows), len(seen.dups)
	now := getService(t, ns)
	if r.clusterIPKept = now.UID == svc.UID && now.Spec.ClusterIP == svc.Spec.ClusterIP; !r.clusterIPKept {
		t.Errorf("Service %s (cluster IP %s) after the migration, want the hand-written one %s (cluster IP %s)", now.UID, now.Spec.ClusterIP, svc.UID, svc.Spec.ClusterIP)
	}
	if sc.rollback {
		checkRolledBack(t, now)
	}
	waitServed(t, addr)
	return r
}

// checkTraffic fails the test on a failed connection or a client that
// ended at its bound before the migration did.
func checkTraffic(t *testing.T, tr netlab.ClientResult) {
	t.Helper()
	if err := tr.Err(); err != nil {
		t.Errorf("the client during the migration: %v", err)
	}
}

// checkWatch fails the test on what the slices must never show, and when
// the hand-written side is not gone.
func checkWatch(t *testing.T, seen watchResult, sc scenario) {
	t.Helper()
	switch {
	case !seen.reached:
		t.Errorf("the watch never showed the three hosts ready")
	case len(seen.lows) > 0:
		t.Errorf("fewer addresses were ready across the Service's slices than before the migration: %v", seen.lows)
	}
	if len(seen.dups) > 0 {
		t.Errorf("an address stood in two of our slices: %v", seen.dups)
	}
	if seen.othersLeft > 0 || seen.othersGone.IsZero() {
		t.Errorf("%d hand-written or mirrored slice(s) left (the last went at %v)", seen.othersLeft, seen.othersGone)
	}
	if sc.endpoints && seen.endpointsGone.IsZero() {
		t.Error("the Endpoints object was not deleted")
	}
}

// checkRolledBack fails the test unless the Service, after the orphaning
// delete, has no owner and its slices (ours, owned by the Service) still
// publish the three hosts ready.
func checkRolledBack(t *testing.T, svc *corev1.Service) {
	t.Helper()
	if len(svc.OwnerReferences) > 0 {
		t.Errorf("the Service still names its owners %v after the orphaning delete", svc.OwnerReferences)
	}
	want := map[string]string{}
	for _, a := range hostAddrs() {
		want[a] = "true/true/false"
	}
	got, err := framework.States(framework.Slices(t, svc.Namespace, svc.Name))
	if err != nil || !maps.Equal(got, want) {
		t.Errorf("the slices after the rollback publish %v (%v), want %v", got, err, want)
	}
}

// rollBack deletes the ExternalBackend with orphan propagation and waits
// until it is gone: kube-controller-manager's garbage collector takes its
// owner reference off the Service first. It returns how long that took.
func rollBack(t *testing.T, xb *v1alpha1.ExternalBackend) time.Duration {
	t.Helper()
	c := framework.E().Client
	start := time.Now()
	if err := c.Delete(context.Background(), xb, client.PropagationPolicy(metav1.DeletePropagationOrphan)); err != nil {
		t.Fatalf("deleting %s with orphan propagation: %v", xb.Name, err)
	}
	framework.Eventually(t, framework.Timeout, "the ExternalBackend goes (the garbage collector orphans its Service)", func() error {
		cur := &v1alpha1.ExternalBackend{}
		switch err := c.Get(context.Background(), client.ObjectKeyFromObject(xb), cur); {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return err
		default:
			return fmt.Errorf("still there, finalizers %v", cur.Finalizers)
		}
	})
	return time.Since(start)
}

// waitOthersGone waits until every slice of the Service is ours: the
// hand-written ones deleted by the controller, the mirror's by the mirror
// once the Endpoints object went.
func waitOthersGone(t *testing.T, ns string) {
	t.Helper()
	framework.Eventually(t, framework.Timeout, "only our slices are left", func() error {
		var list discoveryv1.EndpointSliceList
		if err := framework.E().Client.List(context.Background(), &list, client.InNamespace(ns),
			client.MatchingLabels{discoveryv1.LabelServiceName: svcName}); err != nil {
			return err
		}
		var left []string
		for i := range list.Items {
			if s := &list.Items[i]; !ours(s) {
				left = append(left, fmt.Sprintf("%s (managed-by %q)", s.Name, s.Labels[discoveryv1.LabelManagedBy]))
			}
		}
		if len(left) > 0 {
			return fmt.Errorf("left: %v", left)
		}
		return nil
	})
}

// waitServed waits until connections to addr from the node all succeed
// and reach each of the three hosts.
func waitServed(t *testing.T, addr string) {
	t.Helper()
	framework.Eventually(t, framework.Timeout, addr+" reaches "+fmt.Sprint(hostNames), func() error {
		got := map[string]int{}
		for range 30 {
			name, err := lab.Node.AskTCP(addr, netlab.DefaultClientLimits().DialTimeout)
			if err != nil {
				return fmt.Errorf("a connection failed: %s (so far %v)", netlab.ErrorKind(err), got)
			}
			got[name]++
		}
		if names := slices.Sorted(maps.Keys(got)); !slices.Equal(names, hostNames) {
			return fmt.Errorf("reached %v", got)
		}
		return nil
	})
}

// handWrittenService creates the selectorless Service db as a team writes
// it by hand, and returns it as created (with its cluster IP).
func handWrittenService(t *testing.T, ns string) *corev1.Service {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: svcName, Labels: map[string]string{"team": "payments"}},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{
			Name: portName, Port: servicePort, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(echoPort),
		}}},
	}
	framework.Create(t, svc)
	return svc
}

// getService reads Service db in ns.
func getService(t *testing.T, ns string) *corev1.Service {
	t.Helper()
	svc := &corev1.Service{}
	if err := framework.E().Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: svcName}, svc); err != nil {
		t.Fatalf("reading Service %s: %v", svcName, err)
	}
	return svc
}

// handWrittenSlices writes the Service's endpoints as two slices, the way
// the Kubernetes documentation shows (managed-by cluster-admins) and the
// way many teams do (no managed-by label): h1 and h2 in one, h3 in the
// other.
func handWrittenSlices(t *testing.T, ns string) {
	t.Helper()
	addrs := hostAddrs()
	framework.Create(t, handWrittenSlice(ns, "db-admins", "cluster-admins", addrs[:2]...))
	framework.Create(t, handWrittenSlice(ns, "db-manual", "", addrs[2:]...))
}

// handWrittenSlice is an IPv4 slice of Service db with addrs ready on the
// echo port, labelled managed-by managedBy unless that is "".
func handWrittenSlice(ns, name, managedBy string, addrs ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svcName}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(portName), Port: ptr.To[int32](echoPort), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	if managedBy != "" {
		s.Labels[discoveryv1.LabelManagedBy] = managedBy
	}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	return s
}

// legacyEndpoints writes the Service's endpoints as an Endpoints object;
// kube-controller-manager's mirror turns it into the slice kube-proxy reads.
func legacyEndpoints(t *testing.T, ns string) {
	t.Helper()
	framework.Create(t, endpointsOf(ns, svcName, hostAddrs()...))
}

// adopting is the ExternalBackend that takes Service db over, as
// `backendslice import --adopt` writes it from the live namespace: its
// library reads the Service and the hand-written slices or the Endpoints
// object (not the slices mirrored from it). The import must carry
// everything over (no note of something left out or changed).
func adopting(t *testing.T, ns string) *v1alpha1.ExternalBackend {
	t.Helper()
	c := framework.E().Client
	var svcs corev1.ServiceList
	var eps discoveryv1.EndpointSliceList
	var legacy corev1.EndpointsList
	for _, l := range []client.ObjectList{&svcs, &eps, &legacy} {
		if err := c.List(context.Background(), l, client.InNamespace(ns)); err != nil {
			t.Fatalf("reading the namespace to import: %v", err)
		}
	}
	res := importer.Convert(importer.Objects{Services: svcs.Items, Slices: eps.Items, Endpoints: legacy.Items},
		importer.Options{Namespace: ns, Adopt: true})
	if len(res.Backends) != 1 || len(res.Refused) > 0 {
		t.Fatalf("import: %d backend(s), refused %v, want Service %s imported", len(res.Backends), res.Refused, svcName)
	}
	b := res.Backends[0]
	if !importer.Lossless(b.Notes) || b.ExternalBackend.Spec.Service.Adopt == nil {
		t.Fatalf("import of %v: adopt %v, notes %v; want it carried over whole, with spec.service.adopt", b.Replaces, b.ExternalBackend.Spec.Service.Adopt, b.Notes)
	}
	b.ExternalBackend.Namespace = b.Namespace
	return b.ExternalBackend
}

// hostAddrs are the three hosts' IPv4 addresses, in order.
func hostAddrs() []string {
	var out []string
	for _, h := range hosts {
		out = append(out, h.Addr4.String())
	}
	return out
}
