//go:build bench

package churn

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/backendslice/backendslice/test/docsection"
)

// docs is where the report and the chart go.
var docs = flag.String("docs", filepath.Join("..", "..", "..", "docs"), "directory for benchmarks.md and churn.png")

// seeds are the seeds every sequence runs with.
var seeds = []uint64{1, 2, 3, 4, 5}

// repetitions is how often upstream replays every seed: its writes differ
// from one replay to the next. On the 2-core machine of docs/benchmarks.md
// the run takes about 2.5 minutes with one and 40 to 50 seconds more for
// every further one; 4 keep `make bench-churn` within 6 minutes even when
// the machine is busy with other work.
const repetitions = 4

// TestChurnReport replays the sequences, and the flapping one under the
// coalescing windows, and writes docs/benchmarks.md and docs/churn.png. It
// reports, and does not fail on, the rows where ours writes more than
// upstream.
func TestChurnReport(t *testing.T) {
	ctx := context.Background()
	rows, err := Measure(ctx, seeds, repetitions)
	if err != nil {
		t.Fatal(err)
	}
	coalesced, err := MeasureCoalescing(ctx, seeds, rows)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(*docs, 0o755); err != nil {
		t.Fatal(err)
	}
	var chart, md bytes.Buffer
	if err := WriteChart(&chart, rows); err != nil {
		t.Fatal(err)
	}
	if err := WriteMarkdown(&md, rows, coalesced, seeds, repetitions, "churn.png"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(*docs, "churn.png"), chart.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	// The file also holds the failover section (make bench-failover).
	if err := docsection.Replace(filepath.Join(*docs, "benchmarks.md"), "churn", md.String()); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		o, u, f := r.Ours(), r.Upstream(), r.Floor()
		t.Logf("%-30s %-10s ours %7.1f (worst %4d)  upstream %7.1f (worst %4d, spread %s)  floor %7.1f",
			r.Sequence, r.Family(), o.Mean.Writes, o.Worst, u.Mean.Writes, u.Worst, spread(r), f.Mean.Writes)
	}
	for _, r := range coalesced {
		mean, longest := r.Delay()
		t.Logf("%-38s %-10s ours %7.1f (worst %4d)  delay %6s (max %5s)  never published %5.1f",
			r.Label(), r.Off.Family(), r.Ours().Mean.Writes, r.Ours().Worst, mean.Round(time.Millisecond), longest, r.Unpublished())
	}
	for _, s := range Worse(rows) {
		t.Logf("OURS WRITES MORE: %s", s)
	}
}
