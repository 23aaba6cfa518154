package tenancy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/awstest"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// withdrawBound is how soon endpoints whose access was taken away must be
// gone from the slices: "at once", against a drain period of an hour.
const withdrawBound = 5 * time.Second

// drainHour is the drain period of the backends that prove an endpoint
// left at once rather than drained.
var drainHour = &metav1.Duration{Duration: time.Hour}

// teamLabel is the namespace label the providers' selectors match.
const teamLabel = "tenancy.backendslice.io/team"

// namespaces numbers the namespaces the tests make, so that names stay
// unique across -count runs in one process.
var namespaces atomic.Int64

// newNamespace creates a namespace named base-<n> with labels.
func newNamespace(t *testing.T, base string, labels map[string]string) string {
	t.Helper()
	name := fmt.Sprintf("%s-%d", base, namespaces.Add(1))
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	return name
}

// setNamespaceLabels replaces the labels of namespace ns.
func setNamespaceLabels(t *testing.T, ns string, labels map[string]string) {
	t.Helper()
	framework.Edit(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, func(n *corev1.Namespace) { n.Labels = labels })
}

// uniqueName is a cluster-unique name for a cluster-scoped object of the
// test: its first namespace and a suffix.
func uniqueName(ns, suffix string) string { return ns + "-" + suffix }

// admits is a namespace selection: names, and a selector on teamLabel
// when team is not empty.
func admits(team string, names ...string) v1alpha1.NamespaceSelection {
	sel := v1alpha1.NamespaceSelection{Names: names}
	if team != "" {
		sel.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{teamLabel: team}}
	}
	return sel
}

// team is the labels of a namespace of team.
func team(name string) map[string]string { return map[string]string{teamLabel: name} }

// createProvider creates a BackendProvider, deleted when the test ends, and
// waits until the controller has seen it (its status is written for this
// generation). A backend created sooner may be reconciled before the
// provider reaches the controller's cache, and be told, rightly then, that
// it does not exist: a Warning ProviderNotAdmitted whose note the events
// API keeps for the later refusals of that reason, which the tests read.
func createProvider(t *testing.T, name string, ns v1alpha1.NamespaceSelection, spec v1alpha1.BackendProviderSpec) *v1alpha1.BackendProvider {
	t.Helper()
	spec.Namespaces = ns
	bp := &v1alpha1.BackendProvider{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
	if err := k8s.Create(ctx, bp); err != nil {
		t.Fatalf("creating BackendProvider %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = client.IgnoreNotFound(k8s.Delete(ctx, &v1alpha1.BackendProvider{ObjectMeta: metav1.ObjectMeta{Name: name}}))
	})
	framework.Eventually(t, framework.Timeout, "BackendProvider "+name+" seen by the controller", func() error {
		seen := &v1alpha1.BackendProvider{}
		if err := k8s.Get(ctx, client.ObjectKey{Name: name}, seen); err != nil {
			return err
		}
		if seen.Status.ObservedGeneration != seen.Generation {
			return fmt.Errorf("status.observedGeneration %d, generation %d", seen.Status.ObservedGeneration, seen.Generation)
		}
		return nil
	})
	return bp
}

// editProvider changes BackendProvider name.
func editProvider(t *testing.T, name string, change func(*v1alpha1.BackendProvider)) {
	t.Helper()
	framework.Edit(t, &v1alpha1.BackendProvider{ObjectMeta: metav1.ObjectMeta{Name: name}}, change)
}

// deleteProvider deletes BackendProvider name.
func deleteProvider(t *testing.T, name string) {
	t.Helper()
	if err := k8s.Delete(ctx, &v1alpha1.BackendProvider{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatalf("deleting BackendProvider %s: %v", name, err)
	}
}

// Provider specs of each kind; createProvider adds the namespaces.
func staticSpec(cidrs ...string) v1alpha1.BackendProviderSpec {
	return v1alpha1.BackendProviderSpec{Static: &v1alpha1.StaticProvider{}, AllowedCIDRs: cidrs}
}

func dnsSpec(resolvers ...string) v1alpha1.BackendProviderSpec {
	return v1alpha1.BackendProviderSpec{DNS: &v1alpha1.DNSProvider{Resolvers: resolvers}}
}

// consulSpec is a Consul cluster at addr, its token in Secret secret (key
// "token") of the controller's namespace.
func consulSpec(addr, datacenter, secret string, services ...string) v1alpha1.BackendProviderSpec {
	return v1alpha1.BackendProviderSpec{Consul: &v1alpha1.ConsulProvider{
		Address: addr, Datacenter: datacenter, AllowedServices: services,
		TokenSecretRef: &v1alpha1.SecretKeyReference{Name: secret, Key: "token"},
	}}
}

func awsSpec(endpoint, role, consentTag string) v1alpha1.BackendProviderSpec {
	return v1alpha1.BackendProviderSpec{AWS: &v1alpha1.AWSProvider{
		Region: region, EndpointURL: endpoint, AssumeRoleARN: role, ConsentTag: consentTag,
	}}
}

// ref names a BackendProvider.
func ref(provider string) *v1alpha1.ProviderReference {
	return &v1alpha1.ProviderReference{Name: provider}
}

// Sources of each kind through provider.
func staticSource(provider string, addrs ...string) v1alpha1.Source {
	eps := make([]v1alpha1.StaticEndpoint, 0, len(addrs))
	for _, a := range addrs {
		eps = append(eps, v1alpha1.StaticEndpoint{Address: a})
	}
	return v1alpha1.Source{Name: "fixed", ProviderRef: ref(provider), Static: &v1alpha1.StaticSource{Endpoints: eps}}
}

func dnsSource(provider, name string) v1alpha1.Source {
	return v1alpha1.Source{Name: "lookup", ProviderRef: ref(provider), DNS: &v1alpha1.DNSSource{
		Name: name, MinRefresh: &metav1.Duration{Duration: time.Second}}}
}

func consulSource(provider, service string) v1alpha1.Source {
	return v1alpha1.Source{Name: "catalog", ProviderRef: ref(provider), Consul: &v1alpha1.ConsulSource{Service: service}}
}

func rdsSource(provider, id string) v1alpha1.Source {
	return v1alpha1.Source{Name: "db", ProviderRef: ref(provider), AWSRDS: &v1alpha1.AWSRDSSource{Region: region, DBInstanceIdentifier: id}}
}

func rdsTagSource(provider string, tags map[string]string) v1alpha1.Source {
	return v1alpha1.Source{Name: "db", ProviderRef: ref(provider), AWSRDS: &v1alpha1.AWSRDSSource{Region: region, Tags: tags}}
}

func ec2Source(provider string, tags map[string]string) v1alpha1.Source {
	return v1alpha1.Source{Name: "vms", ProviderRef: ref(provider), AWSEC2: &v1alpha1.AWSEC2Source{Region: region, Tags: tags}}
}

// backend is an ExternalBackend with one TCP port, both IP families and
// the drain period (nil: none).
func backend(ns, name string, drain *metav1.Duration, sources ...v1alpha1.Source) *v1alpha1.ExternalBackend {
	if drain == nil {
		drain = &metav1.Duration{}
	}
	return &v1alpha1.ExternalBackend{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.ExternalBackendSpec{
			Service:      v1alpha1.ServiceSpec{Ports: []v1alpha1.ServicePort{{Name: "tcp", Port: 5432}}},
			AddressTypes: []v1alpha1.AddressType{v1alpha1.AddressTypeIPv4, v1alpha1.AddressTypeIPv6},
			Sources:      sources,
			DrainPeriod:  drain,
		},
	}
}

// Endpoint states, "ready/serving/terminating".
const (
	ready       = "true/true/false"
	terminating = "false/true/true"
)

// states maps each published address of our slices of svc to its state.
func states(t *testing.T, ns, svc string) (map[string]string, error) {
	t.Helper()
	eps, err := framework.Published(framework.Slices(t, ns, svc))
	if err != nil {
		return nil, err
	}
	got := map[string]string{}
	for a, e := range eps {
		c := e.Conditions
		got[a] = fmt.Sprintf("%t/%t/%t", ptr.Deref(c.Ready, false), ptr.Deref(c.Serving, false), ptr.Deref(c.Terminating, false))
	}
	return got, nil
}

// statesOf is want as states: every address in state.
func statesOf(state string, addrs ...string) map[string]string {
	out := map[string]string{}
	for _, a := range framework.Served(addrs...) {
		out[a] = state
	}
	return out
}

// waitStates waits until the slices of svc publish exactly want (only the
// addresses of families the API server serves are expected).
func waitStates(t *testing.T, ns, svc string, want map[string]string) {
	t.Helper()
	waitStatesWithin(t, framework.Timeout, ns, svc, want)
}

// waitStatesWithin is waitStates with a bound of its own.
func waitStatesWithin(t *testing.T, bound time.Duration, ns, svc string, want map[string]string) {
	t.Helper()
	framework.Eventually(t, bound, fmt.Sprintf("%s/%s publishes %v", ns, svc, want), func() error {
		got, err := states(t, ns, svc)
		if err != nil {
			return err
		}
		if len(got) != len(want) {
			return fmt.Errorf("published %v", got)
		}
		for a, s := range want {
			if got[a] != s {
				return fmt.Errorf("published %v", got)
			}
		}
		return nil
	})
}

// withdrawn waits, after access was taken away at start, until svc
// publishes exactly want: what was withdrawn must be gone (not
// terminating) within withdrawBound, although the backend drains for an
// hour. It returns how long it took.
func withdrawn(t *testing.T, start time.Time, ns, svc string, want map[string]string) time.Duration {
	t.Helper()
	waitStatesWithin(t, withdrawBound, ns, svc, want)
	took := time.Since(start)
	t.Logf("%s/%s: withdrawn endpoints gone from the slices %s after the access was taken away", ns, svc, took.Round(time.Millisecond))
	return took
}

// wantNotDraining waits until status.draining lists none of addrs: the
// status patch ends the reconcile that wrote the slices, so it may come
// moments after them.
func wantNotDraining(t *testing.T, xb *v1alpha1.ExternalBackend, addrs ...string) {
	t.Helper()
	framework.Eventually(t, framework.Timeout, fmt.Sprintf("%s/%s status.draining without %v", xb.Namespace, xb.Name, addrs), func() error {
		for _, d := range framework.Get(t, xb).Status.Draining {
			if slices.Contains(addrs, d.Address) {
				return fmt.Errorf("status.draining lists %s (since %s): a withdrawn endpoint must not drain", d.Address, d.Since)
			}
		}
		return nil
	})
}

// missing are the parts s lacks.
func missing(s string, parts ...string) []string {
	var out []string
	for _, p := range parts {
		if !strings.Contains(s, p) {
			out = append(out, p)
		}
	}
	return out
}

// waitConditions waits until, for the current generation, Resolved and
// Ready are status with reason, both messages holding every part, and
// returns the backend.
func waitConditions(t *testing.T, xb *v1alpha1.ExternalBackend, status metav1.ConditionStatus, reason string, parts ...string) *v1alpha1.ExternalBackend {
	t.Helper()
	var cur *v1alpha1.ExternalBackend
	framework.Eventually(t, framework.Timeout, fmt.Sprintf("%s/%s Resolved and Ready %s/%s naming %q", xb.Namespace, xb.Name, status, reason, parts), func() error {
		cur = framework.Get(t, xb)
		for _, typ := range []string{v1alpha1.ConditionResolved, v1alpha1.ConditionReady} {
			c := meta.FindStatusCondition(cur.Status.Conditions, typ)
			switch {
			case c == nil:
				return fmt.Errorf("no %s condition yet", typ)
			case c.Status != status || c.Reason != reason || c.ObservedGeneration != cur.Generation:
				return fmt.Errorf("%s is %s/%s (generation %d of %d): %s", typ, c.Status, c.Reason, c.ObservedGeneration, cur.Generation, c.Message)
			case len(missing(c.Message, parts...)) > 0:
				return fmt.Errorf("%s message %q lacks %q", typ, c.Message, missing(c.Message, parts...))
			}
		}
		return nil
	})
	return cur
}

// waitRefused waits until xb's sources are refused: Resolved and Ready
// False with reason ProviderNotAdmitted and messages holding parts, a
// Warning event ProviderNotAdmitted whose note holds them too, and the
// Service publishing nothing.
func waitRefused(t *testing.T, xb *v1alpha1.ExternalBackend, parts ...string) {
	t.Helper()
	waitConditions(t, xb, metav1.ConditionFalse, v1alpha1.ReasonProviderNotAdmitted, parts...)
	waitEvent(t, xb, corev1.EventTypeWarning, v1alpha1.ReasonProviderNotAdmitted, parts...)
	waitStates(t, xb.Namespace, xb.Name, map[string]string{})
}

// waitEvent waits for an events.k8s.io/v1 event about xb of type typ and
// reason whose note holds every part.
func waitEvent(t *testing.T, xb *v1alpha1.ExternalBackend, typ, reason string, parts ...string) *eventsv1.Event {
	t.Helper()
	var found *eventsv1.Event
	framework.Eventually(t, framework.Timeout, fmt.Sprintf("%s event %s about %s/%s naming %q", typ, reason, xb.Namespace, xb.Name, parts), func() error {
		var list eventsv1.EventList
		if err := k8s.List(ctx, &list, client.InNamespace(xb.Namespace)); err != nil {
			return err
		}
		var seen []string
		for i, e := range list.Items {
			if e.Regarding.Kind != "ExternalBackend" || e.Regarding.Name != xb.Name {
				continue
			}
			if e.Type == typ && e.Reason == reason && len(missing(e.Note, parts...)) == 0 {
				found = &list.Items[i]
				return nil
			}
			seen = append(seen, e.Type+"/"+e.Reason+": "+e.Note)
		}
		return fmt.Errorf("events about it: %q", seen)
	})
	return found
}

// putSecret creates or replaces Secret name in the controller's namespace
// with data {key: value}; it is deleted when the test ends.
func putSecret(t *testing.T, name, key, value string) {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: controllerNamespace, Name: name}}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		switch err := k8s.Get(ctx, client.ObjectKeyFromObject(s), s); {
		case apierrors.IsNotFound(err):
			s.Data = map[string][]byte{key: []byte(value)}
			return k8s.Create(ctx, s)
		case err != nil:
			return err
		}
		s.Data = map[string][]byte{key: []byte(value)}
		return k8s.Update(ctx, s)
	})
	if err != nil {
		t.Fatalf("writing Secret %s: %v", name, err)
	}
	t.Cleanup(func() { _ = client.IgnoreNotFound(k8s.Delete(ctx, s.DeepCopy())) })
}

// deleteSecret deletes Secret name of the controller's namespace.
func deleteSecret(t *testing.T, name string) {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: controllerNamespace, Name: name}}
	if err := k8s.Delete(ctx, s); err != nil {
		t.Fatalf("deleting Secret %s: %v", name, err)
	}
}

// waitProviderStatus waits until BackendProvider name has kind and a Ready
// condition of status and reason for its generation, whose message holds
// every part.
func waitProviderStatus(t *testing.T, name, kind string, status metav1.ConditionStatus, reason string, parts ...string) *v1alpha1.BackendProvider {
	t.Helper()
	return waitProviderStatusWithin(t, framework.Timeout, name, kind, status, reason, parts...)
}

// waitProviderStatusWithin is waitProviderStatus with a bound of its own.
func waitProviderStatusWithin(t *testing.T, bound time.Duration, name, kind string, status metav1.ConditionStatus, reason string, parts ...string) *v1alpha1.BackendProvider {
	t.Helper()
	bp := &v1alpha1.BackendProvider{}
	framework.Eventually(t, bound, fmt.Sprintf("BackendProvider %s Ready=%s/%s", name, status, reason), func() error {
		if err := k8s.Get(ctx, client.ObjectKey{Name: name}, bp); err != nil {
			return err
		}
		c := meta.FindStatusCondition(bp.Status.Conditions, v1alpha1.ConditionReady)
		switch {
		case bp.Status.Kind != kind:
			return fmt.Errorf("status.kind %q, want %q", bp.Status.Kind, kind)
		case c == nil:
			return fmt.Errorf("no Ready condition yet (%v)", bp.Status.Conditions)
		case c.Status != status || c.Reason != reason || c.ObservedGeneration != bp.Generation:
			return fmt.Errorf("Ready is %s/%s (generation %d of %d): %s", c.Status, c.Reason, c.ObservedGeneration, bp.Generation, c.Message)
		case len(missing(c.Message, parts...)) > 0:
			return fmt.Errorf("Ready message %q lacks %q", c.Message, missing(c.Message, parts...))
		}
		return nil
	})
	return bp
}

// printedColumns is what `kubectl get bp name` prints: the API server's
// Table of the BackendProvider, cell by column name.
func printedColumns(t *testing.T, name string) map[string]string {
	t.Helper()
	cfg := framework.E().Config()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		strings.TrimSuffix(cfg.Host, "/")+"/apis/backendslice.io/v1alpha1/backendproviders/"+name, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET BackendProvider %s as a Table: %s: %s", name, resp.Status, body)
	}
	var table metav1.Table
	if err := json.Unmarshal(body, &table); err != nil {
		t.Fatal(err)
	}
	if len(table.Rows) != 1 {
		t.Fatalf("Table of BackendProvider %s has %d rows", name, len(table.Rows))
	}
	out := map[string]string{}
	for i, c := range table.ColumnDefinitions {
		if i < len(table.Rows[0].Cells) {
			out[c.Name] = fmt.Sprint(table.Rows[0].Cells[i])
		}
	}
	return out
}

// waitPrinted waits until kubectl would print BackendProvider name with
// the columns of want.
func waitPrinted(t *testing.T, name string, want map[string]string) {
	t.Helper()
	framework.Eventually(t, framework.Timeout, fmt.Sprintf("kubectl get bp %s prints %v", name, want), func() error {
		got := printedColumns(t, name)
		for k, v := range want {
			if got[k] != v {
				return fmt.Errorf("printed %v", got)
			}
		}
		return nil
	})
}

// fakeResolver resolves the RDS endpoint names of several AWS fakes, as
// DNS would resolve the names of instances of several accounts.
type fakeResolver struct {
	mu    sync.Mutex
	fakes []*awstest.Server
}

func (r *fakeResolver) add(f *awstest.Server) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fakes = append(r.fakes, f)
}

// LookupNetIP asks each fake in turn.
func (r *fakeResolver) LookupNetIP(c context.Context, network, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	fakes := slices.Clone(r.fakes)
	r.mu.Unlock()
	for _, f := range fakes {
		if addrs, err := f.LookupNetIP(c, network, host); err == nil {
			return addrs, nil
		}
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// newFake starts an AWS fake of the test's own, so that its call counters
// count the test's calls only.
func newFake(t *testing.T) *awstest.Server {
	t.Helper()
	f := awstest.New()
	fakes.add(f)
	t.Cleanup(f.Close)
	return f
}

// dbInstance is an available DB instance of the region at ip.
func dbInstance(id, ip string, tags map[string]string) awstest.DBInstance {
	return awstest.DBInstance{
		Identifier: id, Status: "available", Address: id + ".abcdefgh." + region + ".rds.amazonaws.com",
		Port: 5432, Zone: region + "a", NetworkType: "IPV4", IPs: []string{ip}, Tags: tags,
	}
}

// wantSliceShape checks our slices of svc as a consumer reads them: the
// Service's name and our manager as labels, one address family a slice
// that matches every address in it, the Service's port, no node.
func wantSliceShape(t *testing.T, ns, svc string) {
	t.Helper()
	for _, s := range framework.Slices(t, ns, svc) {
		if s.Labels[discoveryv1.LabelServiceName] != svc || s.Labels[discoveryv1.LabelManagedBy] != v1alpha1.ManagedByValue {
			t.Errorf("slice %s/%s labels %v", ns, s.Name, s.Labels)
		}
		if len(s.Ports) != 1 || ptr.Deref(s.Ports[0].Name, "") != "tcp" || ptr.Deref(s.Ports[0].Port, 0) != 5432 ||
			ptr.Deref(s.Ports[0].Protocol, "") != corev1.ProtocolTCP {
			t.Errorf("slice %s/%s ports %+v, want tcp 5432/TCP", ns, s.Name, s.Ports)
		}
		for _, e := range s.Endpoints {
			a, err := netip.ParseAddr(e.Addresses[0])
			family := discoveryv1.AddressTypeIPv4
			if err == nil && a.Is6() {
				family = discoveryv1.AddressTypeIPv6
			}
			if err != nil || s.AddressType != family {
				t.Errorf("slice %s/%s of type %s holds %s", ns, s.Name, s.AddressType, e.Addresses[0])
			}
			if e.NodeName != nil {
				t.Errorf("slice %s/%s: endpoint %s on node %s", ns, s.Name, e.Addresses[0], *e.NodeName)
			}
		}
	}
}
