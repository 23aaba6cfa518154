package chaos_test

import (
	"fmt"
	"strings"
	"time"

	mdns "github.com/miekg/dns"
	"k8s.io/apimachinery/pkg/types"
)

// liveSources asks the DNS server and the Consul agent what they answer
// now for backend k's sources, independently of the model, so that a
// failure message tells a controller that missed a change (the source and
// the model agree) from a model that went wrong (they differ).
func (w *world) liveSources(k types.NamespacedName) string {
	xb := w.spec(k)
	if xb == nil {
		return ""
	}
	var parts []string
	for _, s := range xb.Spec.Sources {
		switch {
		case s.DNS != nil:
			parts = append(parts, fmt.Sprintf("DNS %s answers %s", s.DNS.Name, lookup(s.DNS.Name)))
		case s.Consul != nil:
			entries, _, err := env.consul.Client.Health().Service(s.Consul.Service, "", false, nil)
			if err != nil {
				parts = append(parts, fmt.Sprintf("Consul %s: %v", s.Consul.Service, err))
				continue
			}
			var ins []string
			for _, e := range entries {
				ins = append(ins, fmt.Sprintf("%s@%s=%s", e.Service.ID, e.Service.Address, e.Checks.AggregatedStatus()))
			}
			parts = append(parts, fmt.Sprintf("Consul %s has %v", s.Consul.Service, ins))
		}
	}
	return strings.Join(parts, "; ")
}

// lookup asks the DNS server for the A and AAAA records of name.
func lookup(name string) string {
	c := mdns.Client{Timeout: time.Second}
	var out []string
	for _, typ := range []uint16{mdns.TypeA, mdns.TypeAAAA} {
		m := new(mdns.Msg).SetQuestion(mdns.Fqdn(name), typ)
		r, _, err := c.Exchange(m, env.dns.Addr)
		if err != nil {
			out = append(out, fmt.Sprintf("%s: %v", mdns.TypeToString[typ], err))
			continue
		}
		for _, rr := range r.Answer {
			switch a := rr.(type) {
			case *mdns.A:
				out = append(out, a.A.String())
			case *mdns.AAAA:
				out = append(out, a.AAAA.String())
			}
		}
	}
	return fmt.Sprint(out)
}
