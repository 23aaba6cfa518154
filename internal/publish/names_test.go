package publish

import (
	"net/netip"
	"strings"
	"testing"
)

func TestNumericName(t *testing.T) {
	cases := map[string]bool{
		"1684301000":          true,
		"0x64.0x64.0x64.0xc8": true,
		"0X64.0X64.0X64.0XC8": true,
		"0144.0144.0144.0310": true,
		"100.0x64.100.200":    true,
		"100.100.100.200.":    true,
		"1.2.3.4.5":           true,
		"db.example.123":      true,
		"db.example.123.":     true,
		"db.0x":               true,
		"db.0x1F":             true,
		"0":                   true,
		"db.example.com":      false,
		"db.example.com.":     false,
		"123.example.com":     false,
		"0x64.example.com":    false,
		"1e100.net":           false,
		"db.0x1g":             false,
		"db.x64":              false,
		"db.0b1":              false,
		"db.1a":               false,
		"1..":                 false,
		".":                   false,
		"":                    false,
	}
	for name, want := range cases {
		if got := NumericName(name); got != want {
			t.Errorf("NumericName(%q) = %v, want %v", name, got, want)
		}
	}
}

// lenientIPv4 reads a host as inet_aton and WHATWG URL parsers do; its
// answer is shown in the reason a numeric name is dropped.
func TestLenientIPv4(t *testing.T) {
	ok := map[string]string{
		"1684301000":          "100.100.100.200",
		"0x64.0x64.0x64.0xc8": "100.100.100.200",
		"0144.0144.0144.0310": "100.100.100.200",
		"100.0x64.100.200":    "100.100.100.200",
		"100.100.100.200.":    "100.100.100.200",
		"100.100.25800":       "100.100.100.200",
		"100.6579400":         "100.100.100.200",
		"0xa9fea9fe":          "169.254.169.254",
		"0x":                  "0.0.0.0",
		"0":                   "0.0.0.0",
		"00":                  "0.0.0.0",
		"4294967295":          "255.255.255.255",
		"127.1":               "127.0.0.1",
	}
	for in, want := range ok {
		if got, valid := lenientIPv4(in); !valid || got != netip.MustParseAddr(want) {
			t.Errorf("lenientIPv4(%q) = %v, %v, want %s", in, got, valid, want)
		}
	}
	for _, in := range []string{"4294967296", "1.2.3.256", "1.2.16777216", "1.2.3.4.5", "256.1.1.1", "08.1.1.1", "1..2",
		"", ".", "a.1", "0x1g", "1.2.3.4..", "+1", "-1", "0x+1", "1_000"} {
		if got, valid := lenientIPv4(in); valid {
			t.Errorf("lenientIPv4(%q) = %v, want no address", in, got)
		}
	}
}

func TestClusterNameReason(t *testing.T) {
	cases := []struct {
		name, domain string
		want         string // a part of the reason; "" for none
	}{
		{"db.example.com", "", ""},
		{"kubernetes.default.svc.cluster.local", "", "cluster's DNS domain cluster.local"},
		{"db.payments.svc.corp.test", "corp.test", "cluster's DNS domain corp.test"},
		{"db.payments.svc.corp.test", "", ""},
		{"kube-dns.kube-system.svc", "", "ends in .svc"},
		{"10-0-0-1.default.pod", "", "ends in .pod"},
		{"kubernetes.default", "", "Service of namespace default"},
		{"kube-dns.kube-system", "corp.test", "(kube-dns.kube-system.svc.corp.test)"},
		{"default.example.com", "", ""},
		{"localhost.example.com", "", ""},
		{"x.localhost", "", "localhost"},
		{"instance-data.ec2.internal", "", "instance metadata service"},
		{"instance-data.eu-west-1.compute.internal", "", "instance metadata service"},
		{"my-instance-data.example.com", "", ""},
	}
	for _, c := range cases {
		got := ClusterNameReason(c.name, c.domain)
		if (got == "") != (c.want == "") || !strings.Contains(got, c.want) {
			t.Errorf("ClusterNameReason(%q, %q) = %q, want one naming %q", c.name, c.domain, got, c.want)
		}
	}
}
