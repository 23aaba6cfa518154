package externalbackend

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/publish"
)

var (
	v4Fam   = []corev1.IPFamily{corev1.IPv4Protocol}
	v6Fam   = []corev1.IPFamily{corev1.IPv6Protocol}
	dualFam = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
)

func testBackend() *v1alpha1.ExternalBackend {
	return &v1alpha1.ExternalBackend{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "payments", UID: "uid-1"},
		Spec: v1alpha1.ExternalBackendSpec{
			Service: v1alpha1.ServiceSpec{
				Ports: []v1alpha1.ServicePort{
					{Name: "pg", Port: 5432},
					{Name: "admin", Port: 80, TargetPort: ptr.To[int32](8080), Protocol: "TCP", AppProtocol: ptr.To("http")},
					{Name: "dns", Port: 53, Protocol: "UDP"},
				},
				Labels:              map[string]string{"team": "payments"},
				Annotations:         map[string]string{"note": "external"},
				TrafficDistribution: ptr.To("PreferClose"),
			},
			Sources:      []v1alpha1.Source{{Name: "s", Static: &v1alpha1.StaticSource{}}},
			AddressTypes: []v1alpha1.AddressType{v1alpha1.AddressTypeIPv4, v1alpha1.AddressTypeIPv6},
		},
	}
}

func TestDesiredService(t *testing.T) {
	xb := testBackend()
	svc := desiredService(xb, v4Fam)
	if svc.Name != "db" || svc.Namespace != "payments" {
		t.Errorf("name %s/%s, want payments/db", svc.Namespace, svc.Name)
	}
	if svc.Spec.Type != corev1.ServiceTypeClusterIP || svc.Spec.ClusterIP != "" {
		t.Errorf("type %s clusterIP %q, want ClusterIP with the IP left to the API server", svc.Spec.Type, svc.Spec.ClusterIP)
	}
	if svc.Spec.Selector != nil {
		t.Errorf("selector %v, want none", svc.Spec.Selector)
	}
	wantPorts := []corev1.ServicePort{
		{Name: "pg", Port: 5432, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(5432)},
		{Name: "admin", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080), AppProtocol: ptr.To("http")},
		{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
	}
	if !reflect.DeepEqual(svc.Spec.Ports, wantPorts) {
		t.Errorf("ports\n got %+v\nwant %+v", svc.Spec.Ports, wantPorts)
	}
	if svc.Labels[v1alpha1.BackendLabel] != "db" || svc.Labels["team"] != "payments" || len(svc.Labels) != 2 {
		t.Errorf("labels %v, want team and %s=db", svc.Labels, v1alpha1.BackendLabel)
	}
	wantAnn := map[string]string{"note": "external", managedMetadataAnnotation: `{"labels":["team"],"annotations":["note"]}`}
	if !reflect.DeepEqual(svc.Annotations, wantAnn) {
		t.Errorf("annotations %v, want %v", svc.Annotations, wantAnn)
	}
	if ptr.Deref(svc.Spec.TrafficDistribution, "") != "PreferClose" {
		t.Errorf("trafficDistribution %v", svc.Spec.TrafficDistribution)
	}
	if len(svc.OwnerReferences) != 1 {
		t.Fatalf("owner references %+v, want one", svc.OwnerReferences)
	}
	ref := svc.OwnerReferences[0]
	if ref.APIVersion != "backendslice.io/v1alpha1" || ref.Kind != "ExternalBackend" || ref.Name != "db" || ref.UID != "uid-1" ||
		!ptr.Deref(ref.Controller, false) || !ptr.Deref(ref.BlockOwnerDeletion, false) {
		t.Errorf("owner reference %+v, want a controller reference to ExternalBackend db blocking deletion", ref)
	}
	if !metav1.IsControlledBy(svc, xb) {
		t.Error("the Service is not controlled by its ExternalBackend")
	}

	// The spec's maps are copied, not shared.
	svc.Labels["team"] = "changed"
	svc.Annotations["note"] = "changed"
	if xb.Spec.Service.Labels["team"] != "payments" || xb.Spec.Service.Annotations["note"] != "external" {
		t.Error("changing the Service changed the spec's labels or annotations")
	}
}

func TestDesiredServiceNameAndType(t *testing.T) {
	xb := testBackend()
	xb.Spec.Service.Name = "postgres"
	xb.Spec.Service.Type = v1alpha1.ServiceTypeHeadless
	xb.Spec.Service.Labels, xb.Spec.Service.Annotations = nil, nil
	svc := desiredService(xb, v4Fam)
	if svc.Name != "postgres" {
		t.Errorf("name %q, want spec.service.name", svc.Name)
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || svc.Spec.Type != corev1.ServiceTypeClusterIP {
		t.Errorf("headless: type %s clusterIP %q, want ClusterIP with clusterIP None", svc.Spec.Type, svc.Spec.ClusterIP)
	}
	if len(svc.Labels) != 1 || svc.Labels[v1alpha1.BackendLabel] != "db" {
		t.Errorf("labels %v, want only %s=db (the backend's name, not the Service's)", svc.Labels, v1alpha1.BackendLabel)
	}
	if want := map[string]string{managedMetadataAnnotation: "{}"}; !reflect.DeepEqual(svc.Annotations, want) {
		t.Errorf("annotations %v, want only %v", svc.Annotations, want)
	}
}

func TestDesiredServiceFamilies(t *testing.T) {
	cases := []struct {
		name   string
		fams   []corev1.IPFamily
		policy *corev1.IPFamilyPolicy
	}{
		{"none", nil, nil},
		{"IPv4", v4Fam, ptr.To(corev1.IPFamilyPolicySingleStack)},
		{"IPv6", v6Fam, ptr.To(corev1.IPFamilyPolicySingleStack)},
		{"dual", dualFam, ptr.To(corev1.IPFamilyPolicyPreferDualStack)},
		{"dual, IPv6 first", []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}, ptr.To(corev1.IPFamilyPolicyPreferDualStack)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			svc := desiredService(testBackend(), c.fams)
			if !reflect.DeepEqual(svc.Spec.IPFamilies, c.fams) {
				t.Errorf("ipFamilies %v, want %v", svc.Spec.IPFamilies, c.fams)
			}
			if !reflect.DeepEqual(svc.Spec.IPFamilyPolicy, c.policy) {
				t.Errorf("ipFamilyPolicy %v, want %v", ptr.Deref(svc.Spec.IPFamilyPolicy, "<nil>"), ptr.Deref(c.policy, "<nil>"))
			}
		})
	}
}

func TestIPFamilies(t *testing.T) {
	v4, v6, fq := v1alpha1.AddressTypeIPv4, v1alpha1.AddressTypeIPv6, v1alpha1.AddressTypeFQDN
	ep := func(typ discoveryv1.AddressType) publish.Endpoint {
		return publish.Endpoint{AddressType: typ, Address: "x"}
	}
	cases := []struct {
		name string
		spec []v1alpha1.AddressType
		eps  []publish.Endpoint
		want []corev1.IPFamily
	}{
		{"resolved IPv4 only", []v1alpha1.AddressType{v4, v6}, []publish.Endpoint{ep("IPv4")}, v4Fam},
		{"resolved IPv6 only", []v1alpha1.AddressType{v4, v6}, []publish.Endpoint{ep("IPv6")}, v6Fam},
		{"resolved both, spec order", []v1alpha1.AddressType{v6, v4}, []publish.Endpoint{ep("IPv4"), ep("IPv6")},
			[]corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}},
		{"resolved both, spec order IPv4 first", []v1alpha1.AddressType{v4, v6}, []publish.Endpoint{ep("IPv6"), ep("IPv4")}, dualFam},
		{"none resolved: the spec's", []v1alpha1.AddressType{v4, v6}, nil, dualFam},
		{"none resolved, IPv6 spec", []v1alpha1.AddressType{v6}, nil, v6Fam},
		{"FQDN ignored in the spec", []v1alpha1.AddressType{fq, v4}, []publish.Endpoint{ep("FQDN")}, v4Fam},
		{"FQDN only", []v1alpha1.AddressType{fq}, []publish.Endpoint{ep("FQDN")}, nil},
		{"only FQDN resolved: the spec's IP families", []v1alpha1.AddressType{v4, v6, fq}, []publish.Endpoint{ep("FQDN")}, dualFam},
		{"resolved family not in spec ignored", []v1alpha1.AddressType{v4}, []publish.Endpoint{ep("IPv6")}, v4Fam},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := ipFamilies(c.spec, c.eps); !reflect.DeepEqual(got, c.want) {
				t.Errorf("ipFamilies = %v, want %v", got, c.want)
			}
		})
	}
}

// asStored is want as the API server returns it after a create: with the
// fields it fills in.
func asStored(want *corev1.Service) *corev1.Service {
	s := want.DeepCopy()
	s.UID, s.ResourceVersion = "svc-uid", "42"
	s.Spec.ClusterIP = "10.96.0.10"
	s.Spec.ClusterIPs = []string{"10.96.0.10"}
	if len(s.Spec.IPFamilies) > 1 {
		s.Spec.ClusterIPs = append(s.Spec.ClusterIPs, "fd00:10:96::a")
	}
	s.Spec.SessionAffinity = corev1.ServiceAffinityNone
	s.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyCluster)
	return s
}

func TestMergeService(t *testing.T) {
	xb := testBackend()
	single := desiredService(xb, v4Fam)
	dualWant := desiredService(xb, dualFam)

	cases := []struct {
		name    string
		current func() *corev1.Service
		want    *corev1.Service
		changed bool
		check   func(t *testing.T, current, out *corev1.Service)
	}{
		{
			name:    "no change",
			current: func() *corev1.Service { return asStored(single) },
			want:    single,
		},
		{
			name:    "no change, dual stack",
			current: func() *corev1.Service { return asStored(dualWant) },
			want:    dualWant,
		},
		{
			name: "no change without annotations",
			current: func() *corev1.Service {
				s := asStored(single)
				s.Annotations = nil
				return s
			},
			want: func() *corev1.Service { s := single.DeepCopy(); s.Annotations = nil; return s }(),
		},
		{
			name: "selector removed",
			current: func() *corev1.Service {
				s := asStored(single)
				s.Spec.Selector = map[string]string{"app": "db"}
				return s
			},
			want:    single,
			changed: true,
			check: func(t *testing.T, _, out *corev1.Service) {
				if out.Spec.Selector != nil {
					t.Errorf("selector %v kept", out.Spec.Selector)
				}
			},
		},
		{
			name: "foreign labels and annotations kept, ours corrected",
			current: func() *corev1.Service {
				s := asStored(single)
				s.Labels = map[string]string{"team": "other", "argocd.argoproj.io/instance": "x"}
				s.Annotations = map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{}"}
				return s
			},
			want:    single,
			changed: true,
			check: func(t *testing.T, _, out *corev1.Service) {
				wantLabels := map[string]string{"team": "payments", "argocd.argoproj.io/instance": "x", v1alpha1.BackendLabel: "db"}
				if !reflect.DeepEqual(out.Labels, wantLabels) {
					t.Errorf("labels %v, want %v", out.Labels, wantLabels)
				}
				wantAnn := map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{}", "note": "external",
					managedMetadataAnnotation: single.Annotations[managedMetadataAnnotation]}
				if !reflect.DeepEqual(out.Annotations, wantAnn) {
					t.Errorf("annotations %v, want %v", out.Annotations, wantAnn)
				}
			},
		},
		{
			name: "keys removed from the spec removed, foreign keys kept",
			current: func() *corev1.Service {
				s := asStored(single)
				s.Labels["old"], s.Labels["foreign"] = "x", "y"
				s.Annotations["old-note"], s.Annotations["foreign-note"] = "x", "y"
				s.Annotations[managedMetadataAnnotation] = `{"labels":["old","team"],"annotations":["note","old-note"]}`
				return s
			},
			want:    single,
			changed: true,
			check: func(t *testing.T, _, out *corev1.Service) {
				if _, ok := out.Labels["old"]; ok {
					t.Errorf("label old, removed from the spec, kept: %v", out.Labels)
				}
				if _, ok := out.Annotations["old-note"]; ok {
					t.Errorf("annotation old-note, removed from the spec, kept: %v", out.Annotations)
				}
				if out.Labels["foreign"] != "y" || out.Annotations["foreign-note"] != "y" {
					t.Errorf("foreign keys lost: %v %v", out.Labels, out.Annotations)
				}
			},
		},
		{
			name: "server fields kept while ports change",
			current: func() *corev1.Service {
				s := asStored(single)
				s.Spec.Ports = s.Spec.Ports[:1]
				s.Spec.Ports[0].TargetPort = intstr.FromInt32(1)
				return s
			},
			want:    single,
			changed: true,
			check: func(t *testing.T, current, out *corev1.Service) {
				if !reflect.DeepEqual(out.Spec.Ports, single.Spec.Ports) {
					t.Errorf("ports %+v, want %+v", out.Spec.Ports, single.Spec.Ports)
				}
				if out.Spec.ClusterIP != current.Spec.ClusterIP || !reflect.DeepEqual(out.Spec.ClusterIPs, current.Spec.ClusterIPs) ||
					out.ResourceVersion != "42" || out.UID != "svc-uid" || out.Spec.SessionAffinity != corev1.ServiceAffinityNone {
					t.Errorf("server-set fields lost: %+v", out)
				}
			},
		},
		{
			name: "node ports kept",
			current: func() *corev1.Service {
				s := asStored(single)
				s.Spec.Ports[0].NodePort = 30432
				return s
			},
			want: single,
			check: func(t *testing.T, _, out *corev1.Service) {
				if out.Spec.Ports[0].NodePort != 30432 {
					t.Errorf("nodePort %d, want 30432 kept", out.Spec.Ports[0].NodePort)
				}
			},
		},
		{
			name: "owner reference restored",
			current: func() *corev1.Service {
				s := asStored(single)
				s.OwnerReferences[0].BlockOwnerDeletion = nil
				return s
			},
			want:    single,
			changed: true,
			check: func(t *testing.T, _, out *corev1.Service) {
				if !reflect.DeepEqual(out.OwnerReferences, single.OwnerReferences) {
					t.Errorf("owner references %+v", out.OwnerReferences)
				}
			},
		},
		{
			name: "PreferDualStack on a single-stack cluster is satisfied",
			current: func() *corev1.Service {
				s := asStored(dualWant)
				s.Spec.IPFamilies = v4Fam
				s.Spec.ClusterIPs = s.Spec.ClusterIPs[:1]
				return s
			},
			want: dualWant,
		},
		{
			name:    "dual stack to single stack drops the second cluster IP",
			current: func() *corev1.Service { return asStored(dualWant) },
			want:    single,
			changed: true,
			check: func(t *testing.T, _, out *corev1.Service) {
				if ptr.Deref(out.Spec.IPFamilyPolicy, "") != corev1.IPFamilyPolicySingleStack ||
					!reflect.DeepEqual(out.Spec.IPFamilies, v4Fam) || !reflect.DeepEqual(out.Spec.ClusterIPs, []string{"10.96.0.10"}) ||
					out.Spec.ClusterIP != "10.96.0.10" {
					t.Errorf("families %v policy %v clusterIPs %v", out.Spec.IPFamilies, ptr.Deref(out.Spec.IPFamilyPolicy, ""), out.Spec.ClusterIPs)
				}
			},
		},
		{
			name:    "single stack to dual stack",
			current: func() *corev1.Service { return asStored(single) },
			want:    dualWant,
			changed: true,
			check: func(t *testing.T, _, out *corev1.Service) {
				if ptr.Deref(out.Spec.IPFamilyPolicy, "") != corev1.IPFamilyPolicyPreferDualStack ||
					!reflect.DeepEqual(out.Spec.IPFamilies, dualFam) || !reflect.DeepEqual(out.Spec.ClusterIPs, []string{"10.96.0.10"}) {
					t.Errorf("families %v policy %v clusterIPs %v", out.Spec.IPFamilies, ptr.Deref(out.Spec.IPFamilyPolicy, ""), out.Spec.ClusterIPs)
				}
			},
		},
		{
			name: "no families wanted leaves the server's",
			current: func() *corev1.Service {
				return asStored(single)
			},
			want: desiredService(xb, nil),
		},
		{
			name: "trafficDistribution follows the spec",
			current: func() *corev1.Service {
				s := asStored(single)
				s.Spec.TrafficDistribution = nil
				return s
			},
			want:    single,
			changed: true,
			check: func(t *testing.T, _, out *corev1.Service) {
				if ptr.Deref(out.Spec.TrafficDistribution, "") != "PreferClose" {
					t.Errorf("trafficDistribution %v", out.Spec.TrafficDistribution)
				}
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			current := c.current()
			before := current.DeepCopy()
			out, changed := mergeService(current, c.want)
			if changed != c.changed {
				t.Errorf("changed = %v, want %v\ncurrent %+v\nout     %+v", changed, c.changed, current, out)
			}
			if !reflect.DeepEqual(current, before) {
				t.Error("mergeService changed current")
			}
			if c.check != nil {
				c.check(t, current, out)
			}
			// Merging the result again changes nothing.
			if _, again := mergeService(out, c.want); again {
				t.Error("merging the merged Service again reports a change")
			}
		})
	}
}

func TestFamiliesSatisfied(t *testing.T) {
	spec := func(policy corev1.IPFamilyPolicy, fams ...corev1.IPFamily) corev1.ServiceSpec {
		s := corev1.ServiceSpec{IPFamilies: fams}
		if policy != "" {
			s.IPFamilyPolicy = ptr.To(policy)
		}
		return s
	}
	single, prefer, require := corev1.IPFamilyPolicySingleStack, corev1.IPFamilyPolicyPreferDualStack, corev1.IPFamilyPolicyRequireDualStack
	v4, v6 := corev1.IPv4Protocol, corev1.IPv6Protocol
	cases := []struct {
		name          string
		current, want corev1.ServiceSpec
		ok            bool
	}{
		{"same single", spec(single, v4), spec(single, v4), true},
		{"same dual", spec(prefer, v4, v6), spec(prefer, v4, v6), true},
		{"PreferDualStack got one family", spec(prefer, v4), spec(prefer, v4, v6), true},
		{"policy differs", spec(prefer, v4, v6), spec(single, v4), false},
		{"RequireDualStack is not PreferDualStack", spec(require, v4, v6), spec(prefer, v4, v6), false},
		{"primary differs", spec(single, v6), spec(single, v4), false},
		{"dual order differs", spec(prefer, v6, v4), spec(prefer, v4, v6), false},
		{"no current families", spec(single), spec(single, v4), false},
		{"no current policy", spec("", v4), spec(single, v4), false},
		{"single stack wanted, two present", spec(single, v4, v6), spec(single, v4), false},
	}
	for _, c := range cases {
		if got := familiesSatisfied(c.current, c.want); got != c.ok {
			t.Errorf("%s: familiesSatisfied = %v, want %v", c.name, got, c.ok)
		}
	}
}

func TestRecreateReason(t *testing.T) {
	xb := testBackend()
	clusterIP := asStored(desiredService(xb, v4Fam))
	headlessXB := testBackend()
	headlessXB.Spec.Service.Type = v1alpha1.ServiceTypeHeadless
	headless := desiredService(headlessXB, v4Fam)
	headlessStored := headless.DeepCopy()
	headlessStored.Spec.ClusterIPs = []string{corev1.ClusterIPNone}

	cases := []struct {
		name          string
		current, want *corev1.Service
		reason        []string
	}{
		{"same", clusterIP, desiredService(xb, v4Fam), nil},
		{"second family added", clusterIP, desiredService(xb, dualFam), nil},
		{"no families wanted", clusterIP, desiredService(xb, nil), nil},
		{"ClusterIP to Headless", clusterIP, headless, []string{"ClusterIP and Headless"}},
		{"Headless to ClusterIP", headlessStored, desiredService(xb, v4Fam), []string{"ClusterIP and Headless"}},
		{"headless stays", headlessStored, headless, nil},
		{"primary family changes", clusterIP, desiredService(xb, v6Fam), []string{"primary IP family", "from IPv4 to IPv6"}},
		{"primary family changes in dual stack", clusterIP,
			desiredService(xb, []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}), []string{"from IPv4 to IPv6"}},
	}
	for _, c := range cases {
		got := recreateReason(c.current, c.want)
		if c.reason == nil {
			if got != "" {
				t.Errorf("%s: recreateReason = %q, want none", c.name, got)
			}
			continue
		}
		for _, r := range c.reason {
			if !strings.Contains(got, r) {
				t.Errorf("%s: recreateReason = %q, want it to contain %q", c.name, got, r)
			}
		}
	}
}

func TestConflictMessage(t *testing.T) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "payments"}}
	svc.Spec.Selector = map[string]string{"app": "db"}
	msg := conflictMessage(svc)
	for _, s := range []string{"payments/db", "no owner", "has a selector", "spec.service.name"} {
		if !strings.Contains(msg, s) {
			t.Errorf("message %q does not contain %q", msg, s)
		}
	}
	other := testBackend()
	other.Name = "other"
	owned := desiredService(other, v4Fam)
	if msg := conflictMessage(owned); !strings.Contains(msg, "owned by ExternalBackend other") || strings.Contains(msg, "selector") {
		t.Errorf("message %q", msg)
	}
}

func TestKeepPrimary(t *testing.T) {
	v4, v6 := corev1.IPv4Protocol, corev1.IPv6Protocol
	dual := []v1alpha1.AddressType{v1alpha1.AddressTypeIPv4, v1alpha1.AddressTypeIPv6}
	for _, tc := range []struct {
		name          string
		fams, current []corev1.IPFamily
		spec          []v1alpha1.AddressType
		want          []corev1.IPFamily
	}{
		{"no Service yet", []corev1.IPFamily{v6}, nil, dual, []corev1.IPFamily{v6}},
		{"primary still resolved", []corev1.IPFamily{v4, v6}, []corev1.IPFamily{v4}, dual, []corev1.IPFamily{v4, v6}},
		{"primary empty for now, kept first", []corev1.IPFamily{v6}, []corev1.IPFamily{v4, v6}, dual, []corev1.IPFamily{v4, v6}},
		{"primary no longer in the spec", []corev1.IPFamily{v6}, []corev1.IPFamily{v4}, []v1alpha1.AddressType{v1alpha1.AddressTypeIPv6}, []corev1.IPFamily{v6}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := keepPrimary(tc.fams, tc.current, tc.spec); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("keepPrimary = %v, want %v", got, tc.want)
			}
		})
	}
}
