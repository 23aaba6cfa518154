package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/backendslice/backendslice/cmd/backendslice/wiring"
	"github.com/backendslice/backendslice/controllers/externalbackend"
	"github.com/backendslice/backendslice/internal/importer"
)

// importFixtures are the manifests under testdata/import, each of a shape
// teams publish by hand.
func importFixtures(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "import", "*.yaml"))
	if err != nil || len(files) < 10 {
		t.Fatalf("import fixtures: %v, %d files", err, len(files))
	}
	return files
}

// runImportCmd runs `backendslice import` with args and stdin, and
// returns what it wrote to stdout and stderr.
func runImportCmd(t *testing.T, stdin string, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := importCommand()
	cmd.SetArgs(args)
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

// TestImportFixtures imports each fixture and compares the ExternalBackends,
// the notes on stderr and the exit status with testdata/import/NAME.golden
// (go test -run TestImportFixtures -update rewrites them).
func TestImportFixtures(t *testing.T) {
	runs := map[string][]string{}
	for _, file := range importFixtures(t) {
		runs[strings.TrimSuffix(filepath.Base(file), ".yaml")] = []string{"-f", file}
	}
	// With --adopt: what adoption takes over, leaves, waits for or refuses.
	for _, name := range []string{"multi-port", "mixed-ports", "wrong-labels", "service-fields", "legacy-endpoints", "external-name"} {
		runs["adopt-"+name] = []string{"-f", filepath.Join("testdata", "import", name+".yaml"), "--adopt"}
	}
	for name, args := range runs {
		t.Run(name, func(t *testing.T) {
			out, errOut, err := runImportCmd(t, "", args...)
			status := "exit status 0"
			if err != nil {
				status = "error: " + err.Error()
			}
			got := out + "# --- stderr ---\n" + prefixLines(errOut, "# ") + "# --- " + status + "\n"
			goldenFile(t, filepath.Join("testdata", "import", name+".golden"), got)
		})
	}
}

// prefixLines puts prefix before every line of s.
func prefixLines(s, prefix string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(s, "\n") {
		if l != "" {
			b.WriteString(prefix + l)
		}
	}
	return b.String()
}

// TestImportRoundTrip renders every imported ExternalBackend whose notes
// say nothing was left out or changed, through render's own code path
// (runRender: the controller's normalisation and slice planner), and
// compares the endpoints its EndpointSlices publish (address, family,
// ready, serving, terminating, zone, hostname, ports) with the endpoints
// the input published, as consumers read them.
func TestImportRoundTrip(t *testing.T) {
	// The backends of the fixtures whose notes say nothing was left out or
	// changed; the round trip must hold for each.
	wantLossless := []string{
		"payments/billing", "payments/cache", "payments/kafka", "payments/ldap", "payments/ledger",
		"payments/postgres", "payments/queue", "payments/search", "payments/smtp", "payments/zookeeper",
	}
	cfg := defaultConfig(t)
	ctx := context.Background()
	var lossless []string
	for _, file := range importFixtures(t) {
		objs, err := readManifests(nil, []string{file})
		if err != nil {
			t.Fatal(err)
		}
		res, err := checkWithController(ctx, cfg, importer.Convert(objs, importer.Options{}))
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range res.Backends {
			if !importer.Lossless(b.Notes) {
				continue
			}
			key := b.Namespace + "/" + b.ExternalBackend.Name
			lossless = append(lossless, key)
			t.Run(key, func(t *testing.T) {
				want := publishedByInput(t, objs, b.Namespace, b.ExternalBackend.Name)
				got := publishedByRender(ctx, t, cfg, b)
				if diff := comparePublished(want, got); diff != "" {
					t.Errorf("%s: the rendered slices publish other endpoints than the input:\n%s", file, diff)
				}
			})
		}
	}
	slices.Sort(lossless)
	if !slices.Equal(lossless, wantLossless) {
		t.Errorf("backends imported without loss: %q, want %q", lossless, wantLossless)
	}
}

// defaultConfig is the controller's configuration with default flags.
func defaultConfig(t *testing.T) externalbackend.Config {
	t.Helper()
	var f wiring.ControllerFlags
	f.Bind(pflag.NewFlagSet("defaults", pflag.ContinueOnError))
	opts, err := f.ManagerOptions()
	if err != nil {
		t.Fatal(err)
	}
	return opts.Config
}

// published is one endpoint as consumers read it.
type published struct {
	address, family             string
	ready, serving, terminating bool
	zone, hostname              string
	ports                       []publishedPort
}

// publishedPort is a port an endpoint is reached on.
type publishedPort struct {
	name, protocol, appProtocol string
	port                        int32
}

// publishedByRender renders b's manifest with runRender and reads the
// endpoints of the EndpointSlices it prints.
func publishedByRender(ctx context.Context, t *testing.T, cfg externalbackend.Config, b importer.Backend) []published {
	t.Helper()
	doc, err := b.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "backend.yaml")
	if err := os.WriteFile(path, doc, 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := runRender(ctx, nil, &out, cfg, renderOptions{file: path, namespace: b.Namespace}); err != nil {
		t.Fatalf("render: %v\n%s", err, doc)
	}
	var eps []published
	for _, d := range strings.Split(out.String(), "---\n") {
		var s discoveryv1.EndpointSlice
		if err := yaml.Unmarshal([]byte(d), &s); err != nil {
			t.Fatal(err)
		}
		if s.Kind == "EndpointSlice" {
			eps = append(eps, fromSlice(s)...)
		}
	}
	return eps
}

// publishedByInput are the endpoints the input published for Service
// ns/name: those of its slices, as the API defines unset conditions, and
// of its Endpoints object as kube-controller-manager mirrors it (ready
// addresses ready, notReadyAddresses only not ready), read instead of the
// slices mirrored from it.
func publishedByInput(t *testing.T, objs importer.Objects, ns, name string) []published {
	t.Helper()
	var eps []published
	legacy := slices.IndexFunc(objs.Endpoints, func(e corev1.Endpoints) bool { return e.Namespace == ns && e.Name == name })
	for _, s := range objs.Slices {
		if s.Namespace == ns && s.Labels[discoveryv1.LabelServiceName] == name &&
			(legacy < 0 || s.Labels[discoveryv1.LabelManagedBy] != "endpointslicemirroring-controller.k8s.io") {
			eps = append(eps, fromSlice(s)...)
		}
	}
	if legacy < 0 {
		return eps
	}
	for _, ss := range objs.Endpoints[legacy].Subsets {
		var ports []publishedPort
		for _, p := range ss.Ports {
			ports = append(ports, publishedPort{name: p.Name, port: p.Port, protocol: string(p.Protocol), appProtocol: ptr.Deref(p.AppProtocol, "")})
		}
		for i, a := range append(slices.Clone(ss.Addresses), ss.NotReadyAddresses...) {
			family := "IPv4"
			if netip.MustParseAddr(a.IP).Is6() {
				family = "IPv6"
			}
			eps = append(eps, published{address: a.IP, family: family, ready: i < len(ss.Addresses), serving: true, hostname: a.Hostname, ports: ports})
		}
	}
	return eps
}

// fromSlice are the endpoints of s, unset conditions read as the API says.
func fromSlice(s discoveryv1.EndpointSlice) []published {
	var ports []publishedPort
	for _, p := range s.Ports {
		ports = append(ports, publishedPort{name: ptr.Deref(p.Name, ""), port: ptr.Deref(p.Port, 0),
			protocol: string(ptr.Deref(p.Protocol, corev1.ProtocolTCP)), appProtocol: ptr.Deref(p.AppProtocol, "")})
	}
	var out []published
	for _, e := range s.Endpoints {
		out = append(out, published{
			address: e.Addresses[0], family: string(s.AddressType),
			ready: ptr.Deref(e.Conditions.Ready, true), serving: ptr.Deref(e.Conditions.Serving, true),
			terminating: ptr.Deref(e.Conditions.Terminating, false),
			zone:        ptr.Deref(e.Zone, ""), hostname: ptr.Deref(e.Hostname, ""), ports: ports,
		})
	}
	return out
}

// comparePublished lists the differences between two sets of endpoints,
// by address. A port the input left unnamed matches by number, protocol
// and appProtocol alone: an ExternalBackend names every port.
func comparePublished(want, got []published) string {
	byAddress := func(a, b published) int { return cmp.Compare(a.address, b.address) }
	slices.SortFunc(want, byAddress)
	slices.SortFunc(got, byAddress)
	var diff []string
	if len(want) != len(got) {
		diff = append(diff, fmt.Sprintf("%d endpoints, want %d", len(got), len(want)))
	}
	for i := range min(len(want), len(got)) {
		w, g := want[i], got[i]
		if !sameEndpoint(w, g) {
			diff = append(diff, fmt.Sprintf("got  %+v\nwant %+v", g, w))
		}
	}
	return strings.Join(diff, "\n")
}

// sameEndpoint compares two endpoints, unnamed input ports by number.
func sameEndpoint(w, g published) bool {
	wp, gp := slices.Clone(w.ports), slices.Clone(g.ports)
	w.ports, g.ports = nil, nil
	if w.address != g.address || w.family != g.family || w.ready != g.ready || w.serving != g.serving ||
		w.terminating != g.terminating || w.zone != g.zone || w.hostname != g.hostname || len(wp) != len(gp) {
		return false
	}
	byNumber := func(a, b publishedPort) int {
		return cmp.Or(cmp.Compare(a.port, b.port), cmp.Compare(a.protocol, b.protocol))
	}
	slices.SortFunc(wp, byNumber)
	slices.SortFunc(gp, byNumber)
	for i := range wp {
		if wp[i].name == "" {
			gp[i].name = ""
		}
		if wp[i] != gp[i] {
			return false
		}
	}
	return true
}

// TestImportInputsAndOutputs reads the same manifests from a file, a
// folder (recursively, hidden folders and other files skipped) and stdin,
// writes them to a folder, and checks the flags that change the output.
func TestImportInputsAndOutputs(t *testing.T) {
	const fixture = "testdata/import/dual-stack.yaml"
	want, _, err := runImportCmd(t, "", "-f", fixture, "-f", "testdata/import/headless.yaml")
	if err != nil {
		t.Fatal(err)
	}
	data := func(f string) []byte {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	dir := t.TempDir()
	for path, content := range map[string][]byte{
		"team/postgres.yaml":        data(fixture),
		"team/deeper/ldap.yml":      data("testdata/import/headless.yaml"),
		".git/objects/ignored.yaml": []byte("not: [yaml"),
		"README.md":                 []byte("# not a manifest\n"),
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, path), content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got, errOut, err := runImportCmd(t, "", "-f", dir); err != nil || got != want {
		t.Errorf("from a folder: %v\n%s\n%s", err, errOut, got)
	}
	stdin := string(data(fixture)) + "---\n" + string(data("testdata/import/headless.yaml"))
	if got, errOut, err := runImportCmd(t, stdin, "-f", "-"); err != nil || got != want {
		t.Errorf("from stdin: %v\n%s\n%s", err, errOut, got)
	}

	out := filepath.Join(t.TempDir(), "backends")
	got, errOut, err := runImportCmd(t, "", "-f", dir, "-o", out)
	if err != nil || got != "" || !strings.Contains(errOut, "wrote "+filepath.Join(out, "payments.postgres.yaml")) {
		t.Errorf("to a folder: %v, stdout %q, stderr:\n%s", err, got, errOut)
	}
	written := string(data(filepath.Join(out, "payments.ldap.yaml"))) + "---\n" + string(data(filepath.Join(out, "payments.postgres.yaml")))
	if written != want {
		t.Errorf("the files hold\n%s\nwant\n%s", written, want)
	}

	got, _, err = runImportCmd(t, "", "-f", fixture, "--adopt", "--static-provider", "vms")
	if err != nil || !strings.Contains(got, "    adopt:\n      handWrittenManagedBy:\n      - cluster-admins\n") || !strings.Contains(got, "    providerRef:\n      name: vms\n") ||
		strings.Contains(got, "clusterIP 10.96.0.41 is not kept") {
		t.Errorf("--adopt --static-provider: %v\n%s", err, got)
	}
}

// TestImportErrors checks that input that cannot be read, or that leaves
// nothing to import, fails, naming why.
func TestImportErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec: {clusterIp: None}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{name: "neither files nor a cluster", args: nil, want: "give either -f"},
		{name: "both", args: []string{"-f", "x.yaml", "--kubeconfig", "kc"}, want: "give either -f"},
		{name: "a missing file", args: []string{"-f", filepath.Join(dir, "missing.yaml")}, want: "missing.yaml"},
		{name: "an unknown field", args: []string{"-f", bad}, want: `bad.yaml: document 1: Service a: unknown field "spec.clusterIp"`},
		{name: "nothing to import", args: []string{"-f", "testdata/import/selector.yaml"}, want: "nothing imported"},
		{name: "a missing kubeconfig", args: []string{"--kubeconfig", filepath.Join(dir, "kc")}, want: "kc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := runImportCmd(t, "", tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) || out != "" {
				t.Errorf("error %v, stdout %q; want an error saying %q and no output", err, out, tc.want)
			}
		})
	}
}
