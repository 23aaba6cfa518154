//go:build bench

package noisy

import (
	"flag"
	"testing"

	"github.com/backendslice/backendslice/test/docsection"
)

// report, if set, is the Markdown file (docs/benchmarks.md) whose
// noisy-neighbour section TestNoisyNeighbourReport rewrites.
var report = flag.String("report", "", "if set, the Markdown file (docs/benchmarks.md) whose noisy-neighbour section TestNoisyNeighbourReport rewrites")

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
