package helmtest_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	helmtest "github.com/backendslice/backendslice/test/helm"
)

// renderYAML renders the chart with values written as YAML.
func renderYAML(t *testing.T, values string) []*unstructured.Unstructured {
	t.Helper()
	vals := map[string]any{}
	if err := yaml.Unmarshal([]byte(values), &vals); err != nil {
		t.Fatal(err)
	}
	return render(t, vals)
}

// deployment is the chart's Deployment rendered with values.
func deployment(t *testing.T, values string) appsv1.Deployment {
	t.Helper()
	var d appsv1.Deployment
	typed(t, renderYAML(t, values), "Deployment", &d)
	return d
}

// TestOptionalObjectsAbsentByDefault: the NetworkPolicy and the PodMonitor
// are off unless asked for, and the defaults add no volume, spread
// constraint or environment variable of their own.
func TestOptionalObjectsAbsentByDefault(t *testing.T) {
	objs := render(t, nil)
	for _, kind := range []string{"NetworkPolicy", "PodMonitor"} {
		if n := len(ofKind(objs, kind)); n != 0 {
			t.Errorf("%d %s rendered by default", n, kind)
		}
	}
	var d appsv1.Deployment
	typed(t, objs, "Deployment", &d)
	pod := d.Spec.Template.Spec
	if len(pod.Volumes) != 0 || len(pod.Containers[0].VolumeMounts) != 0 || len(pod.TopologySpreadConstraints) != 0 {
		t.Errorf("volumes %v, mounts %v, spread %v by default", pod.Volumes, pod.Containers[0].VolumeMounts, pod.TopologySpreadConstraints)
	}
	if !slices.Contains(pod.Containers[0].Args, "--stuck-reconcile-timeout=0s") {
		t.Errorf("args %v: want the stuck-reconcile check off by default", pod.Containers[0].Args)
	}
}

// TestSecurityContexts: the defaults are the restricted ones with the
// image's fixed user; values merge over them key by key, and null drops a
// key (OpenShift's restricted SCC assigns its own user) while the rest
// stays.
func TestSecurityContexts(t *testing.T) {
	restrictedContainer := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true), RunAsNonRoot: ptr.To(true),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	seccomp := &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	cases := []struct {
		name          string
		values        string
		wantPod       *corev1.PodSecurityContext
		wantContainer *corev1.SecurityContext
	}{
		{"defaults", "", &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532),
			RunAsGroup: ptr.To[int64](65532), FSGroup: ptr.To[int64](65532), SeccompProfile: seccomp}, restrictedContainer},
		{"OpenShift: the fixed ids dropped", "podSecurityContext: {runAsUser: null, runAsGroup: null, fsGroup: null}",
			&corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), SeccompProfile: seccomp}, restrictedContainer},
		{"another user, the rest kept", "podSecurityContext: {runAsUser: 1001}\nsecurityContext: {runAsUser: 1001}",
			&corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](1001), RunAsGroup: ptr.To[int64](65532),
				FSGroup: ptr.To[int64](65532), SeccompProfile: seccomp},
			&corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true), RunAsNonRoot: ptr.To(true),
				RunAsUser: ptr.To[int64](1001), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}},
		{"the pod's context dropped whole", "podSecurityContext: null", nil, restrictedContainer},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pod := deployment(t, c.values).Spec.Template.Spec
			if !reflect.DeepEqual(pod.SecurityContext, c.wantPod) {
				t.Errorf("pod security context %+v, want %+v", pod.SecurityContext, c.wantPod)
			}
			if got := pod.Containers[0].SecurityContext; !reflect.DeepEqual(got, c.wantContainer) {
				t.Errorf("container security context %+v, want %+v", got, c.wantContainer)
			}
		})
	}
}

// TestEnvironment: POD_NAMESPACE first, then the proxy variables (with the
// API server's address always in NO_PROXY), then extraEnv, in order.
func TestEnvironment(t *testing.T) {
	cases := []struct {
		name, values string
		want         []string
	}{
		{"defaults", "", []string{"POD_NAMESPACE"}},
		{"HTTPS proxy", "proxy: {httpsProxy: \"http://proxy.corp.example:3128\"}",
			[]string{"POD_NAMESPACE", "HTTPS_PROXY=http://proxy.corp.example:3128", "NO_PROXY=$(KUBERNETES_SERVICE_HOST)"}},
		{"both proxies and exceptions", "proxy: {httpsProxy: \"http://p:3128\", httpProxy: \"http://p:3128\", noProxy: \".svc,10.0.0.0/8\"}",
			[]string{"POD_NAMESPACE", "HTTPS_PROXY=http://p:3128", "HTTP_PROXY=http://p:3128", "NO_PROXY=$(KUBERNETES_SERVICE_HOST),.svc,10.0.0.0/8"}},
		{"exceptions without a proxy set nothing", "proxy: {noProxy: .svc}", []string{"POD_NAMESPACE"}},
		{"extra variables", "controller: {extraEnv: [{name: AWS_REGION, value: eu-west-1}, {name: TOKEN, valueFrom: {secretKeyRef: {name: s, key: k}}}]}\nproxy: {httpsProxy: \"http://p:3128\"}",
			[]string{"POD_NAMESPACE", "HTTPS_PROXY=http://p:3128", "NO_PROXY=$(KUBERNETES_SERVICE_HOST)", "AWS_REGION=eu-west-1", "TOKEN"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			for _, e := range deployment(t, c.values).Spec.Template.Spec.Containers[0].Env {
				if e.ValueFrom != nil {
					got = append(got, e.Name)
					continue
				}
				got = append(got, e.Name+"="+e.Value)
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("env %q, want %q", got, c.want)
			}
		})
	}
}

// TestPluginSidecars: each plugins.sidecars entry is a container beside
// the controller, with its image, args, environment, resources and
// mounts, and the controller's restricted security context under its own.
func TestPluginSidecars(t *testing.T) {
	d := deployment(t, `
plugins:
  sidecars:
    - name: hostsfile
      image: registry.example/hostsfile:1.0
      args: [-listen, "127.0.0.1:9100", -file, /etc/hosts.d/hosts.yaml]
      env: [{name: LOG, value: debug}]
      resources: {limits: {memory: 64Mi}}
      volumeMounts: [{name: hosts, mountPath: /etc/hosts.d, readOnly: true}]
      securityContext: {readOnlyRootFilesystem: true}
volumes: [{name: hosts, configMap: {name: hosts}}]
`)
	cs := d.Spec.Template.Spec.Containers
	if len(cs) != 2 || cs[0].Name != "controller" || cs[1].Name != "hostsfile" {
		t.Fatalf("containers %v, want the controller and the sidecar", cs)
	}
	s := cs[1]
	sc := s.SecurityContext
	switch {
	case s.Image != "registry.example/hostsfile:1.0" || !slices.Equal(s.Args, []string{"-listen", "127.0.0.1:9100", "-file", "/etc/hosts.d/hosts.yaml"}):
		t.Errorf("image %s args %v", s.Image, s.Args)
	case len(s.Env) != 1 || s.Env[0].Name != "LOG" || s.Resources.Limits.Memory().String() != "64Mi":
		t.Errorf("env %v resources %v", s.Env, s.Resources)
	case len(s.VolumeMounts) != 1 || s.VolumeMounts[0].MountPath != "/etc/hosts.d":
		t.Errorf("mounts %v", s.VolumeMounts)
	case sc == nil || !ptr.Deref(sc.ReadOnlyRootFilesystem, false) || !ptr.Deref(sc.RunAsNonRoot, false) ||
		ptr.Deref(sc.AllowPrivilegeEscalation, true) || sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1:
		t.Errorf("security context %+v: want the controller's restricted one with readOnlyRootFilesystem", sc)
	}
	if n := len(deployment(t, "").Spec.Template.Spec.Containers); n != 1 {
		t.Errorf("%d containers by default", n)
	}
}

// TestVolumes: volumes and mounts are added after the Consul token's, so
// that a CA for --consul-ca-file can be mounted; the token's volume name is
// the chart's own.
func TestVolumes(t *testing.T) {
	d := deployment(t, `
consul: {tokenSecret: {name: consul-token}}
volumes: [{name: consul-ca, secret: {secretName: consul-ca}}]
volumeMounts: [{name: consul-ca, mountPath: /etc/backendslice/consul-ca, readOnly: true}]
controller: {extraArgs: [--consul-ca-file=/etc/backendslice/consul-ca/ca.crt]}`)
	pod := d.Spec.Template.Spec
	var volumes, mounts []string
	for _, v := range pod.Volumes {
		volumes = append(volumes, v.Name)
	}
	for _, m := range pod.Containers[0].VolumeMounts {
		mounts = append(mounts, m.Name+":"+m.MountPath)
	}
	if !slices.Equal(volumes, []string{"consul-token", "consul-ca"}) ||
		!slices.Equal(mounts, []string{"consul-token:/var/run/secrets/backendslice/consul", "consul-ca:/etc/backendslice/consul-ca"}) {
		t.Errorf("volumes %v mounts %v", volumes, mounts)
	}
	if pod.Volumes[1].Secret == nil || pod.Volumes[1].Secret.SecretName != "consul-ca" {
		t.Errorf("volume %+v, want Secret consul-ca", pod.Volumes[1])
	}
	_, _, err := helmtest.Render(load(t), map[string]any{
		"consul":  map[string]any{"tokenSecret": map[string]any{"name": "t"}},
		"volumes": []any{map[string]any{"name": "consul-token", "emptyDir": map[string]any{}}},
	})
	if err == nil || !strings.Contains(err.Error(), "the name consul-token is the chart's own") {
		t.Errorf("a volume named consul-token beside consul.tokenSecret: got %v", err)
	}
}

// TestTopologySpreadConstraints: a constraint without a label selector
// spreads this release's controller Pods; one with a selector keeps it.
func TestTopologySpreadConstraints(t *testing.T) {
	d := deployment(t, `topologySpreadConstraints:
  - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway}
  - {maxSkew: 2, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {team: platform}}}`)
	got := d.Spec.Template.Spec.TopologySpreadConstraints
	if len(got) != 2 {
		t.Fatalf("%d constraints, want 2", len(got))
	}
	if got[0].LabelSelector == nil || !reflect.DeepEqual(got[0].LabelSelector.MatchLabels, d.Spec.Selector.MatchLabels) ||
		got[0].TopologyKey != "topology.kubernetes.io/zone" || got[0].WhenUnsatisfiable != corev1.ScheduleAnyway {
		t.Errorf("constraint %+v: want the Deployment's selector %v", got[0], d.Spec.Selector.MatchLabels)
	}
	if got[1].LabelSelector == nil || !reflect.DeepEqual(got[1].LabelSelector.MatchLabels, map[string]string{"team": "platform"}) || got[1].MaxSkew != 2 {
		t.Errorf("constraint %+v: want its own selector kept", got[1])
	}
}

// TestNetworkPolicy: the policy selects the controller Pods, lets in the
// metrics port (from metricsFrom) and the health port, and lets out the API
// server, the cluster's DNS, and what egress and extraEgress name; without
// the API server's addresses it is refused, since the controller could not
// start.
func TestNetworkPolicy(t *testing.T) {
	objs := renderYAML(t, `networkPolicy:
  enabled: true
  apiServer: {cidrs: [10.0.0.10/32]}
  egress:
    - {cidrs: [10.20.0.0/16], ports: [8501]}
    - {ports: [{port: 9000, endPort: 9099}, {port: 53, protocol: UDP}]}
  extraEgress: [{ports: [{port: 8500}], to: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: consul}}}]}]
  metricsFrom: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}}]`)
	var np networkingv1.NetworkPolicy
	typed(t, objs, "NetworkPolicy", &np)
	var d appsv1.Deployment
	typed(t, objs, "Deployment", &d)
	if !reflect.DeepEqual(np.Spec.PodSelector.MatchLabels, d.Spec.Selector.MatchLabels) ||
		!slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}) {
		t.Errorf("policy selects %v, types %v", np.Spec.PodSelector, np.Spec.PolicyTypes)
	}
	tcp, udp := ptr.To(corev1.ProtocolTCP), ptr.To(corev1.ProtocolUDP)
	port := func(p int, proto *corev1.Protocol) networkingv1.NetworkPolicyPort {
		return networkingv1.NetworkPolicyPort{Port: ptr.To(intstr.FromInt32(int32(p))), Protocol: proto}
	}
	named := func(name string) networkingv1.NetworkPolicyPort {
		return networkingv1.NetworkPolicyPort{Port: ptr.To(intstr.FromString(name)), Protocol: tcp}
	}
	ipBlock := func(cidr string) networkingv1.NetworkPolicyPeer {
		return networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: cidr}}
	}
	nsPeer := func(ns string) networkingv1.NetworkPolicyPeer {
		return networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}}
	}
	dnsPeer := nsPeer("kube-system")
	dnsPeer.PodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}}
	wantIngress := []networkingv1.NetworkPolicyIngressRule{
		{Ports: []networkingv1.NetworkPolicyPort{named("metrics")}, From: []networkingv1.NetworkPolicyPeer{nsPeer("monitoring")}},
		{Ports: []networkingv1.NetworkPolicyPort{named("health")}},
	}
	ranged := port(9000, tcp)
	ranged.EndPort = ptr.To[int32](9099)
	wantEgress := []networkingv1.NetworkPolicyEgressRule{
		{To: []networkingv1.NetworkPolicyPeer{ipBlock("10.0.0.10/32")}, Ports: []networkingv1.NetworkPolicyPort{port(443, tcp), port(6443, tcp)}},
		{To: []networkingv1.NetworkPolicyPeer{dnsPeer}, Ports: []networkingv1.NetworkPolicyPort{port(53, udp), port(53, tcp)}},
		{To: []networkingv1.NetworkPolicyPeer{ipBlock("10.20.0.0/16")}, Ports: []networkingv1.NetworkPolicyPort{port(8501, tcp)}},
		{Ports: []networkingv1.NetworkPolicyPort{ranged, port(53, udp)}},
		{To: []networkingv1.NetworkPolicyPeer{nsPeer("consul")}, Ports: []networkingv1.NetworkPolicyPort{port(8500, nil)}},
	}
	if !reflect.DeepEqual(np.Spec.Ingress, wantIngress) {
		t.Errorf("ingress\n%+v\nwant\n%+v", np.Spec.Ingress, wantIngress)
	}
	if !reflect.DeepEqual(np.Spec.Egress, wantEgress) {
		t.Errorf("egress\n%+v\nwant\n%+v", np.Spec.Egress, wantEgress)
	}

	_, _, err := helmtest.Render(load(t), map[string]any{"networkPolicy": map[string]any{"enabled": true}})
	if err == nil || !strings.Contains(err.Error(), "networkPolicy.apiServer.cidrs is required") {
		t.Errorf("a NetworkPolicy without the API server's addresses: got %v", err)
	}
}

// TestPodMonitor: the PodMonitor scrapes each controller Pod's metrics port
// with honorLabels (the ExternalBackend's namespace label kept), its labels
// for Prometheus's selector; it and the ServiceMonitor exclude each other.
func TestPodMonitor(t *testing.T) {
	objs := renderYAML(t, "metrics: {podMonitor: {enabled: true, labels: {release: prometheus}, interval: 15s}}")
	if n := len(ofKind(objs, "ServiceMonitor")); n != 0 {
		t.Errorf("%d ServiceMonitors beside the PodMonitor", n)
	}
	pm := ofKind(objs, "PodMonitor")
	if len(pm) != 1 {
		t.Fatalf("%d PodMonitors, want 1", len(pm))
	}
	if pm[0].GetAPIVersion() != "monitoring.coreos.com/v1" || pm[0].GetNamespace() != helmtest.Namespace || pm[0].GetLabels()["release"] != "prometheus" {
		t.Errorf("PodMonitor %s %s/%s labels %v", pm[0].GetAPIVersion(), pm[0].GetNamespace(), pm[0].GetName(), pm[0].GetLabels())
	}
	var d appsv1.Deployment
	typed(t, objs, "Deployment", &d)
	selector, _, _ := unstructured.NestedStringMap(pm[0].Object, "spec", "selector", "matchLabels")
	if !reflect.DeepEqual(selector, d.Spec.Selector.MatchLabels) {
		t.Errorf("PodMonitor selects %v, want the controller Pods %v", selector, d.Spec.Selector.MatchLabels)
	}
	endpoints, _, _ := unstructured.NestedSlice(pm[0].Object, "spec", "podMetricsEndpoints")
	want := []any{map[string]any{"port": "metrics", "path": "/metrics", "interval": "15s", "scrapeTimeout": "10s", "honorLabels": true,
		"scheme": "https", "authorization": scraperToken, "tlsConfig": map[string]any{"insecureSkipVerify": true}}}
	if !reflect.DeepEqual(endpoints, want) {
		t.Errorf("podMetricsEndpoints %v, want %v", endpoints, want)
	}
	_, _, err := helmtest.Render(load(t), map[string]any{"metrics": map[string]any{
		"podMonitor": map[string]any{"enabled": true}, "serviceMonitor": map[string]any{"enabled": true},
	}})
	if err == nil || !strings.Contains(err.Error(), "enable one") {
		t.Errorf("a PodMonitor and a ServiceMonitor: got %v", err)
	}
}

// TestCommonLabels renders every object the chart has (the optional ones
// on) with commonLabels, one of which tries to replace a chart label and
// one an object's own: every object carries them, the Pods too; the
// chart's own labels, an object's own (a ServiceMonitor's, a tenant role's
// aggregation labels) and podLabels win; the selectors stay the chart's;
// no object carries a key twice; extraObjects carry only their own.
func TestCommonLabels(t *testing.T) {
	const common = `commonLabels: {team: platform, release: common, app.kubernetes.io/name: other}
podLabels: {team: pods}
podDisruptionBudget: {enabled: true}
networkPolicy: {enabled: true, apiServer: {cidrs: [10.0.0.10/32]}}
prometheusRule: {enabled: true, labels: {release: prometheus}}
dashboards: {enabled: true}
extraObjects: [{apiVersion: v1, kind: ConfigMap, metadata: {name: mine}}]
`
	for name, monitor := range map[string]string{
		"ServiceMonitor": "metrics: {serviceMonitor: {enabled: true, labels: {release: prometheus}}}",
		"PodMonitor":     "metrics: {podMonitor: {enabled: true, labels: {release: prometheus}}}",
	} {
		t.Run(name, func(t *testing.T) {
			values := common + monitor
			var vals map[string]any
			if err := yaml.Unmarshal([]byte(values), &vals); err != nil {
				t.Fatal(err)
			}
			manifest, _, err := helmtest.Render(load(t), vals)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range helmtest.Documents(manifest) {
				var strict map[string]any
				if err := yaml.UnmarshalStrict([]byte(d), &strict); err != nil {
					t.Errorf("%s: %v", firstLineOf(d), err)
				}
			}
			objs, err := helmtest.Objects(manifest)
			if err != nil {
				t.Fatal(err)
			}
			kinds := map[string]bool{}
			for _, o := range objs {
				kinds[o.GetKind()] = true
				l := o.GetLabels()
				if o.GetName() == "mine" {
					if len(l) != 0 {
						t.Errorf("extra object %s has labels %v, want its own (none)", o.GetName(), l)
					}
					continue
				}
				wantRelease := "common"
				if o.GetKind() == name || o.GetKind() == "PrometheusRule" {
					wantRelease = "prometheus"
				}
				if l["team"] != "platform" || l["release"] != wantRelease || l["app.kubernetes.io/name"] != "backendslice" {
					t.Errorf("%s %s labels %v: want team=platform, release=%s and the chart's name", o.GetKind(), o.GetName(), l, wantRelease)
				}
				if strings.HasSuffix(o.GetName(), "-edit") && l["rbac.authorization.k8s.io/aggregate-to-edit"] != "true" {
					t.Errorf("%s %s labels %v: the aggregation labels are gone", o.GetKind(), o.GetName(), l)
				}
			}
			for _, kind := range []string{"CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ServiceAccount",
				"Service", "Deployment", "PodDisruptionBudget", "NetworkPolicy", "PrometheusRule", "ConfigMap", name} {
				if !kinds[kind] {
					t.Errorf("no %s rendered: the test does not see every kind", kind)
				}
			}
			var d appsv1.Deployment
			typed(t, objs, "Deployment", &d)
			pod := d.Spec.Template.Labels
			if pod["team"] != "pods" || pod["release"] != "common" || pod["app.kubernetes.io/name"] != "backendslice" {
				t.Errorf("Pod labels %v: want podLabels' team, commonLabels' release and the chart's name", pod)
			}
			if sel := d.Spec.Selector.MatchLabels; len(sel) != 3 || sel["app.kubernetes.io/name"] != "backendslice" {
				t.Errorf("selector %v: want the chart's three labels alone", sel)
			}
		})
	}
}

// firstLineOf is the first line of a document, to name it in messages.
func firstLineOf(d string) string {
	line, _, _ := strings.Cut(d, "\n")
	return line
}

// TestPodDNSAndHosts: no DNS settings or host aliases by default; set,
// the Pod has them as written.
func TestPodDNSAndHosts(t *testing.T) {
	pod := deployment(t, "").Spec.Template.Spec
	if pod.DNSPolicy != "" || pod.DNSConfig != nil || pod.HostAliases != nil {
		t.Errorf("defaults: dnsPolicy %q, dnsConfig %+v, hostAliases %v, want none", pod.DNSPolicy, pod.DNSConfig, pod.HostAliases)
	}
	pod = deployment(t, `dnsPolicy: None
dnsConfig: {nameservers: [192.0.2.53], searches: [corp.example], options: [{name: ndots, value: "1"}, {name: edns0}]}
hostAliases: [{ip: 10.40.0.5, hostnames: [proxy.corp.example, proxy]}]`).Spec.Template.Spec
	wantDNS := &corev1.PodDNSConfig{Nameservers: []string{"192.0.2.53"}, Searches: []string{"corp.example"},
		Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("1")}, {Name: "edns0"}}}
	if pod.DNSPolicy != corev1.DNSNone || !reflect.DeepEqual(pod.DNSConfig, wantDNS) {
		t.Errorf("dnsPolicy %q, dnsConfig %+v, want None and %+v", pod.DNSPolicy, pod.DNSConfig, wantDNS)
	}
	if want := []corev1.HostAlias{{IP: "10.40.0.5", Hostnames: []string{"proxy.corp.example", "proxy"}}}; !reflect.DeepEqual(pod.HostAliases, want) {
		t.Errorf("hostAliases %v, want %v", pod.HostAliases, want)
	}
}

// TestRevisionHistoryLimit: Kubernetes' 10 by default, and what the
// value says, 0 included.
func TestRevisionHistoryLimit(t *testing.T) {
	for values, want := range map[string]int32{"": 10, "revisionHistoryLimit: 3": 3, "revisionHistoryLimit: 0": 0} {
		if got := deployment(t, values).Spec.RevisionHistoryLimit; got == nil || *got != want {
			t.Errorf("values %q: revisionHistoryLimit %v, want %d", values, got, want)
		}
	}
}

// TestProbeOverrides: the probes default to the chart's; a field set is
// merged over them, the others kept; null drops one, so that another
// handler can replace httpGet; each probe is set apart from the other.
func TestProbeOverrides(t *testing.T) {
	httpGet := func(path string) corev1.ProbeHandler {
		return corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString("health")}}
	}
	liveness := corev1.Probe{ProbeHandler: httpGet("/healthz"), InitialDelaySeconds: 15, PeriodSeconds: 20}
	readiness := corev1.Probe{ProbeHandler: httpGet("/readyz"), InitialDelaySeconds: 5, PeriodSeconds: 10}
	with := func(p corev1.Probe, change func(*corev1.Probe)) corev1.Probe { change(&p); return p }
	cases := []struct {
		name, values        string
		liveness, readiness corev1.Probe
	}{
		{"defaults", "", liveness, readiness},
		{"fields merged over the defaults", "livenessProbe: {periodSeconds: 10, failureThreshold: 6, timeoutSeconds: 3}",
			with(liveness, func(p *corev1.Probe) { p.PeriodSeconds, p.FailureThreshold, p.TimeoutSeconds = 10, 6, 3 }), readiness},
		{"a field dropped", "readinessProbe: {initialDelaySeconds: null}",
			liveness, with(readiness, func(p *corev1.Probe) { p.InitialDelaySeconds = 0 })},
		{"another handler", "livenessProbe: {httpGet: null, tcpSocket: {port: health}}\nreadinessProbe: {httpGet: {path: /readyz/informers-synced}}",
			with(liveness, func(p *corev1.Probe) {
				p.ProbeHandler = corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("health")}}
			}), with(readiness, func(p *corev1.Probe) { p.ProbeHandler = httpGet("/readyz/informers-synced") })},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctr := deployment(t, c.values).Spec.Template.Spec.Containers[0]
			if ctr.LivenessProbe == nil || !reflect.DeepEqual(*ctr.LivenessProbe, c.liveness) {
				t.Errorf("liveness probe %+v, want %+v", ctr.LivenessProbe, c.liveness)
			}
			if ctr.ReadinessProbe == nil || !reflect.DeepEqual(*ctr.ReadinessProbe, c.readiness) {
				t.Errorf("readiness probe %+v, want %+v", ctr.ReadinessProbe, c.readiness)
			}
		})
	}
}

// TestExtraObjects: none by default; a map and a string are both rendered
// as templates with the chart's context (its release, its helpers).
func TestExtraObjects(t *testing.T) {
	manifest, _, err := helmtest.Render(load(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(manifest, "templates/extra-objects.yaml") {
		t.Error("extra-objects.yaml renders an object by default")
	}
	objs := renderYAML(t, `extraObjects:
  - apiVersion: v1
    kind: ConfigMap
    metadata: {name: '{{ include "backendslice.fullname" . }}-extra', namespace: '{{ .Release.Namespace }}'}
    data: {release: '{{ .Release.Name }}'}
  - |
    apiVersion: v1
    kind: Secret
    metadata:
      name: consul-eu-token
      namespace: {{ .Release.Namespace }}
      labels:
        {{- include "backendslice.labels" . | nindent 8 }}
    stringData:
      token: from-a-vault`)
	var cm corev1.ConfigMap
	typed(t, objs, "ConfigMap", &cm)
	if cm.Name != "backendslice-extra" || cm.Namespace != helmtest.Namespace || cm.Data["release"] != helmtest.ReleaseName {
		t.Errorf("ConfigMap %s/%s data %v: its templates are not rendered", cm.Namespace, cm.Name, cm.Data)
	}
	var s corev1.Secret
	typed(t, objs, "Secret", &s)
	if s.Name != "consul-eu-token" || s.Namespace != helmtest.Namespace || s.Labels["app.kubernetes.io/instance"] != helmtest.ReleaseName || s.StringData["token"] != "from-a-vault" {
		t.Errorf("Secret %s/%s labels %v: its template is not rendered", s.Namespace, s.Name, s.Labels)
	}
}
