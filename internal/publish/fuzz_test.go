package publish

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
)

// FuzzNormalize feeds Normalize what providers could plausibly or
// implausibly answer (any text as an address, hostname or zone, from three
// sources that answered, failed or are held) under a policy built from the
// input, and holds the result to two oracles.
//
// Every published endpoint must be one the API server accepts and the policy
// allows (checkPublishable): the server rejects the whole slice for one bad
// address, so a single one would stop the backend's updates.
//
// Normalize of all sources must be the per-endpoint normalisation merged
// (checkMerged): each endpoint of a source in use is either dropped, with its
// source, its address as given and a reason, or published exactly as it is
// alone, unless an earlier endpoint already published the same address. So
// no address is lost silently, the first source wins with its own health,
// and a failed source contributes nothing.
//
// The fuzz arguments are: eps, one endpoint a line as address|hostname|zone;
// cidrs and names, comma-separated --denied-cidrs and --denied-names; ctl,
// the policy's address types, port and cluster domain (ctl[0]), the sources'
// states (ctl[1]) and each endpoint's health, source and port (ctl[2:]).
func FuzzNormalize(f *testing.F) {
	const (
		v4v6 = 0b011 // ctl[0]: IPv4 and IPv6
		all  = 0b111 // ctl[0]: IPv4, IPv6 and FQDN
	)
	f.Add("192.0.2.1|db-0|eu-west-1a\n2001:DB8:0:0::1|db-1|eu-west-1b\n::ffff:192.0.2.1\n::FFFF:c633:6407\n2001:db8::1%eth0\n"+
		"0.0.0.0\n::\n::ffff:0.0.0.0\n127.0.0.1\n::1\n169.254.169.254\nfe80::1\n224.0.0.251\nff02::1\nff42::1\n239.1.2.3\n"+
		"100.100.100.200\n::ffff:100.100.100.200\nfd00:ec2::254\n10.96.0.1",
		"100.100.100.200/32,fd00:ec2::254/128,10.96.0.0/12", "", []byte{v4v6, 0, 1, 1, 3, 1})
	f.Add("DB.Example.COM.\nreplica.example.com|replica-0\nmetadata.google.internal\nMetadata.Google.Internal.\na.b.cluster.local\n"+
		"notcluster.local\ndb\nlocalhost.\ndb_1.example.com\n-db.example.com\ndb..example.com\nnot an address\n1.2.3.4.5\n"+
		"192.0.2.01\n192.0.2\n1.2.3.4.\n"+strings.Repeat("a", 63)+".example.com\n\n.",
		"", "metadata.google.internal,*.cluster.local,*.", []byte{all, 0, 1, 3, 2, 0})
	f.Add("192.0.2.1|UPPER|z\n192.0.2.2|a_b|\n192.0.2.3|-x|\n192.0.2.1|again|other\n2001:db8::2|h|z",
		"", "", []byte{v4v6 | 0b1000, 0b100100, 0x01, 0x05, 0x0a, 0x13, 0xf7})
	f.Add("192.0.2.10\n192.0.2.11\n192.0.2.10\n::ffff:192.0.2.11", "192.0.2.11/32", "", []byte{0b001, 0b011011, 0x10, 0x25, 0x39, 0x04})
	f.Fuzz(func(t *testing.T, eps, cidrs, names string, ctl []byte) {
		results, pol := normalizeScenario(eps, cidrs, names, ctl)
		out, dropped := Normalize(results, pol)
		checkPublishable(t, pol, out)
		checkMerged(t, results, pol, out, dropped)
	})
}

// normalizeScenario decodes the fuzz arguments of FuzzNormalize (described
// there) into source results and a policy. Prefixes are masked as the
// controller's flag parsing masks them; ones that do not parse are left out.
func normalizeScenario(eps, cidrs, names string, ctl []byte) ([]SourceResult, Policy) {
	at := func(i int) byte {
		if i < len(ctl) {
			return ctl[i]
		}
		return 0
	}
	var pol Policy
	for i, t := range []v1alpha1.AddressType{v1alpha1.AddressTypeIPv4, v1alpha1.AddressTypeIPv6, v1alpha1.AddressTypeFQDN} {
		if at(0)&(1<<i) != 0 {
			pol.AddressTypes = append(pol.AddressTypes, t)
		}
	}
	pol.Ports = []v1alpha1.ServicePort{{Name: "pg", Port: 5432}, {Name: "dns", Port: 53, Protocol: "UDP", AppProtocol: ptr.To("dns")}}
	if at(0)&0b1000 != 0 {
		pol.Ports[0].TargetPort = ptr.To[int32](6432)
	}
	// The default cluster domain, or another one spelled as an operator might.
	if at(0)&0b10000 != 0 {
		pol.ClusterDomain = "Corp.Example."
	}
	for c := range strings.SplitSeq(cidrs, ",") {
		if p, err := netip.ParsePrefix(strings.TrimSpace(c)); err == nil {
			pol.DeniedPrefixes = append(pol.DeniedPrefixes, p.Masked())
		}
	}
	if names != "" {
		pol.DeniedNames = strings.Split(names, ",")
	}

	// Two bits a source: 0 answered, 1 failed, 2 failed with its last
	// answer held, 3 answered and marked held.
	results := []SourceResult{{Name: "a"}, {Name: "b"}, {Name: "c"}}
	for i := range results {
		state := at(1) >> (2 * i) & 3
		if state == 1 || state == 2 {
			results[i].Err = errors.New("provider failed")
		}
		results[i].Held = state >= 2
	}
	for i, line := range strings.Split(eps, "\n") {
		fields := strings.SplitN(line, "|", 3)
		fields = append(fields, "", "")
		// Bits of the endpoint's byte: serving, terminating, source (2 bits),
		// and the provider's own port (4 bits, 0 for none).
		b := at(2 + i)
		r := &results[int(b>>2&3)%len(results)]
		r.Endpoints = append(r.Endpoints, providers.Endpoint{
			Address: fields[0], Hostname: fields[1], Zone: fields[2],
			Serving: b&1 != 0, Terminating: b&2 != 0, Port: int32(b>>4) * 1000,
		})
	}
	return results, pol
}

// checkPublishable checks each published endpoint against the API server's
// EndpointSlice validation and the policy: a family the spec lists; an IP in
// its canonical form (it round-trips through netip and passes the server's
// strict check), of the slice's family, never IPv4-mapped, zone-scoped,
// unspecified, loopback, link-local or multicast (judged with the net.IP
// methods the server uses, not the netip ones Normalize uses), nor inside a
// denied prefix in either spelling of an IPv4 address, and embedding no IPv4
// address (NAT64, SIIT, IPv4-compatible, 6to4) that is any of these; a name
// that is a fully qualified domain name as the server checks it, lower-case,
// without the trailing dot, not denied, not ending in a numeric label, not
// in the cluster's DNS domain nor ending in .svc or .pod; a hostname that is
// empty or a DNS-1123 label; and no address twice.
func checkPublishable(t *testing.T, pol Policy, out []Endpoint) {
	t.Helper()
	seen := map[string]bool{}
	for _, e := range out {
		if !slices.Contains(pol.AddressTypes, v1alpha1.AddressType(e.AddressType)) {
			t.Errorf("%s %q published, but spec.addressTypes is %v", e.AddressType, e.Address, pol.AddressTypes)
		}
		switch e.AddressType {
		case discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6:
			checkIP(t, pol, e)
		case discoveryv1.AddressTypeFQDN:
			checkName(t, pol, e.Address)
		default:
			t.Errorf("%q published with address type %q", e.Address, e.AddressType)
		}
		if errs := validation.IsDNS1123Label(e.Hostname); e.Hostname != "" && len(errs) > 0 {
			t.Errorf("%q published with hostname %q: %v", e.Address, e.Hostname, errs)
		}
		if seen[e.key()] {
			t.Errorf("%s %q published twice", e.AddressType, e.Address)
		}
		seen[e.key()] = true
	}
}

func checkIP(t *testing.T, pol Policy, e Endpoint) {
	t.Helper()
	ip, err := netip.ParseAddr(e.Address)
	if err != nil || ip.String() != e.Address {
		t.Errorf("%s %q is not a canonical IP (%v, reads back as %q)", e.AddressType, e.Address, err, ip)
		return
	}
	if errs := validation.IsValidIP(nil, e.Address); len(errs) > 0 {
		t.Errorf("%q: the API server rejects it: %v", e.Address, errs)
	}
	if ip.Is4In6() || ip.Zone() != "" || ip.Is4() != (e.AddressType == discoveryv1.AddressTypeIPv4) {
		t.Errorf("%q published as %s", e.Address, e.AddressType)
	}
	checkAllowedIP(t, pol, e.Address, ip)
	for _, v4 := range embeddedReadings(ip) {
		checkAllowedIP(t, pol, fmt.Sprintf("%s (embedding %s)", e.Address, v4), v4)
	}
}

// checkAllowedIP checks that ip is neither one the API server rejects nor
// inside a denied prefix; what names it in errors.
func checkAllowedIP(t *testing.T, pol Policy, what string, ip netip.Addr) {
	t.Helper()
	nip := net.IP(ip.AsSlice())
	if nip.IsUnspecified() || nip.IsLoopback() || nip.IsLinkLocalUnicast() || nip.IsLinkLocalMulticast() || nip.IsMulticast() {
		t.Errorf("%s is unspecified, loopback, link-local or multicast", what)
	}
	mapped := netip.MustParsePrefix("::ffff:0:0/96")
	for _, p := range pol.DeniedPrefixes {
		if p.Contains(ip) || (mapped.Overlaps(p) && p.Bits() >= mapped.Bits() && p.Contains(netip.AddrFrom16(ip.As16()))) {
			t.Errorf("%s is inside the denied %s", what, p)
		}
	}
}

// embeddedReadings reads the IPv4 addresses in an IPv6 one, written apart
// from EmbeddedIPv4s from the RFCs' prefixes and bit positions: the last 32
// bits in 64:ff9b::/96, ::ffff:0:0:0/96 and ::/96 (but :: and ::1); in
// 64:ff9b:1::/48 the last 32 bits and bits 48-63 and 72-87, a zero reading
// being the padding of the other unless both are; bits 16-47 in 2002::/16.
func embeddedReadings(ip netip.Addr) []netip.Addr {
	b := ip.As16()
	read := func(i, j, k, l int) netip.Addr { return netip.AddrFrom4([4]byte{b[i], b[j], b[k], b[l]}) }
	in := func(p string) bool { return ip.Is6() && netip.MustParsePrefix(p).Contains(ip.WithZone("")) }
	last := read(12, 13, 14, 15)
	switch {
	case in("64:ff9b::/96"), in("::ffff:0:0:0/96"), in("::/96") && ip.WithZone("").Compare(netip.IPv6Loopback()) > 0:
		return []netip.Addr{last}
	case in("64:ff9b:1::/48"):
		at48 := read(6, 7, 9, 10)
		if at48 == netip.IPv4Unspecified() {
			return []netip.Addr{last}
		}
		if last == netip.IPv4Unspecified() {
			return []netip.Addr{at48}
		}
		return []netip.Addr{last, at48}
	case in("2002::/16"):
		return []netip.Addr{read(2, 3, 4, 5)}
	}
	return nil
}

func checkName(t *testing.T, pol Policy, name string) {
	t.Helper()
	if _, err := netip.ParseAddr(name); err == nil {
		t.Errorf("IP %q published as FQDN", name)
	}
	if errs := validation.IsFullyQualifiedDomainName(nil, name); len(errs) > 0 {
		t.Errorf("FQDN %q: the API server rejects it: %v", name, errs.ToAggregate())
	}
	if name != strings.ToLower(name) || strings.HasSuffix(name, ".") {
		t.Errorf("FQDN %q is not lower-case without the trailing dot", name)
	}
	for _, d := range pol.DeniedNames {
		d = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(d)), ".")
		if name == d || (strings.HasPrefix(d, "*.") && strings.HasSuffix(name, d[1:])) {
			t.Errorf("FQDN %q is denied by %q", name, d)
		}
	}
	labels := strings.Split(name, ".")
	last := labels[len(labels)-1]
	hex := strings.TrimPrefix(last, "0x")
	if strings.Trim(last, "0123456789") == "" || (hex != last && strings.Trim(hex, "0123456789abcdef") == "") {
		t.Errorf("FQDN %q ends in a numeric label, read as an IPv4 address", name)
	}
	domain := "cluster.local"
	if pol.ClusterDomain != "" {
		domain = strings.TrimSuffix(strings.ToLower(pol.ClusterDomain), ".")
	}
	if name == domain || strings.HasSuffix(name, "."+domain) || last == "svc" || last == "pod" {
		t.Errorf("FQDN %q points into the cluster's DNS domain %s", name, domain)
	}
}

// checkMerged checks that Normalize over all sources is the merge of
// Normalize over each endpoint alone (see FuzzNormalize), and that an
// endpoint alone keeps what the provider said: zone, health, a valid
// hostname, and its port where the spec gives no targetPort.
func checkMerged(t *testing.T, results []SourceResult, pol Policy, out []Endpoint, dropped []Dropped) {
	t.Helper()
	published := map[string]bool{}
	for _, r := range results {
		if r.Err != nil && !r.Held {
			continue
		}
		for _, pe := range r.Endpoints {
			alone, drop := Normalize([]SourceResult{{Name: r.Name, Endpoints: []providers.Endpoint{pe}}}, pol)
			if len(alone)+len(drop) != 1 {
				t.Fatalf("%q alone: published %v and dropped %v, want exactly one of them", pe.Address, alone, drop)
			}
			if len(drop) == 1 {
				if drop[0].Source != r.Name || drop[0].Address != pe.Address || drop[0].Reason == "" {
					t.Errorf("%q from %s alone dropped as %+v", pe.Address, r.Name, drop[0])
				}
				if len(dropped) == 0 || !reflect.DeepEqual(dropped[0], drop[0]) {
					t.Fatalf("%q from %s: dropped alone as %+v, next drop of the merge is %+v", pe.Address, r.Name, drop[0], dropped)
				}
				dropped = dropped[1:]
				continue
			}
			e := alone[0]
			checkKept(t, pol, pe, e)
			if published[e.key()] {
				continue
			}
			published[e.key()] = true
			if len(out) == 0 || !reflect.DeepEqual(out[0], e) {
				t.Fatalf("%q from %s: published alone as %+v, next endpoint of the merge is %+v", pe.Address, r.Name, e, out)
			}
			out = out[1:]
		}
	}
	if len(out) > 0 || len(dropped) > 0 {
		t.Errorf("the merge published %+v and dropped %+v that come from no source in use", out, dropped)
	}
}

// checkKept checks that e, published for pe, keeps what the provider said,
// a name included.
func checkKept(t *testing.T, pol Policy, pe providers.Endpoint, e Endpoint) {
	t.Helper()
	hostname := pe.Hostname
	if len(validation.IsDNS1123Label(hostname)) > 0 {
		hostname = ""
	}
	if e.Zone != pe.Zone || e.Hostname != hostname || e.Serving != pe.Serving || e.Terminating != pe.Terminating {
		t.Errorf("%+v published as %+v", pe, e)
	}
	if e.AddressType == discoveryv1.AddressTypeFQDN && !sameName(e.Address, pe.Address) {
		t.Errorf("name %q published as %q: only ASCII case and the trailing dot may change", pe.Address, e.Address)
	}
	if len(e.Ports) != len(pol.Ports) {
		t.Fatalf("%q published with ports %v, the Service has %v", e.Address, e.Ports, pol.Ports)
	}
	for i, p := range pol.Ports {
		want := p.Port
		switch {
		case p.TargetPort != nil:
			want = *p.TargetPort
		case pe.Port != 0:
			want = pe.Port
		}
		proto := corev1.Protocol(p.Protocol)
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		got := e.Ports[i]
		if ptr.Deref(got.Name, "") != p.Name || ptr.Deref(got.Port, 0) != want || ptr.Deref(got.Protocol, "") != proto ||
			!reflect.DeepEqual(got.AppProtocol, p.AppProtocol) {
			t.Errorf("%q (port %d) published on %s/%d/%s, want %s/%d/%s", e.Address, pe.Port,
				ptr.Deref(got.Name, ""), ptr.Deref(got.Port, 0), ptr.Deref(got.Protocol, ""), p.Name, want, proto)
		}
	}
}

// sameName reports whether published is given with ASCII letters in lower
// case and without one trailing dot, byte for byte.
func sameName(published, given string) bool {
	given = strings.TrimSuffix(given, ".")
	if len(published) != len(given) {
		return false
	}
	for i := range len(given) {
		c := given[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if published[i] != c {
			return false
		}
	}
	return true
}
