package main

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/backendslice/backendslice/test/controlplane"
)

// TestDemo runs `backendslice-demo --once` as `make demo` does, on a
// dual-stack and on a single-stack API server, and checks that it prints
// the Services and slices the samples produce: on the single-stack one the
// IPv6 endpoints are left out, and said to be.
func TestDemo(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"dual-stack", nil, []string{
			"ExternalBackend postgres  Ready=True (3 of 4 endpoint(s) ready in 2 EndpointSlice(s))",
			"ipFamilies=[IPv4 IPv6]  policy=PreferDualStack  selector=map[]",
			"postgres-ipv6-0  IPv6  pg:15432/TCP  2001:db8::11",
		}},
		{"single-stack", []string{"--single-stack"}, []string{
			"ExternalBackend postgres  Ready=True (2 of 2 endpoint(s) ready in 1 EndpointSlice(s))",
			"Resolved=True FamilyNotServed: 2 endpoint(s) of family [IPv6] not published: this cluster gives Services addresses of [IPv4] only",
			"ipFamilies=[IPv4]  policy=SingleStack  selector=map[]",
			"postgres-ipv4-0  IPv4  pg:15432/TCP  192.0.2.11",
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			cmd := demoCommand()
			cmd.SetOut(&out)
			root, err := controlplane.RepoRoot()
			if err != nil {
				t.Fatal(err)
			}
			cmd.SetArgs(append([]string{"--once", "--timeout=60s", "--samples=" + filepath.Join(root, "config", "samples")}, c.args...))
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			if err := cmd.ExecuteContext(ctx); err != nil {
				t.Fatalf("demo failed: %v\n%s", err, out.String())
			}
			got := out.String()
			for _, want := range append(c.want,
				"ExternalBackend cache-fleet  Ready=True (120 of 120 endpoint(s) ready in 3 EndpointSlice(s))",
				"cache-ipv4-2",
				"Service ldap  clusterIPs=None",
				"ldap-b    false  true     true",
				"Stopping the control plane",
			) {
				if !strings.Contains(got, want) {
					t.Errorf("demo output lacks %q:\n%s", want, got)
				}
			}
			kubeconfig := regexp.MustCompile(`kubeconfig written to (\S+)`).FindStringSubmatch(got)
			if kubeconfig == nil {
				t.Errorf("the demo did not say where its kubeconfig is:\n%s", got)
			} else if _, err := os.Stat(filepath.Dir(kubeconfig[1])); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the demo left its kubeconfig's directory %s behind (%v)", filepath.Dir(kubeconfig[1]), err)
			}
			if c.name == "single-stack" && strings.Contains(got, "2001:db8") {
				t.Errorf("single-stack demo publishes IPv6 addresses:\n%s", got)
			}
		})
	}
}
