package helmtest_test

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/backendslice/backendslice/cmd/backendslice/wiring"
	"github.com/backendslice/backendslice/controllers"
	"github.com/backendslice/backendslice/controllers/externalbackend"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/backendslice/backendslice/test/controlplane"
	helmtest "github.com/backendslice/backendslice/test/helm"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/ from the chart")

// valueSets are the values the chart is linted and rendered with: its
// defaults, and a production-like file that uses every option.
var valueSets = []struct{ name, file string }{
	{"default", ""},
	{"production", "testdata/values-production.yaml"},
}

func values(t *testing.T, file string) map[string]any {
	t.Helper()
	if file == "" {
		return nil
	}
	v, err := helmtest.ReadValues(file)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func load(t *testing.T) *chart.Chart {
	t.Helper()
	ch, err := helmtest.Load()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// render renders the chart with vals and parses the objects.
func render(t *testing.T, vals map[string]any) []*unstructured.Unstructured {
	t.Helper()
	objs, err := helmtest.RenderObjects(vals)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// ofKind are the objects of a kind.
func ofKind(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	return slices.DeleteFunc(slices.Clone(objs), func(o *unstructured.Unstructured) bool { return o.GetKind() != kind })
}

// typed converts the one object of kind in objs into out.
func typed(t *testing.T, objs []*unstructured.Unstructured, kind string, out any) {
	t.Helper()
	found := ofKind(objs, kind)
	if len(found) != 1 {
		t.Fatalf("%d objects of kind %s, want 1", len(found), kind)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(found[0].Object, out); err != nil {
		t.Fatal(err)
	}
}

// readYAML parses a file of the repository.
func readYAML(t *testing.T, rel string, out any) {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, out); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
}

func TestLint(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			msgs, err := helmtest.Lint(values(t, vs.file))
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range msgs {
				if m.Severity >= support.WarningSev {
					t.Error(m.Error())
				}
			}
		})
	}
}

// TestRenderGolden compares what `helm template` prints with
// testdata/<values>.golden.yaml. The CRD is left out of the golden files
// (TestCRDIsTheGeneratedOne checks it), so that API changes do not churn
// them; NOTES.txt is appended as comments.
func TestRenderGolden(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			manifest, notes, err := helmtest.Render(load(t), values(t, vs.file))
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			for _, d := range helmtest.Documents(manifest) {
				b.WriteString("---\n")
				if strings.Contains(d, "\nkind: CustomResourceDefinition\n") {
					var crd unstructured.Unstructured
					if err := yaml.Unmarshal([]byte(d), &crd.Object); err != nil {
						t.Fatal(err)
					}
					source, _, _ := strings.Cut(d, "\n")
					b.WriteString(source + "\n# CRD " + crd.GetName() + " of config/crd/bases: TestCRDIsTheGeneratedOne checks it.\n")
					continue
				}
				b.WriteString(d + "\n")
			}
			b.WriteString("---\n# NOTES.txt:\n")
			for _, line := range strings.Split(strings.TrimRight(notes, "\n"), "\n") {
				b.WriteString(strings.TrimRight("# "+line, " ") + "\n")
			}
			golden := filepath.Join("testdata", vs.name+".golden.yaml")
			if *update {
				if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (go test ./test/helm -run TestRenderGolden -update writes it)", err)
			}
			if got := b.String(); got != string(want) {
				t.Errorf("the rendered chart differs from %s (rerun with -update if the change is meant): %s",
					golden, firstDifference(string(want), got))
			}
		})
	}
}

// firstDifference shows the first line where want and got differ.
func firstDifference(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := range min(len(w), len(g)) {
		if w[i] != g[i] {
			return fmt.Sprintf("line %d is\n\t%s\nwant\n\t%s", i+1, g[i], w[i])
		}
	}
	return fmt.Sprintf("%d lines, want %d", len(g), len(w))
}

// TestCRDIsTheGeneratedOne checks that the chart installs the CRDs of
// config/crd/bases (ExternalBackend and BackendProvider) unchanged, marked to
// survive `helm uninstall` and Argo CD pruning, and none when crds.install
// is false.
func TestCRDIsTheGeneratedOne(t *testing.T) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(root, "config", "crd", "bases", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]any{}
	for _, f := range files {
		var crd map[string]any
		readYAML(t, filepath.Join("config", "crd", "bases", filepath.Base(f)), &crd)
		want[(&unstructured.Unstructured{Object: crd}).GetName()] = crd
	}
	for _, name := range []string{"externalbackends.backendslice.io", "backendproviders.backendslice.io"} {
		if _, ok := want[name]; !ok {
			t.Errorf("config/crd/bases has no CRD %s", name)
		}
	}
	crds := ofKind(render(t, nil), "CustomResourceDefinition")
	if len(crds) != len(want) {
		t.Errorf("%d CRDs rendered, want the %d of config/crd/bases", len(crds), len(want))
	}
	for _, got := range crds {
		w, ok := want[got.GetName()]
		if !ok || !reflect.DeepEqual(got.Object["spec"], w["spec"]) {
			t.Errorf("the rendered CRD %s is not the one in config/crd/bases: run `make manifests`", got.GetName())
		}
		if a := got.GetAnnotations(); a["helm.sh/resource-policy"] != "keep" || a["argocd.argoproj.io/sync-options"] != "Prune=false,Delete=false" {
			t.Errorf("CRD %s annotations %v: want Helm and Argo CD to keep it", got.GetName(), a)
		}
	}
	if n := len(ofKind(render(t, map[string]any{"crds": map[string]any{"install": false}}), "CustomResourceDefinition")); n != 0 {
		t.Errorf("crds.install=false renders %d CRDs", n)
	}
}

// TestClusterRoleIsTheGeneratedOne checks that the controller's ClusterRole
// grants exactly the rules controller-gen generates from the controller's
// markers; with tenantRoles.create=false and metrics.secure=false it is
// the only ClusterRole (the tenants' roles are tested in
// test/e2e/tenantroles, the metrics reader in TestSecureMetrics).
func TestClusterRoleIsTheGeneratedOne(t *testing.T) {
	var want, got rbacv1.ClusterRole
	readYAML(t, "config/rbac/role.yaml", &want)
	if n := len(ofKind(render(t, nil), "ClusterRole")); n != 4 {
		t.Errorf("%d ClusterRoles rendered, want the controller's, the tenants' view and edit and the metrics reader", n)
	}
	typed(t, render(t, map[string]any{"tenantRoles": map[string]any{"create": false}, "metrics": map[string]any{"secure": false}}), "ClusterRole", &got)
	if !reflect.DeepEqual(got.Rules, want.Rules) {
		t.Errorf("ClusterRole rules\n%v\nwant those of config/rbac/role.yaml\n%v\n(run `make manifests`)", got.Rules, want.Rules)
	}
}

// TestSecretsOnlyInTheReleaseNamespace checks, with every value set, that
// no role of the chart grants a wildcard, that the ClusterRole never
// mentions Secrets, and that Secrets are granted once: list and watch, by a
// Role in the release namespace bound to the chart's ServiceAccount alone.
func TestSecretsOnlyInTheReleaseNamespace(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			objs := render(t, values(t, vs.file))
			var secretRoles []string
			for _, kind := range []string{"ClusterRole", "Role"} {
				for _, o := range ofKind(objs, kind) {
					var role rbacv1.Role
					if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &role); err != nil {
						t.Fatal(err)
					}
					for _, r := range role.Rules {
						if slices.Contains(slices.Concat(r.APIGroups, r.Resources, r.Verbs, r.NonResourceURLs), "*") {
							t.Errorf("%s %s grants a wildcard: %v", kind, o.GetName(), r)
						}
						if !slices.ContainsFunc(r.Resources, func(s string) bool { return strings.HasPrefix(s, "secrets") }) {
							continue
						}
						secretRoles = append(secretRoles, o.GetName())
						switch {
						case kind != "Role" || o.GetNamespace() != helmtest.Namespace:
							t.Errorf("%s %s (namespace %q) grants Secrets; only a Role of the release namespace may", kind, o.GetName(), o.GetNamespace())
						case !slices.Equal(r.APIGroups, []string{""}) || !slices.Equal(r.Resources, []string{"secrets"}) ||
							!slices.Equal(r.Verbs, []string{"list", "watch"}) || len(r.ResourceNames) > 0:
							t.Errorf("Role %s grants %v; want list and watch on secrets alone (the controller's cache)", o.GetName(), r)
						}
					}
				}
			}
			if len(secretRoles) != 1 {
				t.Fatalf("Roles granting Secrets: %v; want one", secretRoles)
			}
			var bound bool
			for _, o := range ofKind(objs, "RoleBinding") {
				var b rbacv1.RoleBinding
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &b); err != nil {
					t.Fatal(err)
				}
				if b.RoleRef.Kind != "Role" || b.RoleRef.Name != secretRoles[0] {
					continue
				}
				bound = true
				want := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: helmtest.ReleaseName, Namespace: helmtest.Namespace}}
				if b.Namespace != helmtest.Namespace || !reflect.DeepEqual(b.Subjects, want) {
					t.Errorf("RoleBinding %s in %q binds %v; want the chart's ServiceAccount alone, in the release namespace", b.Name, b.Namespace, b.Subjects)
				}
			}
			if !bound {
				t.Errorf("no RoleBinding binds Role %s", secretRoles[0])
			}
		})
	}
}

// TestDeployment checks the controller Pods with every value set: leader
// election in the release namespace, the restricted security context,
// probes on the health port, the Consul token Secret as a volume only, and
// POD_NAMESPACE from the downward API (first: TestEnvironment checks what
// follows).
func TestDeployment(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			vals := values(t, vs.file)
			var d appsv1.Deployment
			typed(t, render(t, vals), "Deployment", &d)
			pod := d.Spec.Template.Spec
			if len(pod.Containers) != 1 {
				t.Fatalf("%d containers, want 1", len(pod.Containers))
			}
			c := pod.Containers[0]
			for _, arg := range []string{"controller", "--leader-elect", "--leader-election-namespace=" + helmtest.Namespace} {
				if !slices.Contains(c.Args, arg) {
					t.Errorf("args %v lack %s", c.Args, arg)
				}
			}
			psc, sc := pod.SecurityContext, c.SecurityContext
			if psc == nil || sc == nil || !ptr.Deref(psc.RunAsNonRoot, false) || psc.SeccompProfile == nil ||
				psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault ||
				ptr.Deref(sc.AllowPrivilegeEscalation, true) || !ptr.Deref(sc.ReadOnlyRootFilesystem, false) ||
				!ptr.Deref(sc.RunAsNonRoot, false) || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
				t.Errorf("security contexts pod %+v container %+v are not restricted", psc, sc)
			}
			for probe, path := range map[*corev1.Probe]string{c.LivenessProbe: "/healthz", c.ReadinessProbe: "/readyz"} {
				if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != path || probe.HTTPGet.Port.StrVal != "health" {
					t.Errorf("probe %+v, want GET %s on the health port", probe, path)
				}
			}
			if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
				t.Errorf("resources %+v: want memory requests and limits", c.Resources)
			}
			for _, v := range pod.Volumes {
				if v.Secret != nil && !strings.HasPrefix(c.VolumeMounts[0].MountPath, "/var/run/secrets/backendslice/") {
					t.Errorf("Secret volume %s mounted at %v", v.Name, c.VolumeMounts)
				}
			}
			// The controller's namespace, whose Secrets it reads, is the
			// Pod's own, from the downward API: the namespace of the Role
			// that lets it read them.
			podNamespace := []corev1.EnvVar{{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{
				FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"},
			}}}
			if len(c.Env) == 0 || !reflect.DeepEqual(c.Env[:1], podNamespace) {
				t.Errorf("env %+v, want POD_NAMESPACE from metadata.namespace first", c.Env)
			}
			if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--controller-namespace") }) {
				t.Errorf("args %v pass --controller-namespace; the controller takes $POD_NAMESPACE", c.Args)
			}
			checkRollout(t, &d)
		})
	}
}

// checkRollout checks that an update of the Deployment never leaves the
// backends without a controller: a new Pod is started and Ready (a
// standby is) before an old one is stopped, and the old one has time to
// stop and release its lease before the kubelet kills it.
func checkRollout(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	s := d.Spec.Strategy
	if s.Type != appsv1.RollingUpdateDeploymentStrategyType || s.RollingUpdate == nil ||
		s.RollingUpdate.MaxUnavailable == nil || s.RollingUpdate.MaxUnavailable.IntValue() != 0 ||
		s.RollingUpdate.MaxSurge == nil || s.RollingUpdate.MaxSurge.IntValue() != 1 {
		t.Errorf("strategy %+v, want RollingUpdate with maxSurge 1 and maxUnavailable 0", s)
	}
	grace := time.Duration(ptr.Deref(d.Spec.Template.Spec.TerminationGracePeriodSeconds, 30)) * time.Second
	if grace <= controllers.ShutdownTimeout {
		t.Errorf("terminationGracePeriodSeconds %s: the controller may take %s to stop before it releases its lease", grace, controllers.ShutdownTimeout)
	}
}

// TestLeaderElectionValues renders the chart's leader election values and
// runs the controller's own flag parsing on the Deployment's arguments:
// the lease times reach the manager's options, and times the schema lets
// through but that do not fit together are refused by the controller,
// naming the flag (the new Pod never becomes Ready, and with maxUnavailable
// 0 the old ones keep running).
func TestLeaderElectionValues(t *testing.T) {
	cases := []struct {
		name, values string
		want         controllers.LeaseTimings
		err          string
	}{
		{name: "defaults", want: controllers.LeaseTimings{Duration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 500 * time.Millisecond}},
		{name: "a faster takeover", values: "controller: {leaderElection: {leaseDuration: 6s, renewDeadline: 4s, retryPeriod: 1s}}",
			want: controllers.LeaseTimings{Duration: 6 * time.Second, RenewDeadline: 4 * time.Second, RetryPeriod: time.Second}},
		{name: "a shorter lease alone", values: "controller: {leaderElection: {leaseDuration: 8s}}",
			err: "--leader-elect-lease-duration=8s: must be longer than --leader-elect-renew-deadline=10s"},
		{name: "a retry period past the deadline", values: "controller: {leaderElection: {retryPeriod: 9s}}",
			err: "--leader-elect-renew-deadline=10s: must be longer than 1.2 times --leader-elect-retry-period=9s"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			opts, err := chartOptions(t, c.values)
			if c.err != "" || err != nil {
				if err == nil || c.err == "" || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("got %v, want an error containing %q", err, c.err)
				}
				return
			}
			if opts.Lease != c.want || !opts.LeaderElection {
				t.Errorf("leader election %v with lease %+v, want on with %+v", opts.LeaderElection, opts.Lease, c.want)
			}
		})
	}
}

// TestFlags checks that values become the controller's flags, and that the
// AWS and Consul flags are passed only when set, leaving the binary's
// defaults (environment variables included) alone otherwise.
func TestFlags(t *testing.T) {
	onlyWhenSet := []string{"--aws-allowed-role-arns", "--consul-address", "--consul-token-file",
		"--denied-cidrs", "--denied-names", "--unsafe-allow-default-denied"}
	cases := []struct {
		name string
		file string
		want []string
	}{
		{"default", "", []string{
			"--concurrent=4", "--kube-api-qps=50", "--kube-api-burst=100",
			"--max-endpoints-per-slice=100", "--min-endpoints-per-slice=10", "--max-endpoints-per-backend=10000", "--max-slices-per-backend=100", "--namespace-share=0", "--default-drain-period=30s", "--resolve-timeout=10s",
			"--coalesce-quiet=0s", "--coalesce-max=5s", "--churn-window=1m", "--zap-log-level=info",
			"--cluster-domain=cluster.local", "--allow-sources-without-provider=false", "--deny-pod-cidrs=true",
			"--leader-elect-lease-duration=15s", "--leader-elect-renew-deadline=10s", "--leader-elect-retry-period=500ms",
		}},
		{"production", "testdata/values-production.yaml", []string{
			"--concurrent=8", "--kube-api-qps=100", "--kube-api-burst=200",
			"--max-endpoints-per-slice=250", "--default-drain-period=1m", "--resolve-timeout=15s",
			"--coalesce-quiet=1s", "--coalesce-max=5s",
			"--denied-cidrs=10.0.0.0/16,172.20.0.0/16,fd00:10:96::/112",
			"--denied-names=*.cluster.local", "--zap-log-level=debug",
			"--cluster-domain=k8s.example.internal", "--allow-sources-without-provider=true", "--deny-pod-cidrs=true",
			"--aws-allowed-role-arns=arn:aws:iam::123456789012:role/rds-reader,arn:aws:iam::210987654321:role/ec2-reader",
			"--consul-address=https://consul.consul.svc:8501",
			"--consul-token-file=/var/run/secrets/backendslice/consul/token",
			"--zap-encoder=json", "--consul-ca-file=/etc/backendslice/consul-ca/ca.crt",
			"--leader-elect-lease-duration=20s", "--leader-elect-renew-deadline=15s", "--leader-elect-retry-period=3s",
			"--stuck-reconcile-timeout=2m",
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var d appsv1.Deployment
			typed(t, render(t, values(t, c.file)), "Deployment", &d)
			args := d.Spec.Template.Spec.Containers[0].Args
			for _, w := range c.want {
				if !slices.Contains(args, w) {
					t.Errorf("args lack %s: %v", w, args)
				}
			}
			for _, flag := range onlyWhenSet {
				set := slices.ContainsFunc(c.want, func(a string) bool { return strings.HasPrefix(a, flag+"=") })
				passed := slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, flag+"=") })
				if set != passed {
					t.Errorf("%s passed=%v, want %v", flag, passed, set)
				}
			}
		})
	}
}

// TestMetadataStaysDenied renders the chart with deny lists of every shape
// and runs the controller's own flag parsing on the Deployment's arguments:
// the cloud metadata addresses and names (the controller's built-in
// lists) stay denied whatever the lists say, and only
// unsafeAllowDefaultDenied, naming an entry, removes it. The schema's
// unsafeAllowDefaultDenied takes exactly the built-in entries.
func TestMetadataStaysDenied(t *testing.T) {
	var metadata []netip.Prefix
	for _, c := range externalbackend.DefaultDeniedCIDRs() {
		metadata = append(metadata, netip.MustParsePrefix(c))
	}
	metadataNames := externalbackend.DefaultDeniedNames()
	if enum, want := allowDefaultDeniedEnum(t), append(externalbackend.DefaultDeniedCIDRs(), metadataNames...); !slices.Equal(enum, want) {
		t.Errorf("values.schema.json: controller.unsafeAllowDefaultDenied takes %v, want the built-in entries %v", enum, want)
	}
	cases := []struct {
		name, values string
		// allowed is the one built-in entry the values remove, if any.
		allowed string
	}{
		{name: "defaults"},
		{name: "the cluster's ranges only", values: "controller: {deniedCIDRs: [10.0.0.0/16], deniedNames: [corp.example]}"},
		{name: "empty lists", values: "controller: {deniedCIDRs: [], deniedNames: []}"},
		{name: "null lists", values: "controller: {deniedCIDRs: null, deniedNames: null}"},
		{name: "one entry removed on purpose", values: "controller: {unsafeAllowDefaultDenied: [100.100.100.200/32]}", allowed: "100.100.100.200/32"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			opts, err := chartOptions(t, c.values)
			if err != nil {
				t.Fatalf("the controller refuses the chart's arguments: %v", err)
			}
			for _, p := range metadata {
				if denied := slices.Contains(opts.Config.DeniedPrefixes, p); denied == (p.String() == c.allowed) {
					t.Errorf("%s denied=%v with values %q (denied: %v)", p, denied, c.values, opts.Config.DeniedPrefixes)
				}
			}
			for _, n := range metadataNames {
				if !slices.Contains(opts.Config.DeniedNames, n) {
					t.Errorf("%s not denied with values %q (denied: %v)", n, c.values, opts.Config.DeniedNames)
				}
			}
		})
	}
}

// allowDefaultDeniedEnum is what the chart's values.schema.json lets
// controller.unsafeAllowDefaultDenied name.
func allowDefaultDeniedEnum(t *testing.T) []string {
	t.Helper()
	dir, err := helmtest.ChartDir()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties struct {
			Controller struct {
				Properties struct {
					UnsafeAllowDefaultDenied struct {
						Items struct {
							Enum []string `json:"enum"`
						} `json:"items"`
					} `json:"unsafeAllowDefaultDenied"`
				} `json:"properties"`
			} `json:"controller"`
		} `json:"properties"`
	}
	if err := yaml.Unmarshal(raw, &schema); err != nil {
		t.Fatal(err)
	}
	return schema.Properties.Controller.Properties.UnsafeAllowDefaultDenied.Items.Enum
}

// TestPodRangesDeniedByDefault: the chart's defaults have the controller
// refuse endpoints in the Nodes' Pod ranges, and controller.denyPodCIDRs
// false turns that off, through the controller's own flag parsing (the
// kustomize base passes the chart's default arguments: TestKustomizeBase).
func TestPodRangesDeniedByDefault(t *testing.T) {
	for _, c := range []struct {
		values string
		want   bool
	}{
		{"", true},
		{"controller: {denyPodCIDRs: true}", true},
		{"controller: {denyPodCIDRs: false}", false},
	} {
		opts, err := chartOptions(t, c.values)
		if err != nil {
			t.Fatalf("values %q: the controller refuses the chart's arguments: %v", c.values, err)
		}
		if opts.Config.DenyPodCIDRs != c.want {
			t.Errorf("values %q: Pod ranges denied %v, want %v", c.values, opts.Config.DenyPodCIDRs, c.want)
		}
	}
}

// chartOptions renders the chart with values (YAML) and runs the controller's own
// flag parsing and checks on the Deployment's arguments.
func chartOptions(t *testing.T, values string) (controllers.ManagerOptions, error) {
	t.Helper()
	vals := map[string]any{}
	if err := yaml.Unmarshal([]byte(values), &vals); err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	typed(t, render(t, vals), "Deployment", &d)
	return wiring.OptionsFromArgs(d.Spec.Template.Spec.Containers[0].Args[1:])
}

// TestSchemaRejects checks that values.schema.json refuses wrong values
// with a message that names the field.
func TestSchemaRejects(t *testing.T) {
	cases := []struct {
		name   string
		values string
		want   []string
	}{
		{"no replicas", "replicaCount: 0", []string{"/replicaCount", "minimum"}},
		{"replicas as a string", `replicaCount: "2"`, []string{"/replicaCount", "want integer"}},
		{"too few endpoints per slice", "controller: {maxEndpointsPerSlice: 0}", []string{"/controller/maxEndpointsPerSlice", "minimum"}},
		{"too many endpoints per slice", "controller: {maxEndpointsPerSlice: 1001}", []string{"/controller/maxEndpointsPerSlice", "maximum"}},
		{"a negative endpoint limit", "controller: {maxEndpointsPerBackend: -1}", []string{"/controller/maxEndpointsPerBackend", "minimum"}},
		{"a negative slice limit", "controller: {maxSlicesPerBackend: -1}", []string{"/controller/maxSlicesPerBackend", "minimum"}},
		{"drain period in words", "controller: {defaultDrainPeriod: 30 seconds}", []string{"/controller/defaultDrainPeriod", "does not match pattern"}},
		{"resolve timeout as a number", "controller: {resolveTimeout: 10}", []string{"/controller/resolveTimeout", "want string"}},
		{"no workers", "controller: {concurrent: 0}", []string{"/controller/concurrent", "minimum"}},
		{"zero QPS", "controller: {kubeAPIQPS: 0}", []string{"/controller/kubeAPIQPS"}},
		{"coalesce quiet not a duration", "controller: {coalesce: {quiet: soon}}", []string{"/controller/coalesce/quiet"}},
		{"coalesce with an unknown key", "controller: {coalesce: {window: 1s}}", []string{"window"}},
		{"address for a CIDR", "controller: {deniedCIDRs: [10.0.0.1]}", []string{"/controller/deniedCIDRs/0", "does not match pattern"}},
		{"denied name with a scheme", "controller: {deniedNames: [\"http://metadata\"]}", []string{"/controller/deniedNames/0"}},
		{"unknown log level", "controller: {logLevel: verbose}", []string{"/controller/logLevel", "debug", "info", "error"}},
		{"extra arg without dashes", "controller: {extraArgs: [leader-elect]}", []string{"/controller/extraArgs/0"}},
		{"a sidecar named controller", "plugins: {sidecars: [{name: controller, image: x}]}", []string{"/plugins/sidecars/0/name"}},
		{"a sidecar without an image", "plugins: {sidecars: [{name: hosts}]}", []string{"/plugins/sidecars/0", "image"}},
		{"a sidecar with an unknown key", "plugins: {sidecars: [{name: hosts, image: x, command: [sh]}]}", []string{"command"}},
		{"misspelt controller value", "controller: {maxEndpointPerSlice: 10}", []string{"/controller", "maxEndpointPerSlice"}},
		{"misspelt top-level value", "replicas: 2", []string{"additional properties", "replicas"}},
		{"role ARN of a user", "aws: {allowedRoleARNs: [\"arn:aws:iam::123456789012:user/bob\"]}", []string{"/aws/allowedRoleARNs/0"}},
		{"role ARNs as one string", "aws: {allowedRoleARNs: \"arn:aws:iam::123456789012:role/x\"}", []string{"/aws/allowedRoleARNs", "want array"}},
		{"Consul address without a port", "consul: {address: consul.example.com}", []string{"/consul/address"}},
		{"Secret name with capitals", "consul: {tokenSecret: {name: Consul_Token}}", []string{"/consul/tokenSecret/name"}},
		{"unknown pull policy", "image: {pullPolicy: Sometimes}", []string{"/image/pullPolicy", "IfNotPresent"}},
		{"digest without algorithm", "image: {digest: abc123}", []string{"/image/digest"}},
		{"metrics port out of range", "metrics: {port: 70000}", []string{"/metrics/port", "maximum"}},
		{"no disruption allowed", "podDisruptionBudget: {maxUnavailable: 0}", []string{"/podDisruptionBudget/maxUnavailable"}},
		{"annotation value not a string", "serviceAccount: {annotations: {eks.amazonaws.com/role-arn: 12}}", []string{"/serviceAccount/annotations/eks.amazonaws.com~1role-arn", "want string"}},
		{"crds.install as a string", `crds: {install: "yes"}`, []string{"/crds/install", "want boolean"}},
		{"allowSourcesWithoutProvider as a string", `controller: {allowSourcesWithoutProvider: "true"}`, []string{"/controller/allowSourcesWithoutProvider", "want boolean"}},
		{"denyPodCIDRs as a string", `controller: {denyPodCIDRs: "yes"}`, []string{"/controller/denyPodCIDRs", "want boolean"}},
		{"cluster domain with a trailing dot", "controller: {clusterDomain: cluster.local.}", []string{"/controller/clusterDomain", "does not match pattern"}},
		{"cluster domain in capitals", "controller: {clusterDomain: Cluster.Local}", []string{"/controller/clusterDomain", "does not match pattern"}},
		{"empty cluster domain", `controller: {clusterDomain: ""}`, []string{"/controller/clusterDomain"}},
		{"lease in fractions of a second", "controller: {leaderElection: {leaseDuration: 12500ms}}", []string{"/controller/leaderElection/leaseDuration", "does not match pattern"}},
		{"lease as a number", "controller: {leaderElection: {leaseDuration: 15}}", []string{"/controller/leaderElection/leaseDuration", "want string"}},
		{"retry period in words", "controller: {leaderElection: {retryPeriod: two seconds}}", []string{"/controller/leaderElection/retryPeriod", "does not match pattern"}},
		{"misspelt lease value", "controller: {leaderElection: {leaseDurationSeconds: 15}}", []string{"/controller/leaderElection", "leaseDurationSeconds"}},
		{"grace period shorter than the controller's stop", "terminationGracePeriodSeconds: 10", []string{"/terminationGracePeriodSeconds", "minimum"}},
		{"unsafeAllowDefaultDenied of a network that is no default", "controller: {unsafeAllowDefaultDenied: [10.0.0.0/8]}", []string{"/controller/unsafeAllowDefaultDenied/0"}},
		{"runAsUser as a string", `podSecurityContext: {runAsUser: "65532"}`, []string{"/podSecurityContext/runAsUser", "want integer"}},
		{"readOnlyRootFilesystem as a string", `securityContext: {readOnlyRootFilesystem: "yes"}`, []string{"/securityContext/readOnlyRootFilesystem", "want boolean"}},
		{"unknown seccomp profile", "podSecurityContext: {seccompProfile: {type: Default}}", []string{"/podSecurityContext/seccompProfile/type"}},
		{"env value as a number", "controller: {extraEnv: [{name: PORT, value: 8080}]}", []string{"/controller/extraEnv/0/value", "want string"}},
		{"env without a name", "controller: {extraEnv: [{value: x}]}", []string{"/controller/extraEnv/0", "name"}},
		{"extraEnv as a map", "controller: {extraEnv: {AWS_REGION: eu-west-1}}", []string{"/controller/extraEnv", "want array"}},
		{"stuck timeout as a number", "controller: {stuckReconcileTimeout: 120}", []string{"/controller/stuckReconcileTimeout", "want string"}},
		{"proxy without a scheme", "proxy: {httpsProxy: proxy.corp.example:3128}", []string{"/proxy/httpsProxy", "does not match pattern"}},
		{"no_proxy with spaces", `proxy: {noProxy: ".svc, 10.0.0.0/8"}`, []string{"/proxy/noProxy"}},
		{"volume without a source", "volumes: [{name: ca}]", []string{"/volumes/0"}},
		{"mount with a relative path", "volumeMounts: [{name: ca, mountPath: etc/ca}]", []string{"/volumeMounts/0/mountPath"}},
		{"mount without a path", "volumeMounts: [{name: ca}]", []string{"/volumeMounts/0", "mountPath"}},
		{"spread without a topology key", "topologySpreadConstraints: [{maxSkew: 1, whenUnsatisfiable: ScheduleAnyway}]", []string{"/topologySpreadConstraints/0", "topologyKey"}},
		{"spread skew as a string", `topologySpreadConstraints: [{maxSkew: "1", topologyKey: zone, whenUnsatisfiable: ScheduleAnyway}]`, []string{"/topologySpreadConstraints/0/maxSkew", "want integer"}},
		{"NetworkPolicy switch as a string", `networkPolicy: {enabled: "true"}`, []string{"/networkPolicy/enabled", "want boolean"}},
		{"API server address for a CIDR", "networkPolicy: {apiServer: {cidrs: [10.0.0.10]}}", []string{"/networkPolicy/apiServer/cidrs/0", "does not match pattern"}},
		{"egress port out of range", "networkPolicy: {egress: [{ports: [70000]}]}", []string{"/networkPolicy/egress/0/ports/0"}},
		{"egress without ports", "networkPolicy: {egress: [{cidrs: [10.0.0.0/8]}]}", []string{"/networkPolicy/egress/0", "ports"}},
		{"egress protocol unknown", "networkPolicy: {egress: [{ports: [{port: 53, protocol: DNS}]}]}", []string{"/networkPolicy/egress/0/ports/0"}},
		{"misspelt NetworkPolicy value", "networkPolicy: {egres: []}", []string{"/networkPolicy", "egres"}},
		{"honorLabels as a string", `metrics: {podMonitor: {honorLabels: "true"}}`, []string{"/metrics/podMonitor/honorLabels", "want boolean"}},
		{"PodMonitor interval in words", "metrics: {podMonitor: {interval: often}}", []string{"/metrics/podMonitor/interval", "does not match pattern"}},
		{"alert duration in words", "prometheusRule: {alerts: {sourceStale: {for: 15 minutes}}}", []string{"/prometheusRule/alerts/sourceStale/for", "does not match pattern"}},
		{"alert duration in fractions", "prometheusRule: {alerts: {noLeader: {for: 1.5h}}}", []string{"/prometheusRule/alerts/noLeader/for", "does not match pattern"}},
		{"error ratio above 1", "prometheusRule: {alerts: {reconcileErrors: {ratio: 1.5}}}", []string{"/prometheusRule/alerts/reconcileErrors/ratio", "maximum"}},
		{"misspelt alert", "prometheusRule: {alerts: {sourceStail: {enabled: false}}}", []string{"/prometheusRule/alerts", "sourceStail"}},
		{"alert without a severity", `prometheusRule: {alerts: {backendNotReady: {severity: ""}}}`, []string{"/prometheusRule/alerts/backendNotReady/severity"}},
		{"runbook URL with an anchor", "prometheusRule: {runbookURL: https://wiki.example.com/runbook#top}", []string{"/prometheusRule/runbookURL", "does not match pattern"}},
		{"extra rule without expr", "prometheusRule: {extraRules: [{alert: Mine}]}", []string{"/prometheusRule/extraRules/0", "expr"}},
		{"rules namespace in capitals", "prometheusRule: {namespace: Monitoring}", []string{"/prometheusRule/namespace", "does not match pattern"}},
		{"unknown DNS policy", "dnsPolicy: ClusterLast", []string{"/dnsPolicy", "ClusterFirst"}},
		{"a nameserver as a string", "dnsConfig: {nameservers: 192.0.2.53}", []string{"/dnsConfig/nameservers", "want array"}},
		{"a DNS option without a name", `dnsConfig: {options: [{value: "1"}]}`, []string{"/dnsConfig/options/0", "name"}},
		{"misspelt dnsConfig field", "dnsConfig: {nameserver: [192.0.2.53]}", []string{"/dnsConfig", "nameserver"}},
		{"a host alias without an address", "hostAliases: [{hostnames: [proxy]}]", []string{"/hostAliases/0", "ip"}},
		{"host alias names as a string", "hostAliases: [{ip: 10.0.0.1, hostnames: proxy}]", []string{"/hostAliases/0/hostnames", "want array"}},
		{"a negative revision history", "revisionHistoryLimit: -1", []string{"/revisionHistoryLimit", "minimum"}},
		{"revision history as a string", `revisionHistoryLimit: "3"`, []string{"/revisionHistoryLimit", "want integer"}},
		{"a common label value as a number", "commonLabels: {cost-centre: 4711}", []string{"/commonLabels/cost-centre", "want string"}},
		{"a common label key with a space", `commonLabels: {"my team": x}`, []string{"invalid propertyName 'my team'"}},
		{"commonLabels as a list", "commonLabels: [team]", []string{"/commonLabels", "want object"}},
		{"probe period as a string", `livenessProbe: {periodSeconds: "10"}`, []string{"/livenessProbe/periodSeconds", "want integer"}},
		{"a probe that never fails", "readinessProbe: {failureThreshold: 0}", []string{"/readinessProbe/failureThreshold", "minimum"}},
		{"misspelt probe field", "livenessProbe: {periodSecond: 10}", []string{"/livenessProbe", "periodSecond"}},
		{"probe path without a slash", "readinessProbe: {httpGet: {path: readyz}}", []string{"/readinessProbe/httpGet/path", "does not match pattern"}},
		{"an extra object as a number", "extraObjects: [42]", []string{"/extraObjects/0"}},
		{"extraObjects as a map", "extraObjects: {cm: {kind: ConfigMap}}", []string{"/extraObjects", "want array"}},
	}
	ch := load(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var vals map[string]any
			if err := yaml.Unmarshal([]byte(c.values), &vals); err != nil {
				t.Fatal(err)
			}
			_, _, err := helmtest.Render(ch, vals)
			if err == nil {
				t.Fatalf("values %s accepted", c.values)
			}
			msg := err.Error()
			if !strings.Contains(msg, "values don't meet the specifications of the schema") {
				t.Errorf("error does not come from the schema: %s", msg)
			}
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error does not say %q: %s", w, msg)
				}
			}
		})
	}
}

// TestTemplateRejects checks the combinations of values the templates refuse.
func TestTemplateRejects(t *testing.T) {
	cases := []struct {
		name   string
		values string
		want   string
	}{
		{"one port for metrics and probes", "metrics: {port: 9000}\nhealthPort: 9000", "metrics.port and healthPort are both 9000"},
		{"ServiceMonitor without the Service", "metrics: {service: {enabled: false}, serviceMonitor: {enabled: true}}", "metrics.serviceMonitor.enabled needs metrics.service.enabled"},
		{"existing ServiceAccount without a name", "serviceAccount: {create: false}", "serviceAccount.name is required"},
		{"dnsPolicy None without nameservers", "dnsPolicy: None\ndnsConfig: {searches: [corp.example]}", "dnsPolicy None takes the Pod's resolvers from dnsConfig alone"},
	}
	ch := load(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var vals map[string]any
			if err := yaml.Unmarshal([]byte(c.values), &vals); err != nil {
				t.Fatal(err)
			}
			if _, _, err := helmtest.Render(ch, vals); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want an error saying %q", err, c.want)
			}
		})
	}
}
