//go:build !bench

package noisy

import (
	"flag"
	"testing"
)

// TestNoisyNeighbourShort is the benchmark's short form for `make test`:
// 2 attacker backends of 20 addresses, a few victim changes in each phase
// (about ten seconds). It asserts only that every change arrives; its
// numbers are logged and mean little at this size.
func TestNoisyNeighbourShort(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	for name, value := range map[string]string{
		"backends": "2", "addresses": "20", "flip-period": "500ms", "warmup": "1s", "duration": "1m",
		"creates": "4", "flips": "4", "revocations": "2",
	} {
		if err := flag.Set(name, value); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("short form:\n%s", measure(t).Markdown())
}
