package eventbudget

import (
	"fmt"
	"testing"
	"time"
)

// clock is a settable time for the tests.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func (c *clock) add(d time.Duration) { c.t = c.t.Add(d) }

// testLimits: 1 Event a second with bursts of 3 per namespace, 4 a second
// with bursts of 5 in all, repeats free for 10 s.
var testLimits = Limits{
	PerNamespace: Limit{Rate: 1, Burst: 3},
	Global:       Limit{Rate: 4, Burst: 5},
	RepeatWindow: 10 * time.Second,
}

// warning is the Event of reason about the object named name.
func warning(name, reason string) Key {
	return Key{Kind: "ExternalBackend", Name: name, UID: "uid-" + name, Type: "Warning", Reason: reason, Action: "Resolve"}
}

// allow records k in ns and fails unless the budget says want.
func allow(t *testing.T, b *Budget, ns string, k Key, want Verdict) {
	t.Helper()
	if got := b.Allow(ns, k); got != want {
		t.Fatalf("%s %s/%s: %v, want %v", k.Reason, ns, k.Name, got, want)
	}
}

func TestNamespaceBudget(t *testing.T) {
	c := &clock{t: time.Unix(0, 0)}
	b := New(testLimits, c.now)
	for i := range 3 {
		allow(t, b, "storm", warning(fmt.Sprint("xb", i), "AddressesDropped"), Allowed)
	}
	// The storm's fourth object is over its namespace's burst...
	allow(t, b, "storm", warning("xb3", "AddressesDropped"), OverNamespace)
	// ...while another namespace's Event goes through.
	allow(t, b, "quiet", warning("db", "AddressesDropped"), Allowed)
	// A second later the storm has earned one token again.
	c.add(time.Second)
	allow(t, b, "storm", warning("xb3", "AddressesDropped"), Allowed)
	allow(t, b, "storm", warning("xb4", "AddressesDropped"), OverNamespace)
}

func TestRepeatsAreChargedOnce(t *testing.T) {
	c := &clock{t: time.Unix(0, 0)}
	b := New(testLimits, c.now)
	again := warning("xb", "AddressesDropped")
	allow(t, b, "ns", again, Allowed)
	// The same Event, as often as a reconcile loop records it, is free
	// within the window, even once the namespace's bucket is empty...
	for i := range 2 {
		allow(t, b, "ns", warning(fmt.Sprint("other", i), "FamilyNotServed"), Allowed)
	}
	for range 100 {
		allow(t, b, "ns", again, Repeat)
		c.add(50 * time.Millisecond)
	}
	// Another reason on the same object is another Event, charged (the
	// bucket refilled meanwhile).
	allow(t, b, "ns", warning("xb", "ProbeFailed"), Allowed)
	// Past the window it is charged again.
	c.add(testLimits.RepeatWindow)
	allow(t, b, "ns", again, Allowed)
}

func TestGlobalCap(t *testing.T) {
	c := &clock{t: time.Unix(0, 0)}
	b := New(testLimits, c.now)
	// Five namespaces, one Event each, spend the global burst of 5.
	for i := range 5 {
		allow(t, b, fmt.Sprint("ns", i), warning("xb", "AddressesDropped"), Allowed)
	}
	allow(t, b, "late", warning("xb", "AddressesDropped"), OverGlobal)
	// What the global cap dropped cost its namespace nothing: once the
	// cap has tokens again, "late" has its whole burst.
	c.add(time.Second)
	for i := range 3 {
		allow(t, b, "late", warning(fmt.Sprint("xb", i), "AddressesDropped"), Allowed)
	}
	allow(t, b, "late", warning("xb3", "AddressesDropped"), OverNamespace)
}

// normal is the Normal Event of reason about the object named name.
func normal(name, reason string) Key {
	return Key{Kind: "ExternalBackend", Name: name, UID: "uid-" + name, Type: "Normal", Reason: reason, Action: "Publish"}
}

// TestNormalEventsLeaveWarningsTheirReserve: Normal Events (a sync that
// creates many backends at once, each told Published) spend a namespace's
// bucket, or the global one, only down to the Warnings' reserve; the
// Warnings recorded after them still have it.
func TestNormalEventsLeaveWarningsTheirReserve(t *testing.T) {
	limits := Limits{
		PerNamespace:   Limit{Rate: 0.001, Burst: 10},
		Global:         Limit{Rate: 0.001, Burst: 16},
		RepeatWindow:   time.Minute,
		WarningReserve: 0.5,
	}
	c := &clock{t: time.Unix(0, 0)}
	b := New(limits, c.now)
	// Half of the namespace's 10: 5 Normal Events, then none.
	for i := range 5 {
		allow(t, b, "synced", normal(fmt.Sprint("xb", i), "Published"), Allowed)
	}
	allow(t, b, "synced", normal("xb5", "Published"), OverNamespace)
	// The Warnings of that namespace have the other 5.
	for i := range 5 {
		allow(t, b, "synced", warning(fmt.Sprint("xb", i), "SourceFailed"), Allowed)
	}
	allow(t, b, "synced", warning("xb5", "SourceFailed"), OverNamespace)
	// The global bucket holds 16-10=6: a Normal Event needs more than its
	// reserve of 8, a Warning one token.
	allow(t, b, "other", normal("db", "Published"), OverGlobal)
	allow(t, b, "other", warning("db", "SourceFailed"), Allowed)
}

func TestIdleNamespacesAreForgotten(t *testing.T) {
	c := &clock{t: time.Unix(0, 0)}
	b := New(testLimits, c.now)
	for i := range 50 {
		ns := fmt.Sprint("ns", i)
		for j := range 4 {
			b.Allow(ns, warning(fmt.Sprint("xb", j), "AddressesDropped"))
		}
	}
	if got := b.Namespaces(); got != 50 {
		t.Fatalf("%d namespaces remembered while they are active, want 50", got)
	}
	// Within the window, charges are remembered (their repeats are free).
	c.add(testLimits.RepeatWindow / 2)
	allow(t, b, "ns0", warning("xb0", "AddressesDropped"), Repeat)
	if got := b.Namespaces(); got != 50 {
		t.Fatalf("%d namespaces remembered within the window, want 50", got)
	}
	// Past it, every bucket is full again and no charge is recent: only
	// the namespace recording now is remembered.
	c.add(testLimits.RepeatWindow)
	allow(t, b, "ns0", warning("xb0", "AddressesDropped"), Allowed)
	if got := b.Namespaces(); got != 1 {
		t.Fatalf("%d namespaces remembered after they went quiet, want 1", got)
	}
}

func TestAllowIsSafeForConcurrentReconciles(t *testing.T) {
	b := New(Limits{PerNamespace: Limit{Rate: 0, Burst: 10}, Global: Limit{Rate: 0, Burst: 1000}, RepeatWindow: time.Minute}, nil)
	allowed := make(chan int, 8)
	for w := range 8 {
		go func() {
			n := 0
			for i := range 100 {
				if b.Allow("ns", warning(fmt.Sprint(w, "-", i), "AddressesDropped")) == Allowed {
					n++
				}
			}
			allowed <- n
		}()
	}
	total := 0
	for range 8 {
		total += <-allowed
	}
	// No refill: exactly the namespace's burst, whatever the interleaving.
	if total != 10 {
		t.Fatalf("%d Events allowed from a burst of 10", total)
	}
}
