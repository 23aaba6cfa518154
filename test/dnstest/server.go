// Package dnstest runs an authoritative DNS server on 127.0.0.1 for tests,
// on one random port over both UDP and TCP. Tests change its records, TTLs
// and failures while it runs, stop it and start it again, and read which
// queries it received.
//
// It answers as an authoritative server does: CNAME chains are followed
// inside the zone the query is in, a name with no records is NXDOMAIN and
// a name without the asked type is NODATA (both with the zone's SOA), a
// name with NS records is a referral, and a name outside its zones is
// REFUSED. UDP answers larger than the size the query advertises are
// truncated, so clients must retry over TCP.
package dnstest

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"sync"
	"time"

	mdns "github.com/miekg/dns"
)

// Fault is how the server misbehaves for one name.
type Fault int

// Faults a name can be given.
const (
	// Answer answers normally.
	Answer Fault = iota
	// ServFail answers SERVFAIL, as a resolver that cannot reach the authority does.
	ServFail
	// Refused answers REFUSED, as a server that does not serve the client does.
	Refused
	// Silent sends no answer at all: the client times out.
	Silent
)

// maxHops bounds how many CNAMEs one answer follows, so that a loop in the
// test's records still gets an answer (the client must notice the loop).
const maxHops = 16

// Query is one question the server received.
type Query struct {
	// Name is the name asked for, lower-case and fully qualified.
	Name string
	// Type is the record type asked for (mdns.TypeA, ...).
	Type uint16
	// Net is "udp" or "tcp".
	Net string
	// At is when the question arrived.
	At time.Time
}

// faultKey is a name and a query type, mdns.TypeNone standing for every type.
type faultKey struct {
	name string
	typ  uint16
}

// Server is a running authoritative server. Its methods are safe for
// concurrent use.
type Server struct {
	// Addr is 127.0.0.1:<port>, the same port for UDP and TCP; it stays the
	// same across Stop and Restart.
	Addr string

	zones []string

	mu          sync.Mutex
	records     map[string][]mdns.RR
	faults      map[faultKey]Fault
	negativeTTL uint32
	queries     []Query
	running     []*mdns.Server
}

// New starts a server authoritative for zones (for example "example.test").
func New(zones ...string) (*Server, error) {
	if len(zones) == 0 {
		return nil, errors.New("dnstest: at least one zone is needed")
	}
	s := &Server{records: map[string][]mdns.RR{}, faults: map[faultKey]Fault{}, negativeTTL: 1}
	for _, z := range zones {
		s.zones = append(s.zones, mdns.CanonicalName(z))
	}
	// UDP picks a free port; TCP on the same number may be taken, then try another.
	var err error
	for range 10 {
		if s.Addr, err = s.listen("127.0.0.1:0"); err == nil {
			return s, nil
		}
	}
	return nil, err
}

// listen serves UDP and TCP on addr and returns the address in use.
func (s *Server) listen(addr string) (string, error) {
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return "", fmt.Errorf("dnstest: listening on udp %s: %w", addr, err)
	}
	l, err := net.Listen("tcp", pc.LocalAddr().String())
	if err != nil {
		return "", errors.Join(fmt.Errorf("dnstest: listening on tcp %s: %w", pc.LocalAddr(), err), pc.Close())
	}
	udp := &mdns.Server{PacketConn: pc, Handler: s}
	tcp := &mdns.Server{Listener: l, Handler: s}
	for _, srv := range []*mdns.Server{udp, tcp} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go func() { _ = srv.ActivateAndServe() }()
		// Stop may only be called on a started server.
		<-started
	}
	s.mu.Lock()
	s.running = []*mdns.Server{udp, tcp}
	s.mu.Unlock()
	return pc.LocalAddr().String(), nil
}

// Stop stops answering and closes the ports: queries are refused by the
// host from then on. Stopping a stopped server does nothing.
func (s *Server) Stop() error {
	s.mu.Lock()
	running := s.running
	s.running = nil
	s.mu.Unlock()
	var errs []error
	for _, srv := range running {
		errs = append(errs, srv.Shutdown())
	}
	return errors.Join(errs...)
}

// Restart serves again on the address the server had, with its records.
func (s *Server) Restart() error {
	s.mu.Lock()
	up := s.running != nil
	s.mu.Unlock()
	if up {
		return errors.New("dnstest: Restart of a running server")
	}
	_, err := s.listen(s.Addr)
	return err
}

// Set replaces the records of type typ at name with one per value, in zone
// file syntax ("192.0.2.1" for A, "target.example.test." for CNAME), all
// with the given TTL. No value removes the records of that type. A value
// that does not parse panics: it is a mistake in the test.
func (s *Server) Set(name string, typ uint16, ttl uint32, values ...string) {
	name = mdns.CanonicalName(name)
	rrs := make([]mdns.RR, 0, len(values))
	for _, v := range values {
		rr, err := mdns.NewRR(fmt.Sprintf("%s %d IN %s %s", name, ttl, mdns.TypeToString[typ], v))
		if err != nil || rr == nil {
			panic(fmt.Sprintf("dnstest: bad %s record %q for %s: %v", mdns.TypeToString[typ], v, name, err))
		}
		rrs = append(rrs, rr)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	kept := slices.DeleteFunc(slices.Clone(s.records[name]), func(rr mdns.RR) bool { return rr.Header().Rrtype == typ })
	if all := append(kept, rrs...); len(all) > 0 {
		s.records[name] = all
	} else {
		delete(s.records, name)
	}
}

// Remove deletes every record at name: it answers NXDOMAIN from then on.
func (s *Server) Remove(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.records, mdns.CanonicalName(name))
}

// Fail makes the server misbehave for queries of name of the given types,
// or of every type when none is given; Answer restores it.
func (s *Server) Fail(name string, f Fault, types ...uint16) {
	name = mdns.CanonicalName(name)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(types) == 0 {
		maps.DeleteFunc(s.faults, func(k faultKey, _ Fault) bool { return k.name == name })
		types = []uint16{mdns.TypeNone}
	}
	for _, typ := range types {
		s.faults[faultKey{name, typ}] = f
	}
}

// fault is how the server answers a query. s.mu is held.
func (s *Server) fault(name string, qtype uint16) Fault {
	if f, ok := s.faults[faultKey{name, qtype}]; ok {
		return f
	}
	return s.faults[faultKey{name, mdns.TypeNone}]
}

// SetNegativeTTL sets how long NXDOMAIN and NODATA answers may be cached
// (the TTL and minimum of the zones' SOA records); it is 1 second at first.
func (s *Server) SetNegativeTTL(ttl uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.negativeTTL = ttl
}

// Queries returns the questions received for name, oldest first.
func (s *Server) Queries(name string) []Query {
	name = mdns.CanonicalName(name)
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Query
	for _, q := range s.queries {
		if q.Name == name {
			out = append(out, q)
		}
	}
	return out
}

// ServeDNS answers one query; it is the handler of both listeners.
func (s *Server) ServeDNS(w mdns.ResponseWriter, r *mdns.Msg) {
	_, overUDP := w.RemoteAddr().(*net.UDPAddr)
	q := r.Question[0] // the server's default accept function admits exactly one question
	name := mdns.CanonicalName(q.Name)
	s.mu.Lock()
	network := "tcp"
	if overUDP {
		network = "udp"
	}
	s.queries = append(s.queries, Query{Name: name, Type: q.Qtype, Net: network, At: time.Now()})
	reply := s.answer(r, name, q.Qtype)
	s.mu.Unlock()
	if reply == nil {
		return
	}
	if overUDP {
		size := mdns.MinMsgSize
		if opt := r.IsEdns0(); opt != nil {
			size = int(opt.UDPSize())
		}
		reply.Truncate(size)
	}
	_ = w.WriteMsg(reply)
}

// answer builds the reply to a query, or nil for no reply. s.mu is held.
func (s *Server) answer(r *mdns.Msg, name string, qtype uint16) *mdns.Msg {
	zone := s.zoneOf(name)
	fault := s.fault(name, qtype)
	switch {
	case zone == "" || fault == Refused:
		return new(mdns.Msg).SetRcode(r, mdns.RcodeRefused)
	case fault == ServFail:
		return new(mdns.Msg).SetRcode(r, mdns.RcodeServerFailure)
	case fault == Silent:
		return nil
	}
	m := new(mdns.Msg).SetReply(r)
	m.Authoritative = true
	cur := name
	for hop := 0; ; hop++ {
		rrs := s.records[cur]
		if ns := ofType(rrs, mdns.TypeNS); len(ns) > 0 && cur != zone && qtype != mdns.TypeNS {
			// A delegation: this server is not the authority below it.
			m.Authoritative = false
			m.Ns = ns
			return m
		}
		if cname := aliasOf(rrs); cname != nil && qtype != mdns.TypeCNAME {
			m.Answer = append(m.Answer, cname)
			next := mdns.CanonicalName(cname.Target)
			if hop == maxHops || s.zoneOf(next) != zone {
				// An authoritative server answers from its own zone only:
				// the client asks for the rest of the chain itself.
				return m
			}
			cur = next
			continue
		}
		if len(rrs) == 0 {
			m.Rcode = mdns.RcodeNameError
			m.Ns = []mdns.RR{s.soa(zone)}
			return m
		}
		found := ofType(rrs, qtype)
		if len(found) == 0 {
			m.Ns = []mdns.RR{s.soa(zone)}
		}
		m.Answer = append(m.Answer, found...)
		return m
	}
}

// zoneOf is the most specific zone of the server that holds name, or "".
func (s *Server) zoneOf(name string) string {
	best := ""
	for _, z := range s.zones {
		if mdns.IsSubDomain(z, name) && len(z) > len(best) {
			best = z
		}
	}
	return best
}

// soa is the zone's SOA record, carrying the negative-caching TTL. s.mu is held.
func (s *Server) soa(zone string) mdns.RR {
	return &mdns.SOA{
		Hdr:     mdns.RR_Header{Name: zone, Rrtype: mdns.TypeSOA, Class: mdns.ClassINET, Ttl: s.negativeTTL},
		Ns:      "ns." + zone,
		Mbox:    "hostmaster." + zone,
		Serial:  1,
		Refresh: 3600,
		Retry:   600,
		Expire:  86400,
		Minttl:  s.negativeTTL,
	}
}

// ofType returns the records of type typ.
func ofType(rrs []mdns.RR, typ uint16) []mdns.RR {
	var out []mdns.RR
	for _, rr := range rrs {
		if rr.Header().Rrtype == typ {
			out = append(out, rr)
		}
	}
	return out
}

// aliasOf is the CNAME record among rrs, or nil.
func aliasOf(rrs []mdns.RR) *mdns.CNAME {
	for _, rr := range rrs {
		if c, ok := rr.(*mdns.CNAME); ok {
			return c
		}
	}
	return nil
}
