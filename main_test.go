package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestDemo runs `backendslice demo --once` as `make demo` does and checks
// that it prints the Services and slices the samples produce.
func TestDemo(t *testing.T) {
	var out bytes.Buffer
	cmd := demoCommand()
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--once", "--timeout=60s"})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := cmd.ExecuteContext(ctx); err != nil {
		t.Fatalf("demo failed: %v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{
		"ExternalBackend postgres  Ready=True (3 of 4 endpoint(s) ready in 2 EndpointSlice(s))",
		"ipFamilies=[IPv4 IPv6]  policy=PreferDualStack  selector=map[]",
		"postgres-ipv6-0  IPv6  pg:15432/TCP  2001:db8::11",
		"ExternalBackend cache-fleet  Ready=True (120 of 120 endpoint(s) ready in 3 EndpointSlice(s))",
		"cache-ipv4-2",
		"Service ldap  clusterIPs=None",
		"ldap-b    false  true     true",
		"Stopping the control plane",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("demo output lacks %q:\n%s", want, got)
		}
	}
}
