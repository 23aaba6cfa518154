//go:build !bench

package noisy

import (
	"flag"
	"testing"
)

// TestNoisyNeighbourShort is the benchmark's short form for `make test`:
// every attack at a tenth of its scale or less, a couple of victim changes
// in each mode and phase, a one-second quiet pause. It asserts only that
// every change arrives; its numbers are logged and mean little at this
// size.
func TestNoisyNeighbourShort(t *testing.T) {
	for name, value := range map[string]string{
		"backends": "2", "addresses": "20", "flip-period": "500ms",
		"dns-backends": "6", "dns-edit-period": "2s", "storm-backends": "6", "storm-period": "500ms", "servfail-backends": "30",
		"warmup": "2s", "settle": "1s", "duration": "1m",
		"creates": "2", "flips": "2", "revocations": "1",
		"quiet-creates": "1", "quiet-flips": "2", "quiet-revocations": "1", "quiet-gap": "1s",
	} {
		if err := flag.Set(name, value); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("short form:\n%s", measure(t).Markdown())
}
