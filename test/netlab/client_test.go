package netlab

import (
	"strings"
	"testing"
	"time"
)

// TestClientResultErr checks what the data-path suites assert a client's
// run by: a check that could not fail would let a migration or an upgrade
// that drops connections pass.
func TestClientResultErr(t *testing.T) {
	limits := ClientLimits{Gap: 5 * time.Millisecond, DialTimeout: time.Second, MaxConns: 10, MaxTime: time.Minute}
	for _, c := range []struct {
		name string
		r    ClientResult
		want []string
	}{
		{"every connection answered", ClientResult{Conns: 10, ByHost: map[string]int{"h1": 10}}, nil},
		{"one failed", ClientResult{Conns: 10, Failed: 1, Failures: []string{"12:00:00.000: refused"}}, []string{"1 of 10 connections failed", "refused"}},
		{"limits reached", ClientResult{Conns: 10, Bounded: true, Limits: limits}, []string{"reached its limits (10 connections or 1m0s)"}},
		{"no connection", ClientResult{}, []string{"made no connection"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.r.Err()
			if len(c.want) == 0 {
				if err != nil {
					t.Fatalf("got %v, want no error", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("got no error, want one saying %q", c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("got %q, want it to say %q", err, w)
				}
			}
		})
	}
}
