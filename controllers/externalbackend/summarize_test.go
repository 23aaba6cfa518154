package externalbackend

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/decide"
	"github.com/backendslice/backendslice/internal/publish"
	"github.com/backendslice/backendslice/providers"
)

// failing builds the source-failure fields of an statusFacts, in the order given.
func failing(o statusFacts, errs ...struct {
	name string
	err  error
}) statusFacts {
	o.sourceErrs = map[string]*providers.Error{}
	for _, e := range errs {
		o.sourceErrs[e.name] = providers.AsError(e.err)
		o.sourceOrder = append(o.sourceOrder, e.name)
	}
	return o
}

func srcErr(name string, err error) struct {
	name string
	err  error
} {
	return struct {
		name string
		err  error
	}{name, err}
}

// condWant is what a condition of a statusPlan must say.
type condWant struct {
	status metav1.ConditionStatus
	reason string
	// msg are texts the message contains.
	msg []string
}

func checkCond(t *testing.T, v statusPlan, typ string, w *condWant) {
	t.Helper()
	c := meta.FindStatusCondition(v.conditions, typ)
	if w == nil {
		if c != nil {
			t.Errorf("%s = %s/%s (%q), want absent", typ, c.Status, c.Reason, c.Message)
		}
		return
	}
	if c == nil {
		t.Errorf("%s absent, want %s/%s", typ, w.status, w.reason)
		return
	}
	if c.Status != w.status || c.Reason != w.reason {
		t.Errorf("%s = %s/%s (%q), want %s/%s", typ, c.Status, c.Reason, c.Message, w.status, w.reason)
	}
	if c.Message == "" {
		t.Errorf("%s has no message", typ)
	}
	for _, m := range w.msg {
		if !strings.Contains(c.Message, m) {
			t.Errorf("%s message %q does not contain %q", typ, c.Message, m)
		}
	}
}

func TestSummarize(t *testing.T) {
	T, F := metav1.ConditionTrue, metav1.ConditionFalse
	counts := v1alpha1.EndpointCounts{Total: 3, Ready: 2}
	base := statusFacts{counts: counts, slices: 1, wasReady: T}
	terminal := providers.Terminalf(v1alpha1.ReasonProviderNotAvailable, "spec.sources[rds].awsRDS: no provider")
	terminal2 := providers.Terminalf(v1alpha1.ReasonInvalidSpec, "spec.sources[x].static: bad")
	transient := providers.Transient(errors.New("i/o timeout"))
	conflict := errServiceConflict{msg: "Service ns/db exists, no owner; backendslice never takes over"}

	cases := []struct {
		name                    string
		o                       statusFacts
		resolved, synced, ready *condWant
		stalled                 *condWant
		removeStalled, final    bool
		retry                   bool
		recheckMin, recheckMax  time.Duration
		onlyConditions          int // when > 0, the number of conditions
	}{
		{
			name:          "all good",
			o:             base,
			resolved:      &condWant{T, v1alpha1.ReasonResolved, nil},
			synced:        &condWant{T, v1alpha1.ReasonSynced, []string{"3 endpoint(s) in 1 EndpointSlice(s)"}},
			ready:         &condWant{T, v1alpha1.ReasonReady, []string{"2 of 3"}},
			removeStalled: true,
			final:         true,
		},
		{
			name: "a controller limit applied is named on Synced",
			o: statusFacts{counts: counts, slices: 1, wasReady: T,
				limits: []string{"spec.maxEndpointsPerSlice 1 is raised to the controller's floor of 10 (--min-endpoints-per-slice)"}},
			resolved: &condWant{T, v1alpha1.ReasonResolved, nil},
			synced: &condWant{T, v1alpha1.ReasonSynced, []string{
				"3 endpoint(s) in 1 EndpointSlice(s); spec.maxEndpointsPerSlice 1 is raised to the controller's floor of 10 (--min-endpoints-per-slice)"}},
			ready:         &condWant{T, v1alpha1.ReasonReady, []string{"2 of 3"}},
			removeStalled: true,
			final:         true,
		},
		{
			name:     "spec error",
			o:        statusFacts{specErr: errors.New("spec.service.name: bad"), wasReady: T},
			resolved: &condWant{F, v1alpha1.ReasonInvalidSpec, []string{"spec.service.name"}},
			ready:    &condWant{F, v1alpha1.ReasonInvalidSpec, []string{"spec.service.name"}},
			stalled:  &condWant{T, v1alpha1.ReasonInvalidSpec, []string{"spec.service.name"}},
			final:    true,
		},
		{
			name:       "terminal source error",
			o:          failing(base, srcErr("rds", terminal)),
			resolved:   &condWant{F, v1alpha1.ReasonProviderNotAvailable, []string{"source rds", "spec.sources[rds].awsRDS", "what source rds published before stays published while it fails"}},
			synced:     &condWant{T, v1alpha1.ReasonSynced, nil},
			ready:      &condWant{F, v1alpha1.ReasonProviderNotAvailable, []string{"spec.sources[rds].awsRDS"}},
			stalled:    &condWant{T, v1alpha1.ReasonProviderNotAvailable, []string{"spec.sources[rds].awsRDS"}},
			final:      true,
			recheckMin: terminalRecheck,
			recheckMax: terminalRecheck,
		},
		{
			name:       "access denied: held, asked again sooner",
			o:          failing(base, srcErr("rds", providers.Terminalf(v1alpha1.ReasonAccessDenied, "spec.sources[rds].awsRDS: AccessDenied"))),
			resolved:   &condWant{F, v1alpha1.ReasonAccessDenied, []string{"source rds", "what source rds published before stays published while it fails"}},
			synced:     &condWant{T, v1alpha1.ReasonSynced, nil},
			ready:      &condWant{F, v1alpha1.ReasonAccessDenied, nil},
			stalled:    &condWant{T, v1alpha1.ReasonAccessDenied, nil},
			final:      true,
			recheckMin: accessRecheck,
			recheckMax: accessRecheck,
		},
		{
			name: "gone backend",
			o: failing(base, srcErr("dns", providers.Gone(v1alpha1.ReasonBackendNotFound,
				errors.New("spec.sources[dns].dns: db.example.com does not exist")))),
			resolved:   &condWant{F, v1alpha1.ReasonBackendNotFound, []string{"db.example.com does not exist", "what source dns published drains for the drain period, then leaves"}},
			ready:      &condWant{F, v1alpha1.ReasonBackendNotFound, nil},
			stalled:    &condWant{T, v1alpha1.ReasonBackendNotFound, nil},
			final:      true,
			recheckMin: terminalRecheck,
			recheckMax: terminalRecheck,
		},
		{
			name:       "two terminal errors: the first one's reason, both told",
			o:          failing(base, srcErr("rds", terminal), srcErr("x", terminal2)),
			resolved:   &condWant{F, v1alpha1.ReasonProviderNotAvailable, []string{"source rds", "source x"}},
			ready:      &condWant{F, v1alpha1.ReasonProviderNotAvailable, nil},
			stalled:    &condWant{T, v1alpha1.ReasonProviderNotAvailable, nil},
			final:      true,
			recheckMin: terminalRecheck,
			recheckMax: terminalRecheck,
		},
		{
			name:          "transient source error",
			o:             failing(base, srcErr("dns", transient)),
			resolved:      &condWant{F, v1alpha1.ReasonSourceFailed, []string{"source dns: i/o timeout; what source dns published before stays published while it fails; retrying"}},
			synced:        &condWant{T, v1alpha1.ReasonSynced, nil},
			ready:         &condWant{F, v1alpha1.ReasonSourceFailed, nil},
			removeStalled: true,
			retry:         true,
		},
		{
			name:          "untyped source error counts as transient",
			o:             failing(base, srcErr("dns", errors.New("boom"))),
			resolved:      &condWant{F, v1alpha1.ReasonSourceFailed, []string{"boom"}},
			ready:         &condWant{F, v1alpha1.ReasonSourceFailed, nil},
			removeStalled: true,
			retry:         true,
		},
		{
			// A transient failure must be retried with backoff even when
			// another source is terminally wrong; and nothing is stalled
			// while something can still change by itself.
			name:          "terminal and transient source errors",
			o:             failing(base, srcErr("rds", terminal), srcErr("dns", transient)),
			resolved:      &condWant{F, v1alpha1.ReasonProviderNotAvailable, []string{"source rds", "source dns"}},
			ready:         &condWant{F, v1alpha1.ReasonProviderNotAvailable, nil},
			removeStalled: true,
			retry:         true,
		},
		{
			name:          "dropped addresses",
			o:             func() statusFacts { o := base; o.dropped = 4; return o }(),
			resolved:      &condWant{T, v1alpha1.ReasonAddressesDropped, []string{"4 address(es) not published, and withdrawn at once (not drained) where they were", "status.dropped"}},
			synced:        &condWant{T, v1alpha1.ReasonSynced, nil},
			ready:         &condWant{T, v1alpha1.ReasonReady, nil},
			removeStalled: true,
			final:         true,
		},
		{
			name:       "service conflict",
			o:          func() statusFacts { o := base; o.syncErr = conflict; return o }(),
			resolved:   &condWant{T, v1alpha1.ReasonResolved, nil},
			synced:     &condWant{F, v1alpha1.ReasonServiceConflict, []string{"never takes over"}},
			ready:      &condWant{F, v1alpha1.ReasonServiceConflict, []string{"never takes over"}},
			stalled:    &condWant{T, v1alpha1.ReasonServiceConflict, []string{"never takes over"}},
			final:      true,
			recheckMin: time.Second,
			recheckMax: time.Hour,
		},
		{
			name:       "wrapped service conflict",
			o:          func() statusFacts { o := base; o.syncErr = fmt.Errorf("ensuring Service: %w", conflict); return o }(),
			synced:     &condWant{F, v1alpha1.ReasonServiceConflict, nil},
			stalled:    &condWant{T, v1alpha1.ReasonServiceConflict, nil},
			final:      true,
			recheckMin: time.Second,
			recheckMax: time.Hour,
		},
		{
			name:          "write failure",
			o:             func() statusFacts { o := base; o.syncErr = errors.New("updating Service db: conflict"); return o }(),
			resolved:      &condWant{T, v1alpha1.ReasonResolved, nil},
			synced:        &condWant{F, v1alpha1.ReasonWriteFailed, []string{"updating Service db", "retrying"}},
			ready:         &condWant{F, v1alpha1.ReasonWriteFailed, nil},
			removeStalled: true,
			retry:         true,
		},
		{
			name: "write failure wins Ready over a source failure",
			o: func() statusFacts {
				o := failing(base, srcErr("dns", transient))
				o.syncErr = errors.New("boom")
				return o
			}(),
			resolved:      &condWant{F, v1alpha1.ReasonSourceFailed, nil},
			synced:        &condWant{F, v1alpha1.ReasonWriteFailed, nil},
			ready:         &condWant{F, v1alpha1.ReasonWriteFailed, nil},
			removeStalled: true,
			retry:         true,
		},
		{
			name:           "suspended keeps the previous Ready status",
			o:              statusFacts{suspended: true, wasReady: F, specErr: errors.New("ignored"), syncErr: errors.New("ignored")},
			ready:          &condWant{F, v1alpha1.ReasonSuspended, []string{"spec.suspend"}},
			final:          true,
			removeStalled:  true,
			onlyConditions: 1,
		},
		{
			name:           "suspended, True before",
			o:              statusFacts{suspended: true, wasReady: T},
			ready:          &condWant{T, v1alpha1.ReasonSuspended, nil},
			final:          true,
			removeStalled:  true,
			onlyConditions: 1,
		},
		{
			name:           "suspended with no status yet",
			o:              statusFacts{suspended: true},
			ready:          &condWant{metav1.ConditionUnknown, v1alpha1.ReasonSuspended, nil},
			final:          true,
			removeStalled:  true,
			onlyConditions: 1,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := summarize(c.o)
			if c.onlyConditions > 0 && len(v.conditions) != c.onlyConditions {
				t.Errorf("conditions %+v, want %d", v.conditions, c.onlyConditions)
			}
			if c.resolved != nil {
				checkCond(t, v, v1alpha1.ConditionResolved, c.resolved)
			}
			if c.synced != nil {
				checkCond(t, v, v1alpha1.ConditionSynced, c.synced)
			}
			if c.ready != nil {
				checkCond(t, v, v1alpha1.ConditionReady, c.ready)
			}
			checkCond(t, v, v1alpha1.ConditionStalled, c.stalled)
			if c.stalled != nil && v.removeStalled {
				t.Error("Stalled set and removed at once")
			}
			if v.removeStalled != c.removeStalled {
				t.Errorf("removeStalled = %v, want %v", v.removeStalled, c.removeStalled)
			}
			if v.final != c.final {
				t.Errorf("final = %v, want %v", v.final, c.final)
			}
			// The Argo CD check reads Ready=True of the current generation
			// as done: it must come with observedGeneration.
			for _, cond := range v.conditions {
				if cond.Type == v1alpha1.ConditionReady && cond.Status == metav1.ConditionTrue && !v.final {
					t.Errorf("Ready=True (%s) without moving observedGeneration", cond.Reason)
				}
			}
			if (v.retry != nil) != c.retry {
				t.Errorf("retry = %v, want retry: %v", v.retry, c.retry)
			}
			if c.recheckMax == 0 {
				if v.recheck != 0 {
					t.Errorf("recheck = %v, want none", v.recheck)
				}
			} else if v.recheck < c.recheckMin || v.recheck > c.recheckMax {
				t.Errorf("recheck = %v, want in [%v, %v]", v.recheck, c.recheckMin, c.recheckMax)
			}
			for _, cond := range v.conditions {
				if !strings.Contains("Ready Resolved Synced Stalled", cond.Type) {
					t.Errorf("unknown condition type %q", cond.Type)
				}
				if cond.Reason == "" || cond.Status == "" {
					t.Errorf("condition %s has no reason or status", cond.Type)
				}
			}
		})
	}
}

func TestSummarizeRetryNamesEveryTransientFailure(t *testing.T) {
	o := failing(statusFacts{}, srcErr("a", providers.Transient(errors.New("first"))), srcErr("b", providers.Transient(errors.New("second"))))
	o.syncErr = errors.New("third")
	v := summarize(o)
	if v.retry == nil {
		t.Fatal("no retry")
	}
	for _, s := range []string{"first", "second", "third"} {
		if !strings.Contains(v.retry.Error(), s) {
			t.Errorf("retry %q does not mention %q", v.retry, s)
		}
	}
	if !errors.Is(v.retry, o.syncErr) {
		t.Error("retry does not wrap the write error")
	}
}

func TestFactsOf(t *testing.T) {
	rep := passResult{
		results: []publish.SourceResult{
			{Name: "b", Err: providers.Transient(errors.New("x"))},
			{Name: "ok"},
			{Name: "a", Err: errors.New("untyped")},
		},
		publication: publication{Publication: decide.Publication{
			Dropped:   make([]v1alpha1.DroppedAddress, 3),
			Endpoints: []publish.Endpoint{{AddressType: discoveryv1.AddressTypeIPv4, Serving: true}},
			NotServed: publish.LeftOut{discoveryv1.AddressTypeIPv6: 2},
			Families:  []v1alpha1.AddressType{v1alpha1.AddressTypeIPv4},
		}},
		served: sets.New(corev1.IPv4Protocol),
		slices: 2,
	}
	o := factsOf(false, rep, metav1.ConditionTrue)
	if len(o.sourceOrder) != 2 || o.sourceOrder[0] != "b" || o.sourceOrder[1] != "a" {
		t.Errorf("sourceOrder = %v, want [b a] (spec order)", o.sourceOrder)
	}
	if len(o.sourceErrs) != 2 || o.sourceErrs["a"] == nil || o.sourceErrs["a"].Terminal {
		t.Errorf("sourceErrs = %+v", o.sourceErrs)
	}
	if o.dropped != 3 || o.slices != 2 || o.counts.Total != 1 || o.counts.Ready != 1 || o.wasReady != metav1.ConditionTrue {
		t.Errorf("statusFacts = %+v", o)
	}
	if !strings.Contains(o.notServed, "2 endpoint(s) of family [IPv6]") || !strings.Contains(o.notServed, "[IPv4] only") || o.nothingServed {
		t.Errorf("notServed = %q, nothingServed = %v", o.notServed, o.nothingServed)
	}
}

func TestCountEndpoints(t *testing.T) {
	eps := []publish.Endpoint{
		{AddressType: "IPv4", Serving: true},
		{AddressType: "IPv4", Serving: true, Terminating: true},
		{AddressType: "IPv4"},
		{AddressType: "IPv6", Serving: true},
		{AddressType: "IPv6", Terminating: true},
		{AddressType: "FQDN", Serving: true},
	}
	want := v1alpha1.EndpointCounts{Total: 6, Ready: 3, Serving: 4, Terminating: 2, IPv4: 3, IPv6: 2, FQDN: 1}
	if got := countEndpoints(eps); got != want {
		t.Errorf("countEndpoints = %+v, want %+v", got, want)
	}
	if got := countEndpoints(nil); got != (v1alpha1.EndpointCounts{}) {
		t.Errorf("countEndpoints(nil) = %+v", got)
	}
}

func TestReadyOfTotal(t *testing.T) {
	for _, c := range []struct {
		name   string
		counts v1alpha1.EndpointCounts
		want   string
	}{
		{"nothing published", v1alpha1.EndpointCounts{}, "0/0"},
		{"all ready", v1alpha1.EndpointCounts{Total: 3, Ready: 3}, "3/3"},
		{"one of two draining", v1alpha1.EndpointCounts{Total: 2, Ready: 1, Serving: 2, Terminating: 1}, "1/2"},
		{"none ready", v1alpha1.EndpointCounts{Total: 4}, "0/4"},
	} {
		if got := readyOfTotal(c.counts); got != c.want {
			t.Errorf("%s: readyOfTotal(%+v) = %q, want %q", c.name, c.counts, got, c.want)
		}
	}
}

func TestCapList(t *testing.T) {
	mk := func(n int) []v1alpha1.DroppedAddress {
		var d []v1alpha1.DroppedAddress
		for i := range n {
			d = append(d, v1alpha1.DroppedAddress{Source: "s", Address: fmt.Sprintf("192.0.2.%d", i)})
		}
		return d
	}
	for _, c := range []struct{ in, want int }{{0, 0}, {5, 5}, {20, 20}, {21, 20}, {250, 20}} {
		got := capList(mk(c.in), maxDropped)
		if len(got) != c.want {
			t.Errorf("capList(%d, maxDropped) has %d, want %d", c.in, len(got), c.want)
		}
		if len(got) > 0 && (got[0].Address != "192.0.2.0" || got[len(got)-1].Address != fmt.Sprintf("192.0.2.%d", c.want-1)) {
			t.Errorf("capList(%d, maxDropped) does not keep the first ones: %+v", c.in, got)
		}
	}
}

func TestSourceStatuses(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(ago time.Duration) *metav1.Time { t := metav1.NewTime(now.Add(-ago)); return &t }
	static := v1alpha1.Source{Name: "s", Static: &v1alpha1.StaticSource{}}
	dns := v1alpha1.Source{Name: "d", DNS: &v1alpha1.DNSSource{Name: "db.example.com"}}
	two := []providers.Endpoint{{Address: "192.0.2.1"}, {Address: "192.0.2.2"}}
	boom := providers.Transient(errors.New("boom"))

	cases := []struct {
		name    string
		prev    *v1alpha1.SourceStatus
		spec    v1alpha1.Source
		result  publish.SourceResult
		want    v1alpha1.SourceStatus
		wantAgo *time.Duration // nil: no lastSuccessTime
	}{
		{
			name:    "first success",
			spec:    static,
			result:  publish.SourceResult{Name: "s", Endpoints: two},
			want:    v1alpha1.SourceStatus{Name: "s", Kind: "static", Endpoints: 2},
			wantAgo: ptrDur(0),
		},
		{
			name:    "unchanged and recent: time kept",
			prev:    &v1alpha1.SourceStatus{Name: "s", Kind: "static", Endpoints: 2, LastSuccessTime: at(time.Minute)},
			spec:    static,
			result:  publish.SourceResult{Name: "s", Endpoints: two},
			want:    v1alpha1.SourceStatus{Name: "s", Kind: "static", Endpoints: 2},
			wantAgo: ptrDur(time.Minute),
		},
		{
			name:    "unchanged and a day old: time kept, nothing to write",
			prev:    &v1alpha1.SourceStatus{Name: "s", Kind: "static", Endpoints: 2, LastSuccessTime: at(24 * time.Hour)},
			spec:    static,
			result:  publish.SourceResult{Name: "s", Endpoints: two},
			want:    v1alpha1.SourceStatus{Name: "s", Kind: "static", Endpoints: 2},
			wantAgo: ptrDur(24 * time.Hour),
		},
		{
			name:    "count changed: refreshed",
			prev:    &v1alpha1.SourceStatus{Name: "s", Kind: "static", Endpoints: 1, LastSuccessTime: at(time.Minute)},
			spec:    static,
			result:  publish.SourceResult{Name: "s", Endpoints: two},
			want:    v1alpha1.SourceStatus{Name: "s", Kind: "static", Endpoints: 2},
			wantAgo: ptrDur(0),
		},
		{
			name:    "recovered from a failure: refreshed, stale and error cleared",
			prev:    &v1alpha1.SourceStatus{Name: "d", Kind: "dns", Endpoints: 2, LastSuccessTime: at(time.Minute), Stale: true, LastError: "boom"},
			spec:    dns,
			result:  publish.SourceResult{Name: "d", Endpoints: two},
			want:    v1alpha1.SourceStatus{Name: "d", Kind: "dns", Endpoints: 2},
			wantAgo: ptrDur(0),
		},
		{
			name:    "failure keeps the last success and count",
			prev:    &v1alpha1.SourceStatus{Name: "d", Kind: "dns", Endpoints: 2, LastSuccessTime: at(time.Hour)},
			spec:    dns,
			result:  publish.SourceResult{Name: "d", Err: boom},
			want:    v1alpha1.SourceStatus{Name: "d", Kind: "dns", Endpoints: 2, Stale: true, LastError: "boom"},
			wantAgo: ptrDur(time.Hour),
		},
		{
			name:   "failure of a new source",
			spec:   dns,
			result: publish.SourceResult{Name: "d", Err: boom},
			want:   v1alpha1.SourceStatus{Name: "d", Kind: "dns", Stale: true, LastError: "boom"},
		},
		{
			name:    "success with no endpoints",
			prev:    &v1alpha1.SourceStatus{Name: "s", Kind: "static", Endpoints: 2, LastSuccessTime: at(time.Minute)},
			spec:    static,
			result:  publish.SourceResult{Name: "s"},
			want:    v1alpha1.SourceStatus{Name: "s", Kind: "static"},
			wantAgo: ptrDur(0),
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var prev []v1alpha1.SourceStatus
			if c.prev != nil {
				prev = append(prev, *c.prev.DeepCopy())
			}
			out := sourceStatuses(testKinds(), prev, []v1alpha1.Source{c.spec}, []publish.SourceResult{c.result}, now)
			if len(out) != 1 {
				t.Fatalf("statuses %+v", out)
			}
			got := out[0]
			gotTime := got.LastSuccessTime
			got.LastSuccessTime = nil
			if got != c.want {
				t.Errorf("status %+v, want %+v", got, c.want)
			}
			switch {
			case c.wantAgo == nil && gotTime != nil:
				t.Errorf("lastSuccessTime = %v, want none", gotTime)
			case c.wantAgo != nil && gotTime == nil:
				t.Errorf("lastSuccessTime unset, want %v ago", *c.wantAgo)
			case c.wantAgo != nil && !gotTime.Time.Equal(now.Add(-*c.wantAgo)):
				t.Errorf("lastSuccessTime %v ago, want %v ago", now.Sub(gotTime.Time), *c.wantAgo)
			}
			if c.prev != nil && !reflect.DeepEqual(prev[0], *c.prev) {
				t.Errorf("sourceStatuses changed the previous status: %+v", prev[0])
			}
		})
	}
}

func TestSourceStatusesFollowsSpecOrderAndForgetsRemovedSources(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	old := metav1.NewTime(now.Add(-time.Minute))
	prev := []v1alpha1.SourceStatus{
		{Name: "gone", Kind: "static", Endpoints: 1, LastSuccessTime: &old},
		{Name: "b", Kind: "static", Endpoints: 1, LastSuccessTime: &old},
	}
	specs := []v1alpha1.Source{
		{Name: "a", Consul: &v1alpha1.ConsulSource{Service: "db"}},
		{Name: "b", Static: &v1alpha1.StaticSource{}},
	}
	results := []publish.SourceResult{
		{Name: "a", Endpoints: []providers.Endpoint{{Address: "192.0.2.1"}}},
		{Name: "b", Endpoints: []providers.Endpoint{{Address: "192.0.2.2"}}},
	}
	out := sourceStatuses(testKinds(), prev, specs, results, now)
	if len(out) != 2 || out[0].Name != "a" || out[0].Kind != "consul" || out[1].Name != "b" || out[1].Kind != "static" {
		t.Fatalf("statuses %+v, want a (consul) then b (static)", out)
	}
	if !out[1].LastSuccessTime.Equal(&old) {
		t.Errorf("b lastSuccessTime refreshed to %v though nothing changed", out[1].LastSuccessTime)
	}
}

func ptrDur(d time.Duration) *time.Duration { return &d }

// TestSummarizeRecreatingLeavesConditions: a pass that deleted the Service
// to create it again changes no condition (no status churn, no event) and
// is not a failure; the reconciler's own rate limiter spaces the next pass.
func TestSummarizeRecreatingLeavesConditions(t *testing.T) {
	v := summarize(statusFacts{syncErr: fmt.Errorf("wrapped: %w", errRecreating)})
	if len(v.conditions) != 0 || v.removeStalled || v.final || v.retry != nil || v.recheck != 0 {
		t.Errorf("statusPlan %+v, want no conditions, not final, no retry, no fixed recheck", v)
	}
}

// TestRefreshSuccessTimes: a status written anyway carries the time of
// this pass for the sources that answered, not for those that failed.
func TestRefreshSuccessTimes(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	old := metav1.NewTime(now.Add(-time.Hour))
	statuses := []v1alpha1.SourceStatus{{Name: "ok", LastSuccessTime: &old}, {Name: "down", LastSuccessTime: &old, Stale: true}}
	refreshSuccessTimes(statuses, []publish.SourceResult{{Name: "ok"}, {Name: "down", Err: errors.New("boom")}}, now)
	if !statuses[0].LastSuccessTime.Time.Equal(now) {
		t.Errorf("answered source: lastSuccessTime %v, want %v", statuses[0].LastSuccessTime, now)
	}
	if !statuses[1].LastSuccessTime.Equal(&old) {
		t.Errorf("failed source: lastSuccessTime %v, want it kept at %v", statuses[1].LastSuccessTime, old)
	}
}

// TestSummarizeTellsEachSourcesFate reads the Resolved and Ready messages
// when sources fail in each way that decides what becomes of their
// endpoints: each failing source's line says what became of what it
// published (withdrawn at once, drained, kept), and no message says
// endpoints are kept that were withdrawn or drained, whatever the other
// sources' failures. The fates resolving records win over what the error
// alone implies (an edited source drains although its failure is one that
// keeps).
func TestSummarizeTellsEachSourcesFate(t *testing.T) {
	refused := providers.Terminalf(v1alpha1.ReasonProviderNotAdmitted,
		`spec.sources[fixed].providerRef: BackendProvider "static" does not exist (rule ProviderExists)`)
	denied := providers.Terminalf(v1alpha1.ReasonAccessDenied, "spec.sources[db].awsRDS: AccessDenied")
	gone := providers.Gone(v1alpha1.ReasonAccessDenied, errors.New("spec.sources[db].awsRDS: DB instance orders is not found in eu-west-1 or has no tag"))
	timeout := providers.Transient(errors.New("i/o timeout"))
	withdrawn := "nothing is published for source fixed: what it published was withdrawn at once, not drained"
	kept := func(s string) string { return "what source " + s + " published before stays published while it fails" }
	cases := []struct {
		name   string
		facts  statusFacts
		reason string
		want   []string
		never  []string
	}{
		{"refused", failing(statusFacts{}, srcErr("fixed", refused)), v1alpha1.ReasonProviderNotAdmitted,
			[]string{`source fixed: spec.sources[fixed].providerRef: BackendProvider "static" does not exist (rule ProviderExists); ` + withdrawn},
			[]string{"stays published", "drains"}},
		{"refused beside a source that keeps", failing(statusFacts{}, srcErr("fixed", refused), srcErr("db", denied)), v1alpha1.ReasonProviderNotAdmitted,
			[]string{withdrawn, "source db: spec.sources[db].awsRDS: AccessDenied; " + kept("db")}, []string{kept("fixed")}},
		{"refused beside a transient failure", failing(statusFacts{}, srcErr("fixed", refused), srcErr("lookup", timeout)), v1alpha1.ReasonProviderNotAdmitted,
			[]string{withdrawn, "source lookup: i/o timeout; " + kept("lookup")}, []string{kept("fixed")}},
		{"consent withdrawn (gone, so that it looks like a deleted instance)", failing(statusFacts{}, srcErr("db", gone)), v1alpha1.ReasonAccessDenied,
			[]string{"has no tag; what source db published drains for the drain period, then leaves"}, []string{"stays published", "withdrawn"}},
		{"edited while failing", func() statusFacts {
			f := failing(statusFacts{}, srcErr("db", denied))
			f.fates = map[string]fate{"db": fateEdited}
			return f
		}(), v1alpha1.ReasonAccessDenied,
			[]string{"AccessDenied; what source db published for its earlier spec drains for the drain period, then leaves"}, []string{"stays published"}},
		{"recorded fates win", func() statusFacts {
			f := failing(statusFacts{}, srcErr("fixed", refused), srcErr("lookup", timeout))
			f.fates = map[string]fate{"fixed": fateWithdrawn, "lookup": fateKept}
			return f
		}(), v1alpha1.ReasonProviderNotAdmitted, []string{withdrawn, kept("lookup")}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := summarize(c.facts)
			for _, typ := range []string{v1alpha1.ConditionResolved, v1alpha1.ConditionReady} {
				checkCond(t, v, typ, &condWant{metav1.ConditionFalse, c.reason, c.want})
				if got := meta.FindStatusCondition(v.conditions, typ); got != nil {
					for _, n := range c.never {
						if strings.Contains(got.Message, n) {
							t.Errorf("%s message %q says %q", typ, got.Message, n)
						}
					}
				}
			}
		})
	}
}
