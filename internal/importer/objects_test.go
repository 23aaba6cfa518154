package importer

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/backendslice/backendslice/api/v1alpha1"
)

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name                          string
		data                          string
		services, slices, endpoints   int
		passedOver, notes, errorWords string
	}{
		{
			name:     "documents, empty ones and other kinds",
			data:     "---\napiVersion: v1\nkind: Service\nmetadata: {name: a}\n---\n\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n---\nreplicas: 3\n",
			services: 1, passedOver: "(no kind)=1 v1/ConfigMap=1",
		},
		{
			name:     "a v1 List and typed lists whose items have no kind",
			data:     "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Service, metadata: {name: a}}\n- {apiVersion: v1, kind: Endpoints, metadata: {name: a}}\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSliceList\nitems:\n- {metadata: {name: a-1}, addressType: IPv4, endpoints: []}\n",
			services: 1, slices: 1, endpoints: 1,
		},
		{
			name: "JSON",
			data: `{"apiVersion": "v1", "kind": "ServiceList", "items": [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}]}`, services: 2,
		},
		{
			name:  "an EndpointSlice of the version Kubernetes no longer serves",
			data:  "apiVersion: discovery.k8s.io/v1beta1\nkind: EndpointSlice\nmetadata: {name: old, namespace: a}\naddressType: IPv4\n",
			notes: "refused: EndpointSlice a/old: discovery.k8s.io/v1beta1",
		},
		{
			name:       "an unknown field",
			data:       "apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec: {ports: [{name: http, port: 80, targetport: 8080}]}\n",
			errorWords: `document 1: Service a: unknown field "spec.ports[0].targetport"`,
		},
		{
			name:       "a template",
			data:       "apiVersion: v1\nkind: Service\nmetadata:\n  name: {{ .Release.Name }}\n",
			errorWords: "helm template",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := Decode([]byte(tc.data))
			if (err == nil) != (tc.errorWords == "") || err != nil && !strings.Contains(err.Error(), tc.errorWords) {
				t.Fatalf("error %v, want one saying %q", err, tc.errorWords)
			}
			if err != nil {
				return
			}
			var passed []string
			for _, k := range []string{"(no kind)", "v1/ConfigMap"} {
				if n := objs.PassedOver[k]; n > 0 {
					passed = append(passed, k+"="+string(rune('0'+n)))
				}
			}
			if len(objs.Services) != tc.services || len(objs.Slices) != tc.slices || len(objs.Endpoints) != tc.endpoints ||
				strings.Join(passed, " ") != tc.passedOver || len(objs.PassedOver) != len(passed) {
				t.Errorf("read %d Services, %d slices, %d Endpoints, passed over %v", len(objs.Services), len(objs.Slices), len(objs.Endpoints), objs.PassedOver)
			}
			var notes []string
			if tc.notes != "" {
				notes = []string{tc.notes}
			}
			assertNotes(t, objs.Notes, notes...)
		})
	}
}

func TestReadGroups(t *testing.T) {
	headless := func(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone }
	labelled := func(s discoveryv1.EndpointSlice, labels map[string]string) *discoveryv1.EndpointSlice {
		for k, v := range labels {
			s.Labels[k] = v
		}
		for k, v := range labels {
			if v == "-" {
				delete(s.Labels, k)
			}
		}
		return &s
	}
	endpoints := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "s"}, Subsets: []corev1.EndpointSubset{{
		Addresses:         []corev1.EndpointAddress{{IP: "192.0.2.1"}},
		NotReadyAddresses: []corev1.EndpointAddress{{IP: "192.0.2.2"}},
		Ports:             []corev1.EndpointPort{{Name: "http", Port: 8080, Protocol: corev1.ProtocolTCP}},
	}}}
	for _, tc := range []struct {
		name   string
		svc    corev1.Service
		in     owned
		groups []string // origin: endpoints
		notes  []string
	}{
		{
			name:   "the Endpoints object is read, not the slice mirrored from it",
			svc:    service("a", "s"),
			in:     owned{endpoints: endpoints, slices: []*discoveryv1.EndpointSlice{labelled(slice("a", "s-x", "s", "192.0.2.1"), map[string]string{discoveryv1.LabelManagedBy: managedByMirroring})}},
			groups: []string{"Endpoints a/s: 192.0.2.1 ready, 192.0.2.2 not ready"},
			notes:  []string{"note: EndpointSlice a/s-x: mirrored by kube-controller-manager from Endpoints s, which is read instead"},
		},
		{
			name:  "an Endpoints object labelled skip-mirror is not read",
			svc:   service("a", "s"),
			in:    owned{endpoints: &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "s", Labels: map[string]string{discoveryv1.LabelSkipMirror: "true"}}}},
			notes: []string{"left out: Endpoints a/s: labelled endpointslice.kubernetes.io/skip-mirror=true"},
		},
		{
			name: "labels: missing managed-by and headless, ours, and one of the slice's own",
			svc:  service("a", "s", headless, func(s *corev1.Service) { s.Labels = map[string]string{"team": "x"} }),
			in: owned{slices: []*discoveryv1.EndpointSlice{
				labelled(slice("a", "s-1", "s", "192.0.2.1"), map[string]string{discoveryv1.LabelManagedBy: "-", "team": "x", "tier": "db"}),
				labelled(slice("a", "s-2", "s", "192.0.2.2"), map[string]string{discoveryv1.LabelManagedBy: v1alpha1.ManagedByValue}),
			}},
			groups: []string{"EndpointSlice a/s-1: 192.0.2.1 ready"},
			notes: []string{
				"note: EndpointSlice a/s-1: has no endpointslice.kubernetes.io/managed-by label",
				"note: EndpointSlice a/s-1: the service.kubernetes.io/headless label is missing, yet the Service is headless",
				"left out: EndpointSlice a/s-1: label tier not carried",
				"left out: EndpointSlice a/s-2: written by backendslice's controller",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nb := &notebook{}
			groups, _ := readGroups(&tc.svc, &tc.in, nb)
			var got []string
			for _, g := range groups {
				var eps []string
				for _, e := range g.endpoints {
					state := "ready"
					if !ptr.Deref(e.Conditions.Ready, true) {
						state = "not ready"
					}
					eps = append(eps, e.Addresses[0]+" "+state)
				}
				got = append(got, g.origin+": "+strings.Join(eps, ", "))
			}
			if strings.Join(got, "; ") != strings.Join(tc.groups, "; ") {
				t.Errorf("groups %q, want %q", got, tc.groups)
			}
			assertNotes(t, nb.notes(), tc.notes...)
		})
	}
}

func TestCompareHints(t *testing.T) {
	prefer := func(s *corev1.Service) { s.Spec.TrafficDistribution = ptr.To("PreferClose") }
	c := func(addr, zone string, hints ...string) candidate {
		cand := candidate{origin: "s", family: v1alpha1.AddressTypeIPv4, endpoint: v1alpha1.StaticEndpoint{Address: addr, Zone: zone}}
		if len(hints) > 0 {
			cand.hints = &discoveryv1.EndpointHints{}
			for _, h := range hints {
				cand.hints.ForZones = append(cand.hints.ForZones, discoveryv1.ForZone{Name: h})
			}
		}
		return cand
	}
	for _, tc := range []struct {
		name  string
		svc   corev1.Service
		cands []candidate
		notes []string
	}{
		{name: "no hints asked, none written", svc: service("a", "s"), cands: []candidate{c("192.0.2.1", "z1")}},
		{name: "the hints the controller writes", svc: service("a", "s", prefer), cands: []candidate{c("192.0.2.1", "z1", "z1"), c("192.0.2.2", "z2", "z2")}},
		{
			name: "hints the controller would not write", svc: service("a", "s"), cands: []candidate{c("192.0.2.1", "z1", "z1", "z2")},
			notes: []string{"left out: s: endpoint 192.0.2.1: hints are not carried"},
		},
		{
			name: "hints the controller adds", svc: service("a", "s", prefer), cands: []candidate{c("192.0.2.1", "z1")},
			notes: []string{"changed: s: endpoint 192.0.2.1: the controller adds zone hints"},
		},
		{
			name: "none where a ready endpoint has no zone", svc: service("a", "s", prefer), cands: []candidate{c("192.0.2.1", "z1", "z1"), c("192.0.2.2", "")},
			notes: []string{"left out: s: endpoint 192.0.2.1: hints are not carried"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nb := &notebook{}
			compareHints(&tc.svc, tc.cands, nb)
			assertNotes(t, nb.notes(), tc.notes...)
		})
	}
}
