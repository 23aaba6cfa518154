package churn

import (
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Stats are one writer's writes on one row, over its runs: one a seed for
// ours, one a seed and repetition for upstream.
type Stats struct {
	// Mean is the mean count of each kind of write and of bytes.
	Mean struct{ Creates, Updates, Deletes, Writes, Bytes float64 }
	// Worst is the most writes of any run.
	Worst int
}

// stats sums up one writer's runs. It sums the counts before dividing, so
// that runs with equal counts have exactly that mean, whatever their number.
func stats[R any](runs []R, pick func(R) Counts) Stats {
	var s Stats
	var sum Counts
	for _, r := range runs {
		c := pick(r)
		sum.Creates += c.Creates
		sum.Updates += c.Updates
		sum.Deletes += c.Deletes
		sum.Bytes += c.Bytes
		s.Worst = max(s.Worst, c.Writes())
	}
	n := float64(len(runs))
	s.Mean.Creates = float64(sum.Creates) / n
	s.Mean.Updates = float64(sum.Updates) / n
	s.Mean.Deletes = float64(sum.Deletes) / n
	s.Mean.Writes = float64(sum.Writes()) / n
	s.Mean.Bytes = float64(sum.Bytes) / n
	return s
}

// Ours sums up the row's runs of our writer.
func (r Row) Ours() Stats { return stats(r.Runs, func(x Run) Counts { return x.Ours }) }

// Blind sums up the row's runs of our writer without churn-aware placement.
func (r Row) Blind() Stats { return stats(r.Runs, func(x Run) Counts { return x.Blind }) }

// Upstream sums up every repetition of every seed of the upstream reconciler.
func (r Row) Upstream() Stats {
	var all []Counts
	for _, run := range r.Runs {
		all = append(all, run.Upstream...)
	}
	return stats(all, func(c Counts) Counts { return c })
}

// Spread is the lowest and the highest of upstream's mean writes over the
// seeds of one repetition: the range a report replaying upstream once a
// seed could have shown.
func (r Row) Spread() (lowest, highest float64) {
	means := make([]float64, len(r.Runs[0].Upstream))
	for k := range means {
		means[k] = stats(r.Runs, func(x Run) Counts { return x.Upstream[k] }).Mean.Writes
	}
	return slices.Min(means), slices.Max(means)
}

// Floor sums up the row's floors: distinct slices holding a changed endpoint.
func (r Row) Floor() Stats {
	return stats(r.Runs, func(x Run) Counts { return Counts{Updates: x.Floor} })
}

// Worse lists the rows where ours writes more than upstream, in writes
// (mean, against upstream's mean over repetitions, or worst) or in bytes, as
// sentences. A sentence on writes says whether the difference of the means
// is within upstream's spread, and so no difference at all.
func Worse(rows []Row) []string {
	var out []string
	for _, r := range rows {
		o, u, b := r.Ours(), r.Upstream(), r.Blind()
		for _, run := range r.Runs {
			if run.Ours.Writes() > run.Blind.Writes() {
				out = append(out, fmt.Sprintf("%s (%s): churn-aware placement writes %d, without it %d, on a seed",
					r.Sequence, r.Family(), run.Ours.Writes(), run.Blind.Writes()))
			}
		}
		if o.Mean.Writes > b.Mean.Writes {
			out = append(out, fmt.Sprintf("%s (%s): ours %.1f writes, without churn-aware placement %.1f", r.Sequence, r.Family(), o.Mean.Writes, b.Mean.Writes))
		}
		if o.Mean.Writes > u.Mean.Writes || o.Worst > u.Worst {
			out = append(out, fmt.Sprintf("%s (%s): ours %.1f writes (worst %d), upstream %.1f (worst %d); %s",
				r.Sequence, r.Family(), o.Mean.Writes, o.Worst, u.Mean.Writes, u.Worst, r.verdict()))
		}
		if o.Mean.Bytes > u.Mean.Bytes {
			out = append(out, fmt.Sprintf("%s (%s): ours %s written, upstream %s",
				r.Sequence, r.Family(), kib(o.Mean.Bytes), kib(u.Mean.Bytes)))
		}
	}
	return out
}

// WithinSpread tells whether the mean writes of ours and of upstream differ
// by no more than upstream's spread (highest minus lowest): a difference no
// larger than what separates one replay of upstream from the next is not a
// difference.
func (r Row) WithinSpread() bool {
	lowest, highest := r.Spread()
	return math.Abs(r.Ours().Mean.Writes-r.Upstream().Mean.Writes) <= highest-lowest
}

// verdict puts the row's difference of mean writes, ours minus upstream,
// against upstream's spread.
func (r Row) verdict() string {
	lowest, highest := r.Spread()
	where, so := "beyond", ""
	if r.WithinSpread() {
		where, so = "within", ": no difference"
	}
	return fmt.Sprintf("the means differ by %+.1f, %s upstream's spread of %.1f (%s)%s",
		r.Ours().Mean.Writes-r.Upstream().Mean.Writes, where, highest-lowest, spread(r), so)
}

// spread prints the row's upstream spread as a range, both ends with one
// decimal so that they read alike.
func spread(r Row) string {
	lowest, highest := r.Spread()
	return fmt.Sprintf("%.1f–%.1f", lowest, highest)
}

// Machine describes where the benchmark ran.
func Machine() string {
	model := "unknown"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("%d CPUs (`nproc`), %s, %s %s/%s", runtime.NumCPU(), model, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// WriteMarkdown writes docs/benchmarks.md: the churn rows, the chart and the
// coalescing rows.
func WriteMarkdown(w io.Writer, rows []Row, coalesced []CoalesceRow, seeds []uint64, repetitions int, chart string) error {
	var b strings.Builder
	fmt.Fprintf(&b, `# Benchmarks

Generated by `+"`make bench-churn`"+` (test/bench/churn); do not edit by hand.

## Churn: writes for the same changes, ours against upstream

Each sequence is replayed through two writers, each on its own client-go fake
whose reactors give creates a name (from generateName), a UID and generation 1,
keep the UID and bump the generation on updates:

- **ours**: `+"`sliceplan.Compute`"+` (the planner the controller runs), applied in the
  controller's order: creates, updates, deletes, with churn-aware placement as the
  controller runs it by default (an endpoint that changed 3 times within a minute is
  volatile; syncs come 10 s apart unless the sequence says otherwise);
- **today's**: the same planner with churn-aware placement off;
- **upstream**: `+"`k8s.io/endpointslice`"+` v0.37.2 `+"`Reconciler`"+`, fed with one stand-in Pod a
  backend (ready when the backend is serving, both addresses when dual-stack) on a
  stand-in Node of the backend's zone.

Both list their slices fresh before every sync, at most %d endpoints a slice. The
setup state of a sequence (1000 serving backends, or none) is synced first and not
counted. **Floor** is, summed over the syncs, the number of distinct slices of ours
holding a changed or removed endpoint, plus one write per %d added endpoints that do
not fit into the room those slices have left: no writer starting from our slices can
do with fewer. Upstream arranges endpoints in its slices differently, so it can come
in under this floor (and ours over upstream) on a seed.

Seeds %v pick which backends change. **Ours is deterministic**: a seed writes the
same every time (the run replays ours twice with the first seed of every row and fails
if the counts differ), so ours is replayed once a seed. **Upstream is not**: its
`+"`EndpointSet`"+` keeps the desired endpoints in a Go map and the reconciler fills slices
with `+"`PopAny`"+`, whichever endpoint map iteration yields first; the slices it fills come
from sets in map order too (`+"`UnsortedList`"+`, sorted by length only, so that equal lengths
stay in map order). Which endpoints share a slice, and so how many slices a later change
touches, varies from one replay of a seed to the next. Upstream is therefore replayed
%d times a seed, each time on a fresh reconciler and fake.

**Floor** is taken from the slices of ours with churn-aware placement, before every
sync; a volatile slice written anyway is one write of the floor too.

**Ours writes** are the mean over seeds, worst seed in brackets; **upstream writes**
the mean over seeds and repetitions, worst single run in brackets; **upstream spread**
the lowest and the highest mean over the seeds of one repetition: the range a report
replaying upstream once a seed could have shown. Writes are creates/updates/deletes
(C/U/D, means); bytes are the mean JSON size of the objects created and updated
(upstream endpoints also carry targetRef and nodeName, which ours have no use for).

The first five sequences are the typical failures of external backends (see the
fan-out section for what they cost every watching node); the others are uniform.

| sequence | family | syncs | ours writes | ours C/U/D | today's writes | upstream writes | upstream spread | upstream C/U/D | floor | ours bytes | today's bytes | upstream bytes |
| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |
`, perSlice, perSlice, seeds, repetitions)
	for _, r := range rows {
		o, u, f, bl := r.Ours(), r.Upstream(), r.Floor(), r.Blind()
		fmt.Fprintf(&b, "| %s | %s | %d | %s (%d) | %s | %s (%d) | %s (%d) | %s | %s | %s (%d) | %s | %s | %s |\n",
			r.Sequence, r.Family(), r.Syncs,
			num(o.Mean.Writes), o.Worst, cud(o), num(bl.Mean.Writes), bl.Worst, num(u.Mean.Writes), u.Worst, spread(r), cud(u),
			num(f.Mean.Writes), f.Worst, kib(o.Mean.Bytes), kib(bl.Mean.Bytes), kib(u.Mean.Bytes))
	}
	worse := Worse(rows)
	b.WriteString(`
### Where ours writes more than upstream

Ours against upstream's mean over seeds and repetitions, and worst seed against worst
run. Where the two means differ by no more than upstream's spread (highest minus
lowest), the difference is smaller than what separates one replay of upstream from the
next: that is no difference.

`)
	if len(worse) == 0 {
		b.WriteString("Nowhere: on every sequence ours makes no more writes and sends no more bytes.\n")
	}
	for _, s := range worse {
		fmt.Fprintf(&b, "- %s\n", s)
	}
	fmt.Fprintf(&b, "\n![writes per sequence: ours, upstream (mean over repetitions), floor](%s)\n", chart)
	writeCoalescing(&b, coalesced)
	fmt.Fprintf(&b, `
## Rerun

    make bench-churn

runs `+"`go test -tags bench -run TestChurnReport ./test/bench/churn`"+` and rewrites this file
and the chart. It needs no control plane; it takes about 4.5 minutes on the 2-core machine below.

## Machine

%s
`, Machine())
	_, err := io.WriteString(w, b.String())
	return err
}

// writeCoalescing writes the section on the coalescing window.
func writeCoalescing(b *strings.Builder, rows []CoalesceRow) {
	fmt.Fprintf(b, `
## Coalescing window (flapping)

With `+"`--coalesce-quiet`"+` set (it is 0, off, by default) the controller holds a change of
a backend's endpoints that comes from its providers until the endpoints have stayed
the same for the quiet time, and at most `+"`--coalesce-max`"+` after the first change of the
burst: the changes held are folded into one write, and a change undone while held
is not written at all. Spec changes, a backend seen for the first time and retries
are never held.

The %q sequence above (same seeds, both families) is replayed
through ours on a virtual clock: each of its syncs is a provider change, arriving a
fixed gap after the one before. The simulated controller reconciles at every change
and at the due time of a held change (unless a change arrives first or at the same
instant: that reconcile sees it), calls `+"`coalesce.Window.Decide`"+` with the fingerprint
of the endpoints ours would publish, and syncs ours to the state of the moment when
it says publish. After the last change it goes on reconciling at the due times until
nothing is held. The run fails unless the window off writes exactly what ours writes
in the table above, and unless every run ends with the same slices as the
uncoalesced one.

**Writes** are the mean over seeds (worst seed in brackets), **vs off** is that mean
over the mean with the window off, **floor** is the uncoalesced floor from the table
above. **Delay** is the time from a change's arrival until its state or a later one
is published, mean and longest over every change of every seed. **Never published**
is the mean number of syncs whose state was never written, folded into a later one.
Changes that come faster than the quiet time are folded, each burst published once
it is quiet or at the max, in one write to every slice the burst touched; changes
that come slower are all published, each one the quiet time late. A gap equal to
the quiet time counts as faster: each change arrives just as the quiet time of the
one before runs out, so the burst lasts until the max.

| gap | window | family | writes | vs off | floor | delay mean | delay max | never published |
| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |
`, flapping.name)
	for _, r := range rows {
		o := r.Ours()
		mean, longest := r.Delay()
		fmt.Fprintf(b, "| %s | %s | %s | %s (%d) | %.2f | %s | %s | %s | %s |\n",
			r.Gap, windowName(r.Window), r.Off.Family(), num(o.Mean.Writes), o.Worst, r.Ratio(),
			num(r.Off.Floor().Mean.Writes), mean.Round(time.Millisecond), longest, num(r.Unpublished()))
	}
}

// num prints a mean with one decimal only when it has one.
func num(v float64) string {
	if v == float64(int(v)) {
		return fmt.Sprintf("%d", int(v))
	}
	return fmt.Sprintf("%.1f", v)
}

// cud prints the mean creates, updates and deletes.
func cud(s Stats) string {
	return num(s.Mean.Creates) + "/" + num(s.Mean.Updates) + "/" + num(s.Mean.Deletes)
}

// kib prints a byte count in KiB.
func kib(v float64) string { return fmt.Sprintf("%.1f KiB", v/1024) }
