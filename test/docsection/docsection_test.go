package docsection

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

func TestReplace(t *testing.T) {
	b1, e1 := markers("one")
	b2, e2 := markers("two")
	for _, tc := range []struct {
		name, doc, section, body, want string
		err                            bool
	}{
		{name: "empty file", doc: "", section: "one", body: "x", want: b1 + "\nx\n" + e1 + "\n"},
		{
			name: "appended after other text", doc: "# Title\n", section: "two", body: "y\n",
			want: "# Title\n\n" + b2 + "\ny\n" + e2 + "\n",
		},
		{
			name:    "replaced in place, others kept",
			doc:     "# T\n\n" + b1 + "\nold\n" + e1 + "\n\n" + b2 + "\nkeep\n" + e2 + "\n",
			section: "one", body: "new",
			want: "# T\n\n" + b1 + "\nnew\n" + e1 + "\n\n" + b2 + "\nkeep\n" + e2 + "\n",
		},
		{name: "end before begin", doc: e1 + "\n" + b1 + "\n", section: "one", body: "x", err: true},
		{name: "begin without end", doc: b1 + "\nx\n", section: "one", body: "x", err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := replace(tc.doc, tc.section, tc.body)
			if tc.err {
				if err == nil {
					t.Fatalf("no error; got %q", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
			if again, _ := replace(got, tc.section, tc.body); again != got || strings.Count(got, "begin "+tc.section) != 1 {
				t.Errorf("a second replace changed the text:\n%s", again)
			}
		})
	}
}

func TestLoadAverage(t *testing.T) {
	got := LoadAverage()
	if _, err := os.Stat("/proc/loadavg"); err != nil {
		if got != "unknown" {
			t.Errorf("LoadAverage() = %q without /proc/loadavg, want unknown", got)
		}
		return
	}
	f := strings.Fields(got)
	if len(f) != 3 {
		t.Fatalf("LoadAverage() = %q, want three figures", got)
	}
	for _, x := range f {
		if _, err := strconv.ParseFloat(x, 64); err != nil {
			t.Errorf("LoadAverage() = %q: %q is no number", got, x)
		}
	}
}

// TestRSS: this process's resident set is read, and grows when it touches
// memory it did not have.
func TestRSS(t *testing.T) {
	before := RSS()
	buf := make([]byte, 64<<20)
	for i := range buf {
		buf[i] = 1
	}
	after := RSS()
	if before == 0 || after < before+32<<20 {
		t.Errorf("RSS %d before touching 64 MiB, %d after: want it read, and grown", before, after)
	}
	runtime.KeepAlive(buf)
}
