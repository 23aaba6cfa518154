package importer

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/backendslice/backendslice/api/v1alpha1"
)

// service is a selectorless Service in ns with one port.
func service(ns, name string, mutate ...func(*corev1.Service)) corev1.Service {
	s := corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
	for _, m := range mutate {
		m(&s)
	}
	return s
}

// slice is a hand-written IPv4 slice of Service svc in ns, on port 8080.
func slice(ns, name, svc string, addrs ...string) discoveryv1.EndpointSlice {
	s := discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{
			discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: "cluster-admins"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}},
	}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}})
	}
	return s
}

func TestConvert(t *testing.T) {
	for _, tc := range []struct {
		name     string
		objs     Objects
		opt      Options
		backends []string // namespace/name as written
		refused  []string // beginnings of the refusal notes, in order
	}{
		{
			name:     "a selectorless Service and its slice",
			objs:     Objects{Services: []corev1.Service{service("a", "db")}, Slices: []discoveryv1.EndpointSlice{slice("a", "db-1", "db", "192.0.2.1")}},
			backends: []string{"a/db"},
		},
		{
			name: "a Service with a selector, the API server's own, a backend's",
			objs: Objects{Services: []corev1.Service{
				service("a", "web", func(s *corev1.Service) { s.Spec.Selector = map[string]string{"app": "web"} }),
				service("default", "kubernetes"),
				service("a", "db", func(s *corev1.Service) { s.Labels = map[string]string{v1alpha1.BackendLabel: "db"} }),
			}, Slices: []discoveryv1.EndpointSlice{slice("a", "web-1", "web", "10.244.0.1"), slice("default", "kubernetes", "kubernetes", "192.0.2.9"), slice("a", "db-1", "db", "192.0.2.1")}},
			refused: []string{
				"refused: Service a/db: already published by backendslice",
				"refused: Service a/web: has a selector",
				"refused: Service default/kubernetes: the API server's own Service",
			},
		},
		{
			name:    "a headless Service without ports",
			objs:    Objects{Services: []corev1.Service{service("a", "db", func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.Ports = corev1.ClusterIPNone, nil })}},
			refused: []string{"refused: Service a/db: a Service without ports"},
		},
		{
			name:    "a Service without endpoints",
			objs:    Objects{Services: []corev1.Service{service("a", "db")}, Slices: []discoveryv1.EndpointSlice{slice("a", "db-1", "db")}},
			refused: []string{"refused: Service a/db: no endpoint to publish"},
		},
		{
			name: "objects without a namespace are in the one given, and their backends name none",
			objs: Objects{Services: []corev1.Service{service("", "db")}, Slices: []discoveryv1.EndpointSlice{slice("", "db-1", "db", "192.0.2.1")},
				Endpoints: []corev1.Endpoints{{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "db"}}}},
			opt:      Options{Namespace: "payments"},
			backends: []string{"/db"},
			refused:  []string{"refused: Endpoints other/db: no Service of its name is in the input"},
		},
		{
			name: "slices without a Service, twice, or without the label",
			objs: Objects{Services: []corev1.Service{service("a", "db")}, Slices: []discoveryv1.EndpointSlice{
				slice("a", "db-1", "db", "192.0.2.1"), slice("a", "db-1", "db", "192.0.2.2"), slice("a", "gone-1", "gone", "192.0.2.3"),
				unlabelled(slice("a", "loose", "db", "192.0.2.4")),
			}},
			backends: []string{"a/db"},
			refused: []string{
				"refused: EndpointSlice a/db-1: appears twice",
				"refused: EndpointSlice a/loose: no kubernetes.io/service-name label",
				"refused: EndpointSlice a/gone-1: its kubernetes.io/service-name label names Service gone",
			},
		},
		{
			name: "ExternalName Services: outside, inside the cluster, without ports, an IP",
			objs: Objects{Services: []corev1.Service{
				service("a", "out", toExternalName("API.Example.com.")),
				service("a", "in", toExternalName("db.other.svc")),
				service("a", "noports", toExternalName("x.example.com"), func(s *corev1.Service) { s.Spec.Ports = nil }),
				service("a", "ip", toExternalName("192.0.2.1")),
				service("a", "empty", toExternalName("")),
			}},
			backends: []string{"a/out"},
			refused: []string{
				"refused: Service a/empty: an ExternalName Service without an externalName",
				"refused: Service a/in: externalName db.other.svc points back into the cluster",
				"refused: Service a/ip: externalName 192.0.2.1 is an IP address",
				"refused: Service a/noports: an ExternalName Service without ports",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := Convert(tc.objs, tc.opt)
			var got []string
			for _, b := range res.Backends {
				got = append(got, b.ExternalBackend.Namespace+"/"+b.ExternalBackend.Name)
			}
			if strings.Join(got, ",") != strings.Join(tc.backends, ",") {
				t.Errorf("backends %q, want %q", got, tc.backends)
			}
			assertNotes(t, res.Refused, tc.refused...)
		})
	}
}

// unlabelled is s without its service-name label.
func unlabelled(s discoveryv1.EndpointSlice) discoveryv1.EndpointSlice {
	delete(s.Labels, discoveryv1.LabelServiceName)
	return s
}

// toExternalName makes a Service an ExternalName one to target.
func toExternalName(target string) func(*corev1.Service) {
	return func(s *corev1.Service) {
		s.Spec.Type, s.Spec.ExternalName = corev1.ServiceTypeExternalName, target
	}
}

func TestConvertExternalName(t *testing.T) {
	svc := service("a", "out", toExternalName("API.Example.com."), func(s *corev1.Service) {
		s.Spec.Ports = []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt32(8443)}, {Port: 53, Protocol: corev1.ProtocolUDP}}
	})
	res := Convert(Objects{Services: []corev1.Service{svc}, Slices: []discoveryv1.EndpointSlice{slice("a", "out-1", "out", "192.0.2.1")}},
		Options{DNSProvider: "dns-eu"})
	if len(res.Backends) != 1 {
		t.Fatalf("no backend: %q", res.Refused)
	}
	spec := res.Backends[0].ExternalBackend.Spec
	want := v1alpha1.ExternalBackendSpec{
		Service: v1alpha1.ServiceSpec{Ports: []v1alpha1.ServicePort{{Name: "https", Port: 443}, {Name: "udp-53", Port: 53, Protocol: "UDP"}}},
		Sources: []v1alpha1.Source{{Name: "external-name", ProviderRef: &v1alpha1.ProviderReference{Name: "dns-eu"}, DNS: &v1alpha1.DNSSource{Name: "api.example.com"}}},
	}
	if got, _ := yaml.Marshal(spec); string(got) != string(must(yaml.Marshal(want))) {
		t.Errorf("spec\n%s\nwant\n%s", got, must(yaml.Marshal(want)))
	}
	assertNotes(t, res.Backends[0].Notes,
		"left out: EndpointSlice a/out-1: consumers ignore the EndpointSlices of an ExternalName Service",
		"changed: Service a/out: clients got a CNAME to api.example.com",
		"note: Service a/out: port https: targetPort 8443 was never used",
		"note: Service a/out: port 53 has no name",
	)
}

// must is v, for values whose error a test does not expect.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestServicePorts(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ports []corev1.ServicePort
		slice []discoveryv1.EndpointPort
		want  string
		notes []string
	}{
		{
			name:  "targetPort from the endpoints, appProtocol from both",
			ports: []corev1.ServicePort{{Name: "pg", Port: 5432, TargetPort: intstr.FromInt32(5432), AppProtocol: ptr.To("postgresql")}},
			slice: []discoveryv1.EndpointPort{{Name: ptr.To("pg"), Port: ptr.To[int32](15432), AppProtocol: ptr.To("postgresql")}},
			want:  "pg 5432->15432 postgresql",
		},
		{
			name:  "an unused numeric targetPort",
			ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(81)}},
			slice: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}},
			want:  "http 80->8080",
			notes: []string{"note: Service a/s: port http: targetPort 81 was never used"},
		},
		{
			name:  "a Service port no endpoint has, with a named targetPort",
			ports: []corev1.ServicePort{{Name: "http", Port: 80}, {Name: "admin", Port: 9000, TargetPort: intstr.FromString("admin")}},
			slice: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](80)}},
			want:  "http 80->80; admin 9000->9000",
			notes: []string{`changed: Service a/s: port admin (9000/TCP) had no endpoint port of that name and protocol, so it reached no endpoint: now it reaches port 9000 of every endpoint (its targetPort "admin" is a Pod's port name`},
		},
		{
			name:  "an endpoint port the Service does not name, or names with another protocol",
			ports: []corev1.ServicePort{{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}},
			slice: []discoveryv1.EndpointPort{{Name: ptr.To("dns"), Port: ptr.To[int32](53), Protocol: ptr.To(corev1.ProtocolTCP)}},
			want:  "dns 53->53",
			notes: []string{"changed: Service a/s: port dns (53/UDP) had no endpoint port", "left out: Service a/s: endpoint port dns:53/TCP has no Service port"},
		},
		{
			name:  "appProtocol on one side only",
			ports: []corev1.ServicePort{{Name: "a", Port: 1, AppProtocol: ptr.To("http")}, {Name: "b", Port: 2}},
			slice: []discoveryv1.EndpointPort{{Name: ptr.To("a"), Port: ptr.To[int32](1)}, {Name: ptr.To("b"), Port: ptr.To[int32](2), AppProtocol: ptr.To("h2c")}},
			want:  "a 1->1 http; b 2->2 h2c",
			notes: []string{"changed: Service a/s: port a: the Service port's appProtocol http is now the endpoints' too", "changed: Service a/s: port b: the endpoints' appProtocol h2c is now the Service port's too"},
		},
		{
			name:  "long and clashing names",
			ports: []corev1.ServicePort{{Name: "maintenance-port1", Port: 1}, {Name: "maintenance-port2", Port: 2}},
			slice: []discoveryv1.EndpointPort{{Name: ptr.To("maintenance-port1"), Port: ptr.To[int32](1)}, {Name: ptr.To("maintenance-port2"), Port: ptr.To[int32](2)}},
			want:  "maintenance-por 1->1; maintenance-p-2 2->2",
			notes: []string{"changed: Service a/s: port name maintenance-port1 is longer", "changed: Service a/s: port name maintenance-port2 is longer"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nb := &notebook{}
			svc := service("a", "s", func(s *corev1.Service) { s.Spec.Ports = tc.ports })
			ports := servicePorts(&svc, newPortSet("x", tc.slice, nb), nb)
			var got []string
			for _, p := range ports {
				s := fmt.Sprintf("%s %d->%d", p.Name, p.Port, ptr.Deref(p.TargetPort, p.Port))
				if p.AppProtocol != nil {
					s += " " + *p.AppProtocol
				}
				got = append(got, s)
			}
			if strings.Join(got, "; ") != tc.want {
				t.Errorf("ports %q, want %q", strings.Join(got, "; "), tc.want)
			}
			assertNotes(t, nb.notes(), tc.notes...)
		})
	}
}

func TestStaticSourcesSplit(t *testing.T) {
	endpoints := func(family v1alpha1.AddressType, n int) []candidate {
		var out []candidate
		for i := range n {
			addr := fmt.Sprintf("10.%d.%d.1", i/256, i%256)
			if family == v1alpha1.AddressTypeIPv6 {
				addr = fmt.Sprintf("2001:db8::%x", i)
			}
			out = append(out, candidate{family: family, endpoint: v1alpha1.StaticEndpoint{Address: addr}})
		}
		return out
	}
	nb := &notebook{}
	srcs := staticSources("Service a/s", endpoints(v1alpha1.AddressTypeIPv4, 1500), "vms", nb)
	if len(srcs) != 2 || srcs[0].Name != "imported" || srcs[1].Name != "imported-2" ||
		len(srcs[0].Static.Endpoints) != 1000 || len(srcs[1].Static.Endpoints) != 500 || srcs[1].ProviderRef.Name != "vms" {
		t.Errorf("sources %d: %+v", len(srcs), srcs)
	}
	assertNotes(t, nb.notes())
	srcs = staticSources("Service a/s", append(endpoints(v1alpha1.AddressTypeIPv4, 12000), endpoints(v1alpha1.AddressTypeIPv6, 9000)...), "", nb)
	if len(srcs) != 16 || srcs[15].Static.Endpoints[999].Address != "2001:db8::176f" {
		t.Errorf("%d sources, the last ending with %s", len(srcs), srcs[len(srcs)-1].Static.Endpoints[999].Address)
	}
	assertNotes(t, nb.notes(),
		"left out: Service a/s: 12000 IPv4 endpoints, and an ExternalBackend publishes at most 10000 of a family (--max-endpoints-per-backend): the last 2000 are not carried",
		"left out: Service a/s: more than 16000 endpoints (16 sources of 1000): the last 3000 are not carried")
}

func TestAdoption(t *testing.T) {
	managedBy := func(s discoveryv1.EndpointSlice, by string) discoveryv1.EndpointSlice {
		if by == "" {
			delete(s.Labels, discoveryv1.LabelManagedBy)
		} else {
			s.Labels[discoveryv1.LabelManagedBy] = by
		}
		return s
	}
	otherPort := func(s discoveryv1.EndpointSlice) discoveryv1.EndpointSlice {
		s.Ports[0].Port = ptr.To[int32](8081)
		return s
	}
	for _, tc := range []struct {
		name  string
		objs  Objects
		want  *v1alpha1.ServiceAdoption
		notes []string
	}{
		{
			name: "the managed-by values of the hand-written slices",
			objs: Objects{Services: []corev1.Service{service("a", "s")}, Slices: []discoveryv1.EndpointSlice{
				managedBy(slice("a", "s-1", "s", "192.0.2.1"), "netops"), managedBy(slice("a", "s-2", "s", "192.0.2.2"), ""),
				slice("a", "s-3", "s", "192.0.2.3"), managedBy(slice("a", "s-4", "s", "192.0.2.4"), "netops"),
			}},
			want:  &v1alpha1.ServiceAdoption{HandWrittenManagedBy: []string{"cluster-admins", "netops"}},
			notes: []string{"note: EndpointSlice a/s-2: has no endpointslice.kubernetes.io/managed-by label", "note: Service a/s: spec.service.adopt: the controller takes this Service over"},
		},
		{
			name: "what adoption leaves, or waits for",
			objs: Objects{Services: []corev1.Service{service("a", "s")}, Slices: []discoveryv1.EndpointSlice{
				slice("a", "s-1", "s", "192.0.2.1", "192.0.2.2"), otherPort(slice("a", "s-2", "s", "192.0.2.3")),
				managedBy(slice("a", "s-3", "s", "192.0.2.4"), managedBySliceController),
			}, Endpoints: []corev1.Endpoints{{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "s", Labels: map[string]string{discoveryv1.LabelSkipMirror: "true"}},
				Subsets: []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: "192.0.2.9"}}, Ports: []corev1.EndpointPort{{Name: "http", Port: 8080, Protocol: corev1.ProtocolTCP}}}}}}},
			want: &v1alpha1.ServiceAdoption{HandWrittenManagedBy: []string{"cluster-admins"}},
			notes: []string{
				"note: EndpointSlice a/s-3: labelled endpointslice.kubernetes.io/managed-by=endpointslice-controller.k8s.io",
				"left out: Endpoints a/s: labelled endpointslice.kubernetes.io/skip-mirror=true",
				"left out: EndpointSlice a/s-2: endpoint 192.0.2.3: reached on ports {http:8081/TCP}",
				"note: EndpointSlice a/s-2: adoption keeps it until the controller's slices carry 192.0.2.3 TCP:8081 ready",
				"note: EndpointSlice a/s-3: adoption leaves it in place as another controller's",
				"note: Endpoints a/s: adoption keeps it until the controller's slices carry 192.0.2.9 TCP:8080 ready",
				"note: Service a/s: spec.service.adopt",
			},
		},
		{
			name: "a NodePort Service",
			objs: Objects{Services: []corev1.Service{service("a", "s", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort })},
				Slices: []discoveryv1.EndpointSlice{slice("a", "s-1", "s", "192.0.2.1")}},
			notes: []string{
				"note: Service a/s: not adopted (no spec.service.adopt): the controller refuses to adopt a Service of type NodePort",
				"left out: Service a/s: type NodePort is not carried",
			},
		},
		{
			name: "a Service whose primary family has no endpoint",
			objs: Objects{Services: []corev1.Service{service("a", "s", func(s *corev1.Service) {
				s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
			})}, Slices: []discoveryv1.EndpointSlice{slice("a", "s-1", "s", "192.0.2.1")}},
			notes: []string{"note: Service a/s: not adopted (no spec.service.adopt): the Service's primary IP family IPv6 has no endpoint"},
		},
		{
			name:  "an ExternalName Service",
			objs:  Objects{Services: []corev1.Service{service("a", "s", toExternalName("db.example.com"))}},
			notes: []string{"changed: Service a/s: clients got a CNAME", "note: Service a/s: not adopted (no spec.service.adopt): the controller refuses to adopt a Service of type ExternalName"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := Convert(tc.objs, Options{Adopt: true, StaticProvider: "p", DNSProvider: "p"})
			if len(res.Backends) != 1 {
				t.Fatalf("no backend: %q", res.Refused)
			}
			b := res.Backends[0]
			if got := b.ExternalBackend.Spec.Service.Adopt; string(must(yaml.Marshal(got))) != string(must(yaml.Marshal(tc.want))) {
				t.Errorf("adopt %+v, want %+v", got, tc.want)
			}
			var notes []Note
			for _, n := range b.Notes {
				if !strings.Contains(n.Text, "clusterIP") {
					notes = append(notes, n)
				}
			}
			assertNotes(t, notes, tc.notes...)
		})
	}
}
