package dns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	mdns "github.com/miekg/dns"
)

// maxChain is how many CNAMEs a lookup follows. Longer chains are
// misconfigurations, and the bound stops a server that sends endless ones.
const maxChain = 8

// errDeniedTarget is a lookup whose CNAME chain leads into a name that
// must not be followed. It says where only in general: the name is
// another's record, maybe another team's Service.
var errDeniedTarget = errors.New("its CNAME chain leads into a name that can't be followed " +
	"(in the cluster's DNS domain, localhost, or a cloud metadata service's name)")

// ednsSize is the UDP payload size advertised, the DNS Flag Day 2020 value:
// it avoids IP fragmentation, and larger answers come back truncated and are
// asked for again over TCP.
const ednsSize = 1232

// answer is what one lookup found.
type answer struct {
	addrs []string
	ttl   minTTL
}

// minTTL is the smallest TTL seen, if any was.
type minTTL struct {
	secs uint32
	seen bool
}

// see takes a TTL into account.
func (t *minTTL) see(secs uint32) {
	if !t.seen || secs < t.secs {
		t.secs, t.seen = secs, true
	}
}

// merge takes another lookup's TTLs into account.
func (t *minTTL) merge(o minTTL) {
	if o.seen {
		t.see(o.secs)
	}
}

// refresh is the time until the next lookup: the TTL clamped to [lo, hi].
// An answer that carried no TTL at all (no records and no SOA) says nothing
// about how long it holds, so it is asked again soon: after lo.
func (t minTTL) refresh(lo, hi time.Duration) time.Duration {
	if !t.seen {
		return lo
	}
	return min(max(time.Duration(t.secs)*time.Second, lo), hi)
}

// nxdomain is a server's answer that a name does not exist.
type nxdomain struct {
	// chain is the name looked up, then the CNAME targets followed to the
	// name that does not exist.
	chain  []string
	server string
}

func (e *nxdomain) Error() string {
	return fmt.Sprintf("%s does not exist (NXDOMAIN from %s)", describe(e.chain), e.server)
}

// describe names a lookup's chain for messages: the name, and where its
// CNAMEs led.
func describe(chain []string) string {
	names := make([]string, len(chain))
	for i, n := range chain {
		names[i] = strings.TrimSuffix(n, ".")
	}
	if len(names) == 1 {
		return names[0]
	}
	return fmt.Sprintf("%s (CNAME to %s)", names[0], strings.Join(names[1:], " -> "))
}

// lookup finds the addresses of type qtype (A or AAAA) of name, asking
// servers, following CNAME chains: within one answer, as recursive
// resolvers send them, and by asking again for the chain's end when an
// answer stops at a CNAME, as authoritative servers do for targets outside
// their zone. A target that denied (when set) refuses ends the lookup with
// errDeniedTarget, before it is asked of anyone and before any address of
// the answer is taken.
func (p *Provider) lookup(ctx context.Context, servers resolverSet, name string, qtype uint16, denied func(string) string) (answer, error) {
	var a answer
	chain := []string{mdns.CanonicalName(name)}
	for {
		asked := chain[len(chain)-1]
		resp, server, err := p.query(ctx, servers, asked, qtype)
		if err != nil {
			return answer{}, fmt.Errorf("%s lookup of %s: %w", mdns.TypeToString[qtype], describe(chain), err)
		}
		for {
			target, ttl, ok := cname(resp.Answer, chain[len(chain)-1])
			if !ok {
				break
			}
			switch {
			case slices.Contains(chain, target):
				return answer{}, fmt.Errorf("%s lookup of %s: CNAME loop back to %s (from %s)",
					mdns.TypeToString[qtype], describe(chain), strings.TrimSuffix(target, "."), server)
			case len(chain) > maxChain:
				return answer{}, fmt.Errorf("%s lookup of %s: more than %d CNAMEs (from %s)",
					mdns.TypeToString[qtype], describe(chain), maxChain, server)
			case denied != nil && denied(strings.TrimSuffix(target, ".")) != "":
				return answer{}, errDeniedTarget
			}
			chain = append(chain, target)
			a.ttl.see(ttl)
		}
		if resp.Rcode == mdns.RcodeNameError {
			return answer{}, &nxdomain{chain: chain, server: server}
		}
		owner := chain[len(chain)-1]
		for _, rr := range resp.Answer {
			if addr, ok := address(rr, owner, qtype); ok {
				a.addrs = append(a.addrs, addr)
				a.ttl.see(rr.Header().Ttl)
			}
		}
		if len(a.addrs) > 0 {
			return a, nil
		}
		if ttl, ok := negativeTTL(resp); ok {
			// NODATA: the name is there, without records of this type.
			a.ttl.see(ttl)
			return a, nil
		}
		if owner == asked {
			// NODATA without an SOA: nothing to tell how long it holds.
			return a, nil
		}
		// The answer stopped at a CNAME: ask for the chain's end.
	}
}

// cname is the target and TTL of owner's CNAME record in rrs.
func cname(rrs []mdns.RR, owner string) (string, uint32, bool) {
	for _, rr := range rrs {
		if c, ok := rr.(*mdns.CNAME); ok && mdns.CanonicalName(c.Hdr.Name) == owner {
			return mdns.CanonicalName(c.Target), c.Hdr.Ttl, true
		}
	}
	return "", 0, false
}

// address is the address an A or AAAA record of owner holds, when rr is one
// of the type asked for. Records of other names are ignored: a server must
// not be able to slip in addresses for names that were not asked.
func address(rr mdns.RR, owner string, qtype uint16) (string, bool) {
	if rr.Header().Rrtype != qtype || mdns.CanonicalName(rr.Header().Name) != owner {
		return "", false
	}
	switch rr := rr.(type) {
	case *mdns.A:
		return rr.A.String(), true
	case *mdns.AAAA:
		return rr.AAAA.String(), true
	}
	return "", false
}

// negativeTTL is how long an answer without records holds (RFC 2308: the
// smaller of the SOA's TTL and its minimum), when the answer carries an SOA.
func negativeTTL(m *mdns.Msg) (uint32, bool) {
	for _, rr := range m.Ns {
		if soa, ok := rr.(*mdns.SOA); ok {
			return min(soa.Hdr.Ttl, soa.Minttl), true
		}
	}
	return 0, false
}

// isReferral tells an answer that only points at other name servers, sent
// by a server that is not a recursive resolver. Taken for an answer it
// would look like "no records" and drain the endpoints.
func isReferral(m *mdns.Msg) bool {
	if m.Rcode != mdns.RcodeSuccess || len(m.Answer) > 0 {
		return false
	}
	referral := false
	for _, rr := range m.Ns {
		switch rr.(type) {
		case *mdns.SOA:
			return false
		case *mdns.NS:
			referral = true
		}
	}
	return referral
}

// query asks servers in turn until one answers NOERROR or NXDOMAIN, and
// says which one did.
func (p *Provider) query(ctx context.Context, servers resolverSet, name string, qtype uint16) (*mdns.Msg, string, error) {
	m := new(mdns.Msg).SetQuestion(name, qtype)
	m.SetEdns0(ednsSize, false)
	failures := make([]string, 0, len(servers.addrs))
	for _, server := range servers.addrs {
		resp, err := p.exchange(ctx, m, server)
		if ctx.Err() != nil {
			return nil, "", ctx.Err()
		}
		switch {
		case err != nil:
			failures = append(failures, fmt.Sprintf("%s: %s", server, p.explain(err)))
		case resp.Rcode != mdns.RcodeSuccess && resp.Rcode != mdns.RcodeNameError:
			failures = append(failures, fmt.Sprintf("%s answered %s", server, mdns.RcodeToString[resp.Rcode]))
		case isReferral(resp):
			failures = append(failures, fmt.Sprintf(
				"%s sent a referral instead of an answer: %s must name recursive resolvers", server, servers.from))
		default:
			return resp, server, nil
		}
	}
	return nil, "", errors.New(strings.Join(failures, "; "))
}

// explain says what went wrong talking to a server, in short: the server
// is named already, so the local and remote addresses of a network error
// are left out.
func (p *Provider) explain(err error) string {
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		return fmt.Sprintf("no answer within %s", p.queryTimeout)
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		return oe.Err.Error()
	}
	return err.Error()
}

// exchange asks one server over UDP, and again over TCP when the answer
// was truncated.
func (p *Provider) exchange(ctx context.Context, m *mdns.Msg, server string) (*mdns.Msg, error) {
	resp, err := p.exchangeOver(ctx, p.udp, m, server)
	if err == nil && resp.Truncated {
		return p.exchangeOver(ctx, p.tcp, m, server)
	}
	return resp, err
}

// exchangeOver sends m to server with c and waits at most the query timeout.
func (p *Provider) exchangeOver(ctx context.Context, c *mdns.Client, m *mdns.Msg, server string) (*mdns.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, p.queryTimeout)
	defer cancel()
	conn, err := c.DialContext(ctx, server)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	// The client waits for its read deadline without watching ctx: closing
	// the connection when ctx ends makes a cancelled Resolve return at once.
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	resp, _, err := c.ExchangeWithConnContext(ctx, m, conn)
	if err != nil && ctx.Err() != nil {
		// The read deadline and the close race when time runs out: either
		// way the query ran out of time, or its caller gave up.
		return nil, ctx.Err()
	}
	return resp, err
}
