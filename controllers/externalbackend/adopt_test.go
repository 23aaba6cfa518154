package externalbackend

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/publish"
)

// TestAdoptionRefusal: which Services can be adopted, and the words that
// say why not.
func TestAdoptionRefusal(t *testing.T) {
	plain := func(edit func(*corev1.Service)) *corev1.Service {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db", UID: "svc"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.0.0.9", IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol}}}
		if edit != nil {
			edit(s)
		}
		return s
	}
	want := &corev1.Service{Spec: corev1.ServiceSpec{IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol}}}
	cases := []struct {
		name  string
		svc   *corev1.Service
		want  *corev1.Service
		words string
	}{
		{name: "hand-written ClusterIP", svc: plain(nil), want: want},
		{name: "selector", svc: plain(func(s *corev1.Service) { s.Spec.Selector = map[string]string{"a": "b"} }), want: want, words: "has a selector"},
		{name: "another controller's", svc: plain(func(s *corev1.Service) {
			s.OwnerReferences = []metav1.OwnerReference{{Kind: "ExternalBackend", Name: "other", Controller: ptr.To(true)}}
		}), want: want, words: "controlled by ExternalBackend other"},
		{name: "LoadBalancer", svc: plain(func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeLoadBalancer }), want: want, words: "of type LoadBalancer"},
		{name: "ExternalName", svc: plain(func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeExternalName }), want: want, words: "of type ExternalName"},
		{name: "headless asked of a ClusterIP", svc: plain(nil), want: &corev1.Service{Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone}}, words: "changes its cluster IP"},
		{name: "another primary family", svc: plain(nil), want: &corev1.Service{Spec: corev1.ServiceSpec{IPFamilies: []corev1.IPFamily{corev1.IPv6Protocol}}}, words: "primary IP family"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := adoptionRefusal(c.svc, c.want)
			if (got == "") != (c.words == "") || !strings.Contains(got, c.words) {
				t.Errorf("adoptionRefusal = %q, want it to say %q", got, c.words)
			}
		})
	}
}

// TestHandWritten: which of a Service's slices adoption may replace.
func TestHandWritten(t *testing.T) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "db", UID: "svc"}}
	slice := func(managedBy string, owner *metav1.OwnerReference) *discoveryv1.EndpointSlice {
		s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{}}}
		if managedBy != "" {
			s.Labels[discoveryv1.LabelManagedBy] = managedBy
		}
		if owner != nil {
			s.OwnerReferences = []metav1.OwnerReference{*owner}
		}
		return s
	}
	cases := map[string]struct {
		slice *discoveryv1.EndpointSlice
		want  bool
	}{
		"no label":                   {slice("", nil), true},
		"a listed hand-written mark": {slice("cluster-admins", nil), true},
		"the mirror's":               {slice(mirrorManagedBy, nil), false},
		"another tool's":             {slice("tool.example.com", nil), false},
		"owned by the Service":       {slice("", &metav1.OwnerReference{Kind: "Service", Name: "db", UID: "svc", Controller: ptr.To(true)}), true},
		"owned by another object":    {slice("", &metav1.OwnerReference{Kind: "Endpoints", Name: "db", UID: "ep", Controller: ptr.To(true)}), false},
	}
	for name, c := range cases {
		if got := handWritten(c.slice, svc, []string{"cluster-admins"}); got != c.want {
			t.Errorf("%s: handWritten = %v, want %v", name, got, c.want)
		}
	}
}

// TestMissingFrom: a hand-written slice waits for each ready endpoint on
// each of its ports, by address, protocol and number; not-ready ones and
// port names do not count.
func TestMissingFrom(t *testing.T) {
	tcp := func(name string, port int32) discoveryv1.EndpointPort {
		return discoveryv1.EndpointPort{Name: ptr.To(name), Port: ptr.To(port), Protocol: ptr.To(corev1.ProtocolTCP)}
	}
	ours := readyEndpoints([]publish.Endpoint{
		{Address: "192.0.2.1", Serving: true, Ports: []discoveryv1.EndpointPort{tcp("pg", 5432)}},
		{Address: "192.0.2.2", Serving: true, Terminating: true, Ports: []discoveryv1.EndpointPort{tcp("pg", 5432)}},
	})
	theirs := &discoveryv1.EndpointSlice{
		Ports: []discoveryv1.EndpointPort{tcp("", 5432)},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"192.0.2.1"}},
			{Addresses: []string{"192.0.2.2"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}},
			{Addresses: []string{"192.0.2.3"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}},
		},
	}
	got := missingFrom(ours, sliceReady(theirs))
	if len(got) != 1 || got[0] != "192.0.2.2 TCP:5432" {
		t.Errorf("missing %v, want only 192.0.2.2 (ours publish it terminating)", got)
	}
	if s := someOf([]string{"a", "b", "c", "d", "e", "f", "g"}); s != "a, b, c, d, e and 2 more" {
		t.Errorf("someOf = %q", s)
	}
}

// TestAdoptedCondition maps an adoption to its condition.
func TestAdoptedCondition(t *testing.T) {
	if _, ok := adoptedCondition(adoption{}); ok {
		t.Error("a condition without spec.service.adopt")
	}
	c, _ := adoptedCondition(adoption{active: true, done: true})
	if c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonAdopted {
		t.Errorf("done: %+v", c)
	}
	c, _ = adoptedCondition(adoption{active: true, waiting: []string{"EndpointSlice db-1 until ours carry 192.0.2.1 TCP:5432 ready"}})
	if c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonAdopting || !strings.Contains(c.Message, "db-1") {
		t.Errorf("waiting: %+v", c)
	}
}

// TestReconcilingCondition: Reconciling is True only while an adoption
// waits and nothing failed; a failed write (Ready says why) or a refused
// adoption (Stalled says why) removes it, so kstatus never finds it next
// to Stalled.
func TestReconcilingCondition(t *testing.T) {
	waiting := adoption{active: true, waiting: []string{"EndpointSlice db-1 until ours carry 192.0.2.1 TCP:5432 ready"}}
	for _, c := range []struct {
		name    string
		a       adoption
		syncErr error
		want    bool
	}{
		{"no adoption asked for", adoption{}, nil, false},
		{"adoption done", adoption{active: true, done: true}, nil, false},
		{"adoption waiting", waiting, nil, true},
		{"adoption waiting, a write failed", waiting, errors.New("quota"), false},
		{"adoption refused", adoption{active: true}, errAdoptionRefused{msg: "Service x has a selector"}, false},
	} {
		got, ok := reconcilingCondition(c.a, c.syncErr)
		if ok != c.want {
			t.Errorf("%s: Reconciling set = %v, want %v", c.name, ok, c.want)
			continue
		}
		if ok && (got.Type != v1alpha1.ConditionReconciling || got.Status != metav1.ConditionTrue ||
			got.Reason != v1alpha1.ReasonAdopting || !strings.Contains(got.Message, "db-1")) {
			t.Errorf("%s: %+v, want Reconciling=True/Adopting naming what is kept", c.name, got)
		}
	}
}
