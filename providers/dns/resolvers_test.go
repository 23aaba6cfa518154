package dns

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/backendslice/backendslice/providers"
)

// TestResolvers checks where the resolvers come from: the flag, else the
// nameservers of resolv.conf, each on port 53 unless a port is given. It
// reads the list directly, since asking real addresses would depend on the
// network the test runs in.
func TestResolvers(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "resolv.conf")
	text := "search example.com\noptions ndots:5\nnameserver 192.0.2.53\nnameserver 2001:db8::53\n"
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		opts Options
		want []string
	}{
		{"resolv.conf", Options{ResolvConf: conf}, []string{"192.0.2.53:53", "[2001:db8::53]:53"}},
		{"flag over resolv.conf", Options{ResolvConf: conf, Resolvers: []string{"198.51.100.53:5353"}}, []string{"198.51.100.53:5353"}},
		{"port 53 by default", Options{Resolvers: []string{"198.51.100.53", "2001:db8::54", "dns.example.com"}},
			[]string{"198.51.100.53:53", "[2001:db8::54]:53", "dns.example.com:53"}},
		{"ports kept", Options{Resolvers: []string{"[2001:db8::54]:5353", "dns.example.com:53"}},
			[]string{"[2001:db8::54]:5353", "dns.example.com:53"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := resolvers(c.opts)
			if err != nil || !slices.Equal(got, c.want) {
				t.Errorf("resolvers = %v, %v; want %v", got, err, c.want)
			}
		})
	}
}

// TestConnectionResolversAreCanonical checks that a BackendProvider's
// resolvers are host:port, port 53 unless given, as the flag's are.
func TestConnectionResolversAreCanonical(t *testing.T) {
	p, err := New(Options{Resolvers: []string{"192.0.2.1"}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.resolversOf(&providers.Connection{Name: "team", Key: "v1", Settings: &Settings{
		Resolvers: []string{"198.51.100.53", "2001:db8::54", "[2001:db8::55]:5353", "dns.example.com"},
	}})
	want := []string{"198.51.100.53:53", "[2001:db8::54]:53", "[2001:db8::55]:5353", "dns.example.com:53"}
	if err != nil || !slices.Equal(got.addrs, want) || got.from != "BackendProvider team" {
		t.Errorf("resolversOf = %+v, %v; want %v from BackendProvider team", got, err, want)
	}
	if own, _ := p.resolversOf(nil); !slices.Equal(own.addrs, []string{"192.0.2.1:53"}) {
		t.Errorf("resolversOf(nil) = %+v, want the flag's 192.0.2.1:53", own)
	}
}
