package consul

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/backendslice/backendslice/internal/fairshare"
	"github.com/backendslice/backendslice/providers"
)

// Watches are budgeted twice, each budget divided between namespaces
// (fairshare.Seats): per connection (--consul-max-watches), and per Consul
// agent address across connections (--consul-max-watches-per-agent),
// since the agent limits the connections of each client address
// (limits.http_max_conns_per_client, 200 by default) and every connection
// of the controller comes from its one address. A watch is charged to one
// namespace, its holder: the namespace of the source that started it, and
// while the holder's sources have all left it, the namespace of another
// source that still uses it. A source that joins a running watch costs
// nothing.

// agent is one Consul agent address, and the watches of every connection
// that reaches it.
type agent struct {
	addr  string
	seats *fairshare.Seats
	// conns is how many connections reach the agent: it is forgotten
	// with the last.
	conns int
}

// agentResolveTimeout bounds the lookup of an agent's host name, done once
// per connection, before its first watch.
const agentResolveTimeout = 2 * time.Second

// agentAddress is the address a Consul address (host:port, or a URL)
// reaches, as host:port with the host resolved: two spellings of one agent
// (a name and its address) are one agent. A name resolving to several
// addresses is named by the first in order; one that does not resolve, by
// itself in lower case. Without a port, the scheme's (80 or 443) is used,
// as the client does.
func agentAddress(ctx context.Context, address string, tls bool) string {
	scheme, rest, ok := strings.Cut(address, "://")
	if !ok {
		scheme, rest = "http", address
		if tls {
			scheme = "https"
		}
	}
	if scheme == "unix" {
		return address
	}
	rest, _, _ = strings.Cut(rest, "/")
	host, port, err := net.SplitHostPort(rest)
	if err != nil {
		host, port = strings.Trim(rest, "[]"), "80"
		if scheme == "https" {
			port = "443"
		}
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return net.JoinHostPort(ip.Unmap().String(), port)
	}
	ctx, cancel := context.WithTimeout(ctx, agentResolveTimeout)
	defer cancel()
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(ips) == 0 {
		return net.JoinHostPort(strings.ToLower(host), port)
	}
	for i := range ips {
		ips[i] = ips[i].Unmap()
	}
	return net.JoinHostPort(slices.MinFunc(ips, netip.Addr.Compare).String(), port)
}

// budget is one of the two budgets a new watch needs a seat of, named as
// its refusals name it.
type budget struct {
	seats *fairshare.Seats
	// of says whose watches they are; flag is the flag that sizes it.
	of, flag string
	// within tells whether a watch is charged to this budget.
	within func(*watch) bool
}

// budgets are the budgets a new watch through c takes a seat of.
func (p *Provider) budgets(c *conn) []budget {
	return []budget{
		{seats: c.seats, of: c.who, flag: "--consul-max-watches", within: func(w *watch) bool { return w.conn == c }},
		{seats: c.agent.seats, of: "the Consul agent at " + c.agent.addr, flag: "--consul-max-watches-per-agent",
			within: func(w *watch) bool { return w.conn.agent == c.agent }},
	}
}

// admit finds a seat in both of c's budgets for a new watch of source i,
// taking one back from a namespace over its share where the budget is
// full, and returns the backends whose watch it stopped for it, to be
// woken once p.mu is let go. Nothing is stopped unless both budgets can
// seat the watch. p.mu is held.
func (p *Provider) admit(i interest, c *conn) ([]interest, error) {
	ns := i.Backend.Namespace
	bs := p.budgets(c)
	for _, b := range bs {
		if err := refusal(i, b, b.seats.Ask(ns)); err != nil {
			return nil, err
		}
	}
	var stopped []interest
	for _, b := range bs {
		a := b.seats.Ask(ns)
		if a.Verdict == fairshare.Reclaim {
			w := p.reclaimable(a.From, ns, b.within)
			if w == nil {
				a.Verdict = fairshare.Full
			} else {
				stopped = append(stopped, p.stop(w, c)...)
				a = b.seats.Ask(ns)
			}
		}
		if err := refusal(i, b, a); err != nil {
			return stopped, err
		}
	}
	return stopped, nil
}

// refusal is the error of a source whose new watch budget b cannot seat,
// as a says; nil when it can (now, or by taking a seat back).
func refusal(i interest, b budget, a fairshare.Answer) error {
	var why string
	switch {
	case a.Verdict == fairshare.Granted || a.Verdict == fairshare.Reclaim:
		return nil
	case a.Verdict == fairshare.OverShare && a.Holders > 1:
		why = fmt.Sprintf("namespace %s holds %d of the %d watches of %s (%s), and its share is %d while %d namespaces hold watches there",
			i.Backend.Namespace, a.Held, b.seats.Limit(), b.of, b.flag, a.Share, a.Holders)
	default:
		why = fmt.Sprintf("%s already watches %d Consul services, its limit (%s)", b.of, b.seats.Total(), b.flag)
	}
	return providers.Transient(fmt.Errorf(
		"spec.sources[%s].consul.service: %s; the source is retried and publishes once a watch frees up, or the controller's operators raise the limit",
		i.Source, why))
}

// reclaimable is the watch to stop for namespace for, taken back from
// namespace ns: among those charged to ns that within selects and that no
// source of for uses, the one last started that only ns's sources use
// (stopping it costs no other namespace anything), else the one last
// started, so that sharing its watches with another namespace of its own
// does not keep ns over its share. p.mu is held.
func (p *Provider) reclaimable(ns, forNS string, within func(*watch) bool) *watch {
	var newest, newestOnly *watch
	for _, w := range p.watches {
		if w.holder != ns || !within(w) || usedBy(w, forNS) {
			continue
		}
		if newest == nil || w.started > newest.started {
			newest = w
		}
		if onlyOf(w, ns) && (newestOnly == nil || w.started > newestOnly.started) {
			newestOnly = w
		}
	}
	if newestOnly != nil {
		return newestOnly
	}
	return newest
}

// onlyOf tells whether every source using w is of namespace ns.
func onlyOf(w *watch, ns string) bool {
	for u := range w.users {
		if u.Backend.Namespace != ns {
			return false
		}
	}
	return true
}

// nextHolder is the namespace a watch is charged to once its holder's
// sources left it: the first by name among its users'.
func nextHolder(w *watch) string {
	var next string
	for u := range w.users {
		if next == "" || cmp.Less(u.Backend.Namespace, next) {
			next = u.Backend.Namespace
		}
	}
	return next
}
