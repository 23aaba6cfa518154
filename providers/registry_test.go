package providers_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
)

// recorder is a provider of one kind that records what it was asked.
type recorder struct {
	kind providers.Kind
	got  []providers.Request
	res  providers.Result
	err  error
}

func (r *recorder) Kind() providers.Kind { return r.kind }

func (r *recorder) Resolve(_ context.Context, req providers.Request) (providers.Result, error) {
	r.got = append(r.got, req)
	return r.res, r.err
}

func TestNewRegistryRejectsDuplicateKinds(t *testing.T) {
	_, err := table().NewRegistry(
		&recorder{kind: kindStatic},
		&recorder{kind: kindDNS},
		&recorder{kind: kindStatic},
	)
	if err == nil {
		t.Fatal("NewRegistry accepted two static providers")
	}
	if !strings.Contains(err.Error(), `"static"`) {
		t.Errorf("error %q does not name the kind", err)
	}
}

func TestNewRegistryAcceptsDistinctKinds(t *testing.T) {
	var ps []providers.Provider
	for _, k := range []providers.Kind{kindStatic, kindDNS, kindConsul, kindAWSRDS, kindAWSEC2} {
		ps = append(ps, &recorder{kind: k})
	}
	if _, err := table().NewRegistry(ps...); err != nil {
		t.Fatalf("NewRegistry: %v", err)
	}
	if _, err := table().NewRegistry(); err != nil {
		t.Fatalf("NewRegistry(): %v", err)
	}
}

// TestRegistryProviders: the registry's providers in the table's order,
// whatever order they were given in.
func TestRegistryProviders(t *testing.T) {
	dns, static := &recorder{kind: kindDNS}, &recorder{kind: kindStatic}
	r, err := table().NewRegistry(dns, static)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Providers(); len(got) != 2 || got[0] != static || got[1] != dns {
		t.Errorf("Providers() = %v, want static then dns", got)
	}
}

func TestRegistryDispatchesByKind(t *testing.T) {
	st := &recorder{kind: kindStatic, res: providers.Result{
		Endpoints:    []providers.Endpoint{{Address: "192.0.2.1", Serving: true}},
		RefreshAfter: time.Minute,
	}}
	dnsErr := providers.Transient(errors.New("timeout"))
	dns := &recorder{kind: kindDNS, err: dnsErr}
	r, err := table().NewRegistry(st, dns)
	if err != nil {
		t.Fatal(err)
	}
	req := providers.Request{
		Namespace: "ns", Backend: "db",
		Source:       v1alpha1.Source{Name: "fixed", Static: &v1alpha1.StaticSource{}},
		AddressTypes: []v1alpha1.AddressType{v1alpha1.AddressTypeIPv4},
	}
	res, err := r.Resolve(context.Background(), req)
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	if !reflect.DeepEqual(res, st.res) {
		t.Errorf("Resolve = %+v, want the static provider's answer %+v", res, st.res)
	}
	if len(st.got) != 1 || !reflect.DeepEqual(st.got[0], req) || len(dns.got) != 0 {
		t.Errorf("static provider got %+v, dns provider got %+v; want the request passed to static only", st.got, dns.got)
	}

	_, err = r.Resolve(context.Background(), providers.Request{Source: v1alpha1.Source{Name: "name", DNS: &v1alpha1.DNSSource{Name: "db.example.com"}}})
	if !errors.Is(err, dnsErr) {
		t.Errorf("Resolve of a dns source = %v, want the dns provider's error passed through", err)
	}
	if len(dns.got) != 1 {
		t.Errorf("dns provider called %d time(s), want 1", len(dns.got))
	}
}

func TestRegistryUnknownKind(t *testing.T) {
	r, err := table().NewRegistry(&recorder{kind: kindStatic})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		src  v1alpha1.Source
		want string
	}{
		{v1alpha1.Source{Name: "lookup", DNS: &v1alpha1.DNSSource{Name: "db.example.com"}}, "spec.sources[lookup].dns"},
		{v1alpha1.Source{Name: "catalog", Consul: &v1alpha1.ConsulSource{Service: "db"}}, "spec.sources[catalog].consul"},
		{v1alpha1.Source{Name: "rds", AWSRDS: &v1alpha1.AWSRDSSource{Region: "eu-west-1"}}, "spec.sources[rds].awsRDS"},
		{v1alpha1.Source{Name: "vms", AWSEC2: &v1alpha1.AWSEC2Source{Region: "eu-west-1"}}, "spec.sources[vms].awsEC2"},
	}
	for _, c := range cases {
		t.Run(c.want, func(t *testing.T) {
			res, err := r.Resolve(context.Background(), providers.Request{Source: c.src})
			if err == nil {
				t.Fatalf("Resolve succeeded with %+v; want ProviderNotAvailable", res)
			}
			var pe *providers.Error
			if !errors.As(err, &pe) {
				t.Fatalf("error %v (%T) is not a *providers.Error", err, err)
			}
			if !pe.Terminal || !providers.IsTerminal(err) {
				t.Errorf("error is not terminal: %+v", pe)
			}
			if pe.Reason != v1alpha1.ReasonProviderNotAvailable {
				t.Errorf("Reason = %q, want %q", pe.Reason, v1alpha1.ReasonProviderNotAvailable)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("message %q does not name %s", err, c.want)
			}
			if len(res.Endpoints) != 0 {
				t.Errorf("endpoints %+v returned with the error", res.Endpoints)
			}
		})
	}
}

func TestKindOf(t *testing.T) {
	cases := []struct {
		src  v1alpha1.Source
		want providers.Kind
	}{
		{v1alpha1.Source{Static: &v1alpha1.StaticSource{}}, kindStatic},
		{v1alpha1.Source{DNS: &v1alpha1.DNSSource{}}, kindDNS},
		{v1alpha1.Source{Consul: &v1alpha1.ConsulSource{}}, kindConsul},
		{v1alpha1.Source{AWSRDS: &v1alpha1.AWSRDSSource{}}, kindAWSRDS},
		{v1alpha1.Source{AWSEC2: &v1alpha1.AWSEC2Source{}}, kindAWSEC2},
		{v1alpha1.Source{Name: "none"}, ""},
	}
	for _, c := range cases {
		if got := table().KindOf(c.src); got != c.want {
			t.Errorf("KindOf(%+v) = %q, want %q", c.src, got, c.want)
		}
	}
}

func TestErrorHelpers(t *testing.T) {
	base := errors.New("boom")
	tr := providers.Transient(base)
	if providers.IsTerminal(tr) || providers.AsError(tr).Reason != v1alpha1.ReasonSourceFailed || !errors.Is(tr, base) {
		t.Errorf("Transient: %+v", providers.AsError(tr))
	}
	te := providers.Terminalf(v1alpha1.ReasonInvalidSpec, "spec.sources[%s]: %s", "a", "bad")
	if !providers.IsTerminal(te) || te.Error() != "spec.sources[a]: bad" || providers.AsError(te).Reason != v1alpha1.ReasonInvalidSpec {
		t.Errorf("Terminalf: %+v", providers.AsError(te))
	}
	gone := providers.Gone(v1alpha1.ReasonBackendNotFound, base)
	if pe := providers.AsError(gone); !pe.Terminal || !pe.Gone || pe.Reason != v1alpha1.ReasonBackendNotFound || !errors.Is(gone, base) {
		t.Errorf("Gone: %+v", pe)
	}
	if providers.AsError(te).Gone || providers.AsError(tr).Gone {
		t.Error("Terminal or Transient errors say Gone")
	}
	// An untyped error counts as transient; a wrapped typed one keeps its kind.
	if pe := providers.AsError(base); pe.Terminal || pe.Reason != v1alpha1.ReasonSourceFailed || !errors.Is(pe.Err, base) {
		t.Errorf("AsError(untyped) = %+v", pe)
	}
	wrapped := errors.Join(errors.New("context"), te)
	if !providers.IsTerminal(wrapped) {
		t.Error("a wrapped terminal error is not terminal")
	}
	if providers.IsTerminal(nil) {
		t.Error("IsTerminal(nil) = true")
	}
}

// checking is a provider that checks connections, recording each one.
type checking struct {
	recorder
	checked []*providers.Connection
	err     error
}

func (c *checking) CheckConnection(_ context.Context, conn *providers.Connection) error {
	c.checked = append(c.checked, conn)
	return c.err
}

// TestRegistryChecksThroughTheProviderKind: a BackendProvider's
// connection is checked by the provider of a source kind its kind serves
// (aws: the awsRDS row, first in the table), once; a kind whose providers
// have no check (static, or a kind without a provider) is not checked.
func TestRegistryChecksThroughTheProviderKind(t *testing.T) {
	denied := errors.New("AccessDenied")
	rds := &checking{recorder: recorder{kind: kindAWSRDS}, err: denied}
	ec2 := &checking{recorder: recorder{kind: kindAWSEC2}}
	dns := &checking{recorder: recorder{kind: kindDNS}}
	reg, err := table().NewRegistry(&recorder{kind: kindStatic}, dns, rds, ec2)
	if err != nil {
		t.Fatal(err)
	}
	conn := &providers.Connection{Name: "account", Settings: "eu-west-1"}
	checked, err := reg.CheckConnection(context.Background(), &v1alpha1.BackendProvider{Spec: v1alpha1.BackendProviderSpec{
		AWS: &v1alpha1.AWSProvider{Region: "eu-west-1"}}}, conn)
	if !checked || !errors.Is(err, denied) || len(rds.checked) != 1 || rds.checked[0] != conn || len(ec2.checked) != 0 {
		t.Errorf("aws: checked=%v err=%v, RDS checked %d, EC2 %d; want the RDS provider's check, once", checked, err, len(rds.checked), len(ec2.checked))
	}
	checked, err = reg.CheckConnection(context.Background(), &v1alpha1.BackendProvider{Spec: v1alpha1.BackendProviderSpec{
		DNS: &v1alpha1.DNSProvider{}}}, nil)
	if !checked || err != nil || len(dns.checked) != 1 || dns.checked[0] != nil {
		t.Errorf("dns without resolvers: checked=%v err=%v (%d checks); want the controller's own resolvers checked", checked, err, len(dns.checked))
	}
	for _, spec := range []v1alpha1.BackendProviderSpec{
		{Static: &v1alpha1.StaticProvider{}},
		{Consul: &v1alpha1.ConsulProvider{Address: "127.0.0.1:8500"}}, // no consul provider in this registry
		{},
	} {
		if checked, err := reg.CheckConnection(context.Background(), &v1alpha1.BackendProvider{Spec: spec}, nil); checked || err != nil {
			t.Errorf("%+v: checked=%v err=%v, want no check", spec, checked, err)
		}
	}
}

// calls is a CallObserver that records what it hears.
type calls []string

func (c *calls) Called(call providers.Call, err error) {
	*c = append(*c, call.Provider+"/"+call.Kind+"/"+call.Op+"/"+providers.Outcome(err))
}

// TestRegistryObservesCalls: an observed registry tells of each call it
// passes to a provider, a resolve or a check, naming the BackendProvider
// (the source's providerRef, "" without one), its kind and the outcome;
// a source of a kind without a provider and a provider without a check
// are no calls. The registry it was made from tells nothing.
func TestRegistryObservesCalls(t *testing.T) {
	rds := &checking{recorder: recorder{kind: kindAWSRDS, err: providers.Transient(errors.New("throttled"))}, err: errors.New("AccessDenied")}
	dns := &recorder{kind: kindDNS, err: providers.Gone(v1alpha1.ReasonBackendNotFound, errors.New("NXDOMAIN"))}
	plain, err := table().NewRegistry(&recorder{kind: kindStatic}, dns, rds)
	if err != nil {
		t.Fatal(err)
	}
	var got calls
	reg := plain.Observed(&got)
	ctx := context.Background()
	for _, src := range []v1alpha1.Source{
		{Name: "fixed", Static: &v1alpha1.StaticSource{}, ProviderRef: &v1alpha1.ProviderReference{Name: "fixed-ips"}},
		{Name: "lookup", DNS: &v1alpha1.DNSSource{Name: "db.example.com"}},
		{Name: "rds", AWSRDS: &v1alpha1.AWSRDSSource{Region: "eu-west-1"}, ProviderRef: &v1alpha1.ProviderReference{Name: "account"}},
		{Name: "catalog", Consul: &v1alpha1.ConsulSource{Service: "db"}},
	} {
		_, _ = reg.Resolve(ctx, providers.Request{Source: src})
	}
	for _, bp := range []*v1alpha1.BackendProvider{
		{ObjectMeta: metav1.ObjectMeta{Name: "account"}, Spec: v1alpha1.BackendProviderSpec{AWS: &v1alpha1.AWSProvider{Region: "eu-west-1"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "fixed-ips"}, Spec: v1alpha1.BackendProviderSpec{Static: &v1alpha1.StaticProvider{}}},
	} {
		_, _ = reg.CheckConnection(ctx, bp, nil)
	}
	want := calls{"fixed-ips/static/resolve/success", "/dns/resolve/gone", "account/aws/resolve/transient", "account/aws/check/transient"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("observed %q, want %q", got, want)
	}
	got = nil
	_, _ = plain.Resolve(ctx, providers.Request{Source: v1alpha1.Source{Name: "fixed", Static: &v1alpha1.StaticSource{}}})
	if len(got) != 0 {
		t.Errorf("the registry Observed was called on observed %q", got)
	}
}

func TestOutcome(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, providers.OutcomeSuccess},
		{errors.New("untyped"), providers.OutcomeTransient},
		{providers.Transient(errors.New("timeout")), providers.OutcomeTransient},
		{providers.Terminalf(v1alpha1.ReasonAccessDenied, "denied"), providers.OutcomeTerminal},
		{providers.Gone(v1alpha1.ReasonBackendNotFound, errors.New("deleted")), providers.OutcomeGone},
		{fmt.Errorf("wrapped: %w", providers.Gone(v1alpha1.ReasonBackendNotFound, errors.New("deleted"))), providers.OutcomeGone},
	} {
		if got := providers.Outcome(c.err); got != c.want {
			t.Errorf("Outcome(%v) = %s, want %s", c.err, got, c.want)
		}
	}
}
