package publish

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// DefaultClusterDomain is the cluster's DNS domain where none is configured:
// kubelet's --cluster-domain as kubeadm and most distributions set it.
const DefaultClusterDomain = "cluster.local"

// NumericName reports whether name, a DNS name with or without its trailing
// dot, is one that resolvers, libc and URL parsers read as an IPv4 address
// instead of looking it up: its last label is a number, decimal (octal with
// a leading 0) or hexadecimal with 0x. libc's inet_aton, and getaddrinfo
// with it, read one to four such parts as an address (1684301000,
// 0x64.0x64.0x64.0xc8, 0144.0144.0144.0310, 100.0x64.100.200, each
// 100.100.100.200), and a URL parser (WHATWG) reads any host whose last
// label is a number as IPv4, or rejects it. A name like that reaches an
// address that no IP deny rule has judged. No top-level domain is numeric
// (RFC 3696, section 2), so no name that DNS can resolve is refused.
func NumericName(name string) bool {
	labels := strings.Split(name, ".")
	if len(labels) > 1 && labels[len(labels)-1] == "" {
		labels = labels[:len(labels)-1]
	}
	return numericLabel(labels[len(labels)-1])
}

// numericLabel reports whether s is a number as URL parsers read IPv4
// parts: decimal digits, or 0x (or 0X) and hexadecimal digits, maybe none.
func numericLabel(s string) bool {
	digits := "0123456789"
	if len(s) >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') {
		s, digits = s[2:], "0123456789abcdefABCDEF"
	} else if s == "" {
		return false
	}
	return strings.Trim(s, digits) == ""
}

// lenientIPv4 reads name as inet_aton and URL parsers read an IPv4 host:
// one trailing dot allowed, one to four parts, each decimal, octal with a
// leading 0 or hexadecimal with 0x, the last filling the bytes the others
// leave. It reports false for a name that is not such an address.
func lenientIPv4(name string) (netip.Addr, bool) {
	parts := strings.Split(strings.TrimSuffix(name, "."), ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	var v uint64
	for i, p := range parts {
		base := 10
		switch {
		case len(p) >= 2 && (p[:2] == "0x" || p[:2] == "0X"):
			base, p = 16, p[2:]
			if p == "" {
				p = "0"
			}
		case len(p) > 1 && p[0] == '0':
			base = 8
		}
		if p == "" {
			return netip.Addr{}, false
		}
		n, err := strconv.ParseUint(p, base, 32)
		if err != nil {
			return netip.Addr{}, false
		}
		if i < len(parts)-1 {
			if n > 255 {
				return netip.Addr{}, false
			}
			v = v<<8 | n
			continue
		}
		rest := uint(8 * (4 - i))
		if n >= 1<<rest {
			return netip.Addr{}, false
		}
		v = v<<rest | n
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true
}

// numericNameReason says why a numeric name (see NumericName) is refused.
func numericNameReason(name string) string {
	if a, ok := lenientIPv4(name); ok {
		return fmt.Sprintf("numeric name that resolvers, libc and URL parsers read as the IPv4 address %s, "+
			"past the IP checks and --denied-cidrs; give the IP address instead", a)
	}
	return "ends in a numeric label, which resolvers, libc and URL parsers read as an IPv4 address, " +
		"and this is not a valid one; give the IP address or a DNS name"
}

// ClusterNameReason says why name, lower case without the trailing dot,
// points back into the cluster, at the host itself or at a cloud metadata
// service, or is "" when it does not:
//   - it is in the cluster's DNS domain, or ends in a label that Pods' DNS
//     search paths complete into it (kubernetes.default.svc,
//     10-0-0-1.default.pod);
//   - it is a Service of a namespace every cluster has, as a Pod's search
//     path completes it (kubernetes.default, kube-dns.kube-system);
//   - it is localhost or under it, which resolvers answer with loopback
//     (RFC 6761);
//   - its first label is instance-data, AWS's name of the instance
//     metadata service (instance-data.ec2.internal, and
//     instance-data.<region>.compute.internal).
func ClusterNameReason(name, clusterDomain string) string {
	domain := flagName(clusterDomain)
	if domain == "" {
		domain = DefaultClusterDomain
	}
	if name == domain || strings.HasSuffix(name, "."+domain) {
		return fmt.Sprintf("is in the cluster's DNS domain %s: a Service must not point back into the cluster", domain)
	}
	labels := strings.Split(name, ".")
	last := labels[len(labels)-1]
	switch {
	case last == "svc" || last == "pod":
		return fmt.Sprintf("ends in .%s, which Pods' DNS search paths complete to %s.%s, in the cluster's DNS domain: "+
			"a Service must not point back into the cluster", last, name, domain)
	case len(labels) == 2 && slices.Contains(EveryClustersNamespaces, last):
		return fmt.Sprintf("is a Service of namespace %s as Pods' DNS search paths complete it (%s.svc.%s): "+
			"a Service must not point back into the cluster", last, name, domain)
	case last == "localhost":
		return "is localhost or under it, which resolvers answer with the host's own loopback address (RFC 6761)"
	case labels[0] == MetadataLabel:
		return "is a name of AWS's instance metadata service (instance-data): a Service must not point at the metadata service"
	}
	return ""
}

// EveryClustersNamespaces are the namespaces every Kubernetes cluster has.
// The CRD refuses their Services as names too (a CEL rule lists them:
// TestCRDRefusesWhatTheControllerRefuses keeps the two lists one).
var EveryClustersNamespaces = []string{"default", "kube-system", "kube-public", "kube-node-lease"}

// MetadataNames are the DNS names of clouds' instance metadata services
// (Google Cloud's): the controller denies them and the names under them by
// default (DeniedMetadataNames), with what --denied-names adds, and the
// CRD refuses them and the names under them (its CEL rule lists them:
// TestCRDRefusesWhatTheControllerRefuses).
var MetadataNames = []string{"metadata.google.internal", "metadata.goog"}

// DeniedMetadataNames are the entries of a deny list (Policy.DeniedNames)
// that refuse each of MetadataNames and, as "*.name", every name under it:
// a name under a metadata name (x.metadata.google.internal) is in the
// cloud's own zone, which the instance's resolver answers and which no
// tenant's backend lives in, and the CRD refuses it at admission. Objects
// stored before the CRD refused it can still hold one, so the controller
// refuses it too.
func DeniedMetadataNames() []string {
	out := make([]string, 0, 2*len(MetadataNames))
	for _, m := range MetadataNames {
		out = append(out, m, "*."+m)
	}
	return out
}

// MetadataLabel is the first label of the names of AWS's instance
// metadata service (instance-data.ec2.internal,
// instance-data.<region>.compute.internal).
const MetadataLabel = "instance-data"

// flagName is a name as an operator writes it in a flag (any case, spaces
// after a comma, one or more dots at the end) in the form names are
// compared in.
func flagName(s string) string {
	return strings.TrimRight(CanonicalName(strings.TrimSpace(s)), ".")
}
