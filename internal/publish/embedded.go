package publish

import "net/netip"

// Embedding is an IPv4 address read out of an IPv6 one, and the form it
// was read by.
type Embedding struct {
	// IPv4 is the embedded address.
	IPv4 netip.Addr
	// Form names the IPv6 form and its prefix, as in "NAT64 64:ff9b::/96".
	Form string
}

// The forms EmbeddedIPv4s reads, named as reasons and status show them.
const (
	formMapped     = "IPv4-mapped ::ffff:0:0/96"
	formTranslated = "IPv4-translated ::ffff:0:0:0/96"
	formCompatible = "IPv4-compatible ::/96"
	formNAT64      = "NAT64 64:ff9b::/96"
	formNAT64Local = "NAT64 local-use 64:ff9b:1::/48"
	form6to4       = "6to4 2002::/16"
	formTeredo     = "Teredo 2001::/32"
	formISATAP     = "ISATAP interface identifier ::5efe:0:0/96"
)

// EmbeddedIPv4s returns the IPv4 addresses that the IPv6 address a carries
// in one of the forms that translators, tunnels or the host's own stack
// turn into IPv4 traffic to that address, so that a deny rule for an IPv4
// range can also judge the IPv6 spellings of its addresses:
//
//   - IPv4-mapped ::ffff:0:0/96 (RFC 4291), the last 32 bits;
//   - IPv4-translated ::ffff:0:0:0/96 (SIIT, RFC 2765), the last 32 bits;
//   - IPv4-compatible ::/96 (deprecated, RFC 4291), the last 32 bits, except
//     for :: and ::1, which are IPv6's unspecified and loopback addresses;
//   - NAT64's well-known prefix 64:ff9b::/96 (RFC 6052), the last 32 bits;
//   - NAT64's local-use prefix 64:ff9b:1::/48 (RFC 8215), read two ways:
//     the last 32 bits, as most deployments use it (a /96 inside the /48),
//     and at RFC 6052's position for a /48 prefix: 16 bits at bits 48 to
//     63 and 16 at bits 72 to 87, skipping the u octet (bits 64 to 71).
//     A reading of 0.0.0.0 is left out when the other is not: it is the
//     zero padding of an address in the other layout; the same address
//     read both ways is given once;
//   - 6to4 2002::/16 (RFC 3056), bits 16 to 47;
//   - Teredo 2001::/32 (RFC 4380), read two ways: the client's address,
//     the last 32 bits inverted (where a relay sends the traffic), and the
//     server's, bits 32 to 63;
//   - ISATAP (RFC 5214) in any /64: an interface identifier of
//     0:5efe or 200:5efe (the universal/local bit set) followed by the
//     IPv4 address, the last 32 bits.
//
// A deny check must judge every reading: an address is unsafe when any of
// them is. The result is nil for an IPv4 address and for IPv6 addresses in
// none of these forms; a zone is ignored. NAT64 network-specific prefixes
// (a site's own /32 to /96) cannot be told from ordinary addresses and are
// not read.
func EmbeddedIPv4s(a netip.Addr) []Embedding {
	if !a.Is6() {
		return nil
	}
	a = a.WithZone("")
	b := a.As16()
	last32 := netip.AddrFrom4([4]byte(b[12:16]))
	switch {
	case a.Is4In6():
		return []Embedding{{last32, formMapped}}
	case prefixTranslated.Contains(a):
		return []Embedding{{last32, formTranslated}}
	case prefixCompatible.Contains(a):
		if a.Compare(netip.IPv6Loopback()) <= 0 {
			return nil
		}
		return []Embedding{{last32, formCompatible}}
	case prefixNAT64.Contains(a):
		return []Embedding{{last32, formNAT64}}
	case prefixNAT64Local.Contains(a):
		return nat64LocalReadings(last32, netip.AddrFrom4([4]byte{b[6], b[7], b[9], b[10]}))
	case prefix6to4.Contains(a):
		return []Embedding{{netip.AddrFrom4([4]byte(b[2:6])), form6to4}}
	case prefixTeredo.Contains(a):
		client := [4]byte(b[12:16])
		for i := range client {
			client[i] ^= 0xff
		}
		return []Embedding{
			{netip.AddrFrom4(client), formTeredo + " (client, last 32 bits inverted)"},
			{netip.AddrFrom4([4]byte(b[4:8])), formTeredo + " (server, bits 32 to 63)"},
		}
	case (b[8] == 0x00 || b[8] == 0x02) && b[9] == 0x00 && b[10] == 0x5e && b[11] == 0xfe:
		return []Embedding{{last32, formISATAP}}
	}
	return nil
}

// The prefixes of the forms EmbeddedIPv4s reads (IPv4-mapped aside).
var (
	prefixTranslated = netip.MustParsePrefix("::ffff:0:0:0/96")
	prefixCompatible = netip.MustParsePrefix("::/96")
	prefixNAT64      = netip.MustParsePrefix("64:ff9b::/96")
	prefixNAT64Local = netip.MustParsePrefix("64:ff9b:1::/48")
	prefix6to4       = netip.MustParsePrefix("2002::/16")
	prefixTeredo     = netip.MustParsePrefix("2001::/32")
)

// nat64LocalReadings are the readings of an address in 64:ff9b:1::/48: its
// last 32 bits, and the IPv4 address at RFC 6052's /48 position. Each
// reading's bits are zero in the other layout's addresses, so a reading of
// 0.0.0.0 is the other's padding and left out, unless both are.
func nat64LocalReadings(last32, at48 netip.Addr) []Embedding {
	var out []Embedding
	if !last32.IsUnspecified() || at48.IsUnspecified() {
		out = append(out, Embedding{last32, formNAT64Local + " (last 32 bits)"})
	}
	if !at48.IsUnspecified() && at48 != last32 {
		out = append(out, Embedding{at48, formNAT64Local + " (RFC 6052 /48 position)"})
	}
	return out
}

// EmbeddedIPv4 returns the first IPv4 address EmbeddedIPv4s reads in a, the
// name of its form, and whether there is one. Only 64:ff9b:1::/48 has a
// second reading: a deny check should use EmbeddedIPv4s.
func EmbeddedIPv4(a netip.Addr) (netip.Addr, string, bool) {
	all := EmbeddedIPv4s(a)
	if len(all) == 0 {
		return netip.Addr{}, "", false
	}
	return all[0].IPv4, all[0].Form, true
}
