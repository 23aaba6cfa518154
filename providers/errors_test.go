package providers

import (
	"strings"
	"testing"
)

func TestPrintable(t *testing.T) {
	cases := []struct{ in, want string }{
		{"ACL not found", "ACL not found"},
		{"line one\nline\ttwo", "line one line two"},
		{"\x1b[31mred\x1b[0m\x00", "[31mred[0m"},
		{strings.Repeat("x", 300), strings.Repeat("x", 20) + "..."},
		{strings.Repeat("é", 15), strings.Repeat("é", 10) + "..."},
	}
	for _, c := range cases {
		if got := Printable(c.in, 20); got != c.want {
			t.Errorf("Printable(%q, 20) = %q, want %q", c.in, got, c.want)
		}
	}
}
