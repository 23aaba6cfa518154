package consul

import (
	"context"
	"testing"
)

func TestAgentAddress(t *testing.T) {
	for _, c := range []struct {
		address string
		tls     bool
		want    string
	}{
		{"127.0.0.1:8500", false, "127.0.0.1:8500"},
		{"http://127.0.0.1:8500", false, "127.0.0.1:8500"},
		{"https://127.0.0.1:8501/", false, "127.0.0.1:8501"},
		{"localhost:8500", false, "127.0.0.1:8500"},
		{"LOCALHOST:8500", false, "127.0.0.1:8500"},
		{"127.0.0.1", false, "127.0.0.1:80"},
		{"127.0.0.1", true, "127.0.0.1:443"},
		{"https://127.0.0.1", false, "127.0.0.1:443"},
		{"[::ffff:127.0.0.1]:8500", false, "127.0.0.1:8500"},
		{"[2001:db8::1]:8500", false, "[2001:db8::1]:8500"},
		{"unix:///run/consul.sock", false, "unix:///run/consul.sock"},
	} {
		if got := agentAddress(context.Background(), c.address, c.tls); got != c.want {
			t.Errorf("agentAddress(%q, tls=%v) = %q, want %q", c.address, c.tls, got, c.want)
		}
	}
}
