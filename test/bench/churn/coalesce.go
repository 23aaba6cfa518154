package churn

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/backendslice/backendslice/internal/coalesce"
	"github.com/backendslice/backendslice/internal/publish"
	"github.com/backendslice/backendslice/internal/sliceplan"
)

// The coalescing window (internal/coalesce) is measured on the flapping
// sequence by a discrete-event simulation of the controller on a virtual
// clock: every step of the sequence is a provider change arriving a fixed gap
// after the one before, and the window decides, at every reconcile, whether
// ours writes the state of the moment.

// gaps are the times between two provider changes the window is measured
// with, on both sides of the quiet times of windows.
var gaps = []time.Duration{100 * time.Millisecond, 250 * time.Millisecond, time.Second, 2 * time.Second}

// windows are the windows measured: off, the example and a shorter one.
var windows = []coalesce.Window{
	{},
	{Quiet: time.Second, Max: 5 * time.Second},
	{Quiet: 500 * time.Millisecond, Max: 2 * time.Second},
}

// publication is a reconcile the window let through.
type publication struct {
	// at is the virtual time since the first change.
	at time.Duration
	// step is the step whose state was current, and so written.
	step int
}

// schedule runs the controller's reconciles through window w on a virtual
// clock and returns those that published, in time order. setup is the
// fingerprint of the answer published before the clock starts, steps those of
// the answers that follow; the change to steps[i] arrives at i*gap.
//
// The controller reconciles at every change and, while an answer is held, at
// its due time (the decision's time plus its Wait), unless a change arrives
// first: that reconcile sees the change and gets a new Wait. A change that
// arrives at the very due time is seen by the reconcile due then. After the
// last change the due times are followed until nothing is held, so the last
// step is always published.
func schedule(w coalesce.Window, gap time.Duration, setup uint64, steps []uint64) []publication {
	var (
		s     coalesce.State
		epoch time.Time
		pubs  []publication
		held  bool
		due   time.Duration
	)
	w.Decide(&s, setup, epoch, false)
	reconcile := func(at time.Duration, step int) {
		d := w.Decide(&s, steps[step], epoch.Add(at), false)
		held, due = !d.Publish, at+d.Wait
		if d.Publish {
			pubs = append(pubs, publication{at: at, step: step})
		}
	}
	for i := range steps {
		arrival := time.Duration(i) * gap
		for held && due < arrival {
			reconcile(due, i-1)
		}
		reconcile(arrival, i)
	}
	for held {
		reconcile(due, len(steps)-1)
	}
	return pubs
}

// delays are, for every step, the time from its change's arrival until the
// state of that step or a later one was published.
func delays(pubs []publication, gap time.Duration, steps int) []time.Duration {
	out := make([]time.Duration, steps)
	i := 0
	for _, p := range pubs {
		for ; i <= p.step; i++ {
			out[i] = p.at - time.Duration(i)*gap
		}
	}
	return out
}

// CoalesceRun is the flapping sequence replayed with one seed under one
// window at one gap.
type CoalesceRun struct {
	Ours Counts
	// Delays are, per step, how long its change waited to be published.
	Delays []time.Duration
	// Unpublished counts the steps whose state was never written: the window
	// folded them into a later step.
	Unpublished int
}

// CoalesceRow is the flapping sequence under one window at one gap, in one
// family, over all seeds.
type CoalesceRow struct {
	Gap    time.Duration
	Window coalesce.Window
	// Off is the uncoalesced replay of the same sequence and family, which
	// the runs with the window off reproduce.
	Off  Row
	Runs []CoalesceRun
}

// answers are the fingerprints of the endpoints ours publishes for the
// setup and for every step: what the providers' answer looks like to the
// window.
func answers(seq Sequence, dual bool) (uint64, []uint64) {
	o := newOurs(dual, sliceplan.Churn{})
	steps := make([]uint64, len(seq.Steps))
	for i, st := range seq.Steps {
		steps[i] = publish.Fingerprint(o.endpoints(st))
	}
	return publish.Fingerprint(o.endpoints(seq.Setup)), steps
}

// replayCoalesced syncs ours to the setup uncounted, then to the state of
// every publication of the schedule, counting the writes. It returns the run
// and the slices published at the end.
func replayCoalesced(ctx context.Context, seq Sequence, dual bool, w coalesce.Window, gap time.Duration) (CoalesceRun, []discoveryv1.EndpointSlice, error) {
	setup, steps := answers(seq, dual)
	pubs := schedule(w, gap, setup, steps)
	written := Sequence{Name: seq.Name, Setup: seq.Setup}
	for _, p := range pubs {
		written.Steps = append(written.Steps, seq.Steps[p.step])
	}
	// Churn-blind, as the uncoalesced replay it is compared with (Run.Blind).
	o := newOurs(dual, sliceplan.Churn{})
	counts, err := play(ctx, o, written, nil)
	if err != nil {
		return CoalesceRun{}, nil, err
	}
	published, _, err := o.slices(ctx)
	if err != nil {
		return CoalesceRun{}, nil, err
	}
	// Every step is published at most once: a publication ends the hold,
	// and only the next change starts another.
	run := CoalesceRun{Ours: counts, Delays: delays(pubs, gap, len(steps)), Unpublished: len(steps) - len(pubs)}
	return run, published, nil
}

// MeasureCoalescing replays the flapping sequence of every seed under every
// window at every gap, in the families of the flapping rows of rows (what
// Measure returned, with the same seeds). It fails when a run with the window
// off writes other than the uncoalesced replay did, or when a run ends
// publishing other slices than the uncoalesced one.
func MeasureCoalescing(ctx context.Context, seeds []uint64, rows []Row) ([]CoalesceRow, error) {
	var out []CoalesceRow
	for _, off := range rows {
		if off.Sequence != flapping.name {
			continue
		}
		family, err := coalesceFamily(ctx, seeds, off)
		if err != nil {
			return nil, fmt.Errorf("%s (%s): %w", off.Sequence, off.Family(), err)
		}
		out = append(out, family...)
	}
	return out, nil
}

// coalesceFamily measures every gap and window for the family of off.
func coalesceFamily(ctx context.Context, seeds []uint64, off Row) ([]CoalesceRow, error) {
	var rows []CoalesceRow
	for _, gap := range gaps {
		for _, w := range windows {
			rows = append(rows, CoalesceRow{Gap: gap, Window: w, Off: off})
		}
	}
	for k, seed := range seeds {
		seq := flapping.sequence(seed)
		var uncoalesced []discoveryv1.EndpointSlice
		for i, r := range rows {
			run, published, err := replayCoalesced(ctx, seq, off.Dual, r.Window, r.Gap)
			if err != nil {
				return nil, fmt.Errorf("seed %d, %s: %w", seed, r.Label(), err)
			}
			if !r.Window.Enabled() {
				if run.Ours != off.Runs[k].Blind {
					return nil, fmt.Errorf("seed %d, %s: window off writes %+v, the uncoalesced replay %+v", seed, r.Label(), run.Ours, off.Runs[k].Blind)
				}
				uncoalesced = published
			}
			if !equality.Semantic.DeepEqual(content(published), content(uncoalesced)) {
				return nil, fmt.Errorf("seed %d, %s: the slices at the end differ from the uncoalesced ones", seed, r.Label())
			}
			rows[i].Runs = append(rows[i].Runs, run)
		}
	}
	return rows, nil
}

// content is what slices publish, in name order, without what only tells how
// often they were written (resourceVersion and generation).
func content(sl []discoveryv1.EndpointSlice) []discoveryv1.EndpointSlice {
	out := slices.Clone(sl)
	for i := range out {
		out[i].ResourceVersion, out[i].Generation = "", 0
	}
	slices.SortFunc(out, func(a, b discoveryv1.EndpointSlice) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// Label names the row's gap and window.
func (r CoalesceRow) Label() string {
	return fmt.Sprintf("changes every %s, window %s", r.Gap, windowName(r.Window))
}

// windowName prints a window as its flags would set it.
func windowName(w coalesce.Window) string {
	if !w.Enabled() {
		return "off"
	}
	return fmt.Sprintf("quiet %s, max %s", w.Quiet, w.Max)
}

// Ours sums up the writes of the row's runs.
func (r CoalesceRow) Ours() Stats { return stats(r.Runs, func(x CoalesceRun) Counts { return x.Ours }) }

// Ratio is the row's mean writes over those of the uncoalesced replay.
func (r CoalesceRow) Ratio() float64 { return r.Ours().Mean.Writes / r.Off.Ours().Mean.Writes }

// Delay is the mean and the longest publish delay of every change of every
// run.
func (r CoalesceRow) Delay() (mean, longest time.Duration) {
	var sum time.Duration
	n := 0
	for _, run := range r.Runs {
		for _, d := range run.Delays {
			sum += d
			longest = max(longest, d)
		}
		n += len(run.Delays)
	}
	return sum / time.Duration(n), longest
}

// Unpublished is the mean over the runs of the steps never written.
func (r CoalesceRow) Unpublished() float64 {
	sum := 0
	for _, run := range r.Runs {
		sum += run.Unpublished
	}
	return float64(sum) / float64(len(r.Runs))
}
