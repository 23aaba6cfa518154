//go:build bench

package noisy

import (
	"testing"

	"github.com/backendslice/backendslice/test/docsection"
)

// TestNoisyNeighbourReport runs the benchmark at the scale of the flags
// (`make bench-noisy`: the red-team review's attack) and writes the
// noisy-neighbour section of the report.
func TestNoisyNeighbourReport(t *testing.T) {
	md := measure(t).Markdown()
	t.Logf("report:\n%s", md)
	if *report != "" {
		if err := docsection.Replace(*report, "noisy-neighbour", md); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote the noisy-neighbour section of %s", *report)
	}
}
