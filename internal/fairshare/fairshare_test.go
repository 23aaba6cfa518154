package fairshare

import (
	"sync"
	"testing"
	"time"
)

// clock is a settable time for the tests.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestEnterBoundsANamespaceWhileOthersWant(t *testing.T) {
	c := &clock{t: time.Unix(0, 0)}
	l := New(2, c.now)
	var releases []func()
	// Alone, a namespace may use more than its share.
	for i := range 3 {
		r, ok := l.Enter("attacker")
		if !ok {
			t.Fatalf("slot %d of attacker refused while no other namespace wants workers", i)
		}
		releases = append(releases, r)
	}
	// Another namespace asks: it gets a worker, and from then on the first
	// is held to its share.
	victim, ok := l.Enter("victim")
	if !ok {
		t.Fatal("victim refused")
	}
	if _, ok := l.Enter("attacker"); ok {
		t.Fatal("attacker took a fourth slot past its share of 2 while victim wants workers")
	}
	releases[0]()
	releases[0]() // a second release gives nothing back twice
	if _, ok := l.Enter("attacker"); ok {
		t.Fatal("attacker, still at 2 running, took a slot past its share")
	}
	releases[1]()
	if _, ok := l.Enter("attacker"); !ok {
		t.Fatal("attacker refused below its share")
	}
	victim()
	if got := l.Running("victim"); got != 0 {
		t.Fatalf("victim runs %d after its release, want 0", got)
	}
	// Once the victim has not asked for the Window, the attacker is alone
	// again and may go past its share.
	c.t = c.t.Add(Window + time.Millisecond)
	if _, ok := l.Enter("attacker"); !ok {
		t.Fatal("attacker refused although no other namespace asked within the window")
	}
	if _, seen := l.asked["victim"]; seen {
		t.Fatal("a namespace that stopped asking is still remembered")
	}
}

func TestEnterIsSafeForConcurrentWorkers(t *testing.T) {
	l := New(3, nil)
	// Both namespaces have asked before the workers start.
	for _, ns := range []string{"a", "b"} {
		release, _ := l.Enter(ns)
		release()
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	peak := 0
	for w := range 50 {
		wg.Go(func() {
			// Two namespaces ask all the time: each is held to its share.
			ns := []string{"a", "b"}[w%2]
			for range 100 {
				release, ok := l.Enter(ns)
				if !ok {
					continue
				}
				mu.Lock()
				peak = max(peak, l.Running(ns))
				mu.Unlock()
				release()
			}
		})
	}
	wg.Wait()
	if peak > 3 || l.Running("a") != 0 || l.Running("b") != 0 {
		t.Fatalf("peak %d running in one namespace (share 3), %d and %d left running", peak, l.Running("a"), l.Running("b"))
	}
}

func TestShareOf(t *testing.T) {
	for workers, want := range map[int]int{1: 1, 2: 1, 4: 3, 16: 15} {
		if got := ShareOf(workers); got != want {
			t.Errorf("ShareOf(%d) = %d, want %d", workers, got, want)
		}
	}
}
