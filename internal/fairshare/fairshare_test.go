package fairshare

import (
	"sync"
	"testing"
)

func TestEnterBoundsEachNamespace(t *testing.T) {
	l := New(2)
	var releases []func()
	for i := range 2 {
		r, ok := l.Enter("attacker")
		if !ok {
			t.Fatalf("slot %d of attacker refused within its share", i)
		}
		releases = append(releases, r)
	}
	if _, ok := l.Enter("attacker"); ok {
		t.Fatal("a third slot of attacker taken past its share of 2")
	}
	// Another namespace is not held back by the first one's share.
	victim, ok := l.Enter("victim")
	if !ok {
		t.Fatal("victim refused while only attacker is at its share")
	}
	releases[0]()
	releases[0]() // a second release gives nothing back twice
	if got := l.Running("attacker"); got != 1 {
		t.Fatalf("attacker runs %d after one release, want 1", got)
	}
	if _, ok := l.Enter("attacker"); !ok {
		t.Fatal("attacker refused after a slot was given back")
	}
	victim()
	if got := l.Running("victim"); got != 0 || len(l.running) != 1 {
		t.Fatalf("victim runs %d and %d namespaces are counted, want 0 and 1 (no entry left behind)", got, len(l.running))
	}
}

func TestEnterIsSafeForConcurrentWorkers(t *testing.T) {
	l := New(3)
	var wg sync.WaitGroup
	var mu sync.Mutex
	peak := 0
	for range 50 {
		wg.Go(func() {
			for range 100 {
				release, ok := l.Enter("ns")
				if !ok {
					continue
				}
				mu.Lock()
				peak = max(peak, l.Running("ns"))
				mu.Unlock()
				release()
			}
		})
	}
	wg.Wait()
	if peak > 3 || l.Running("ns") != 0 {
		t.Fatalf("peak %d running (share 3), %d left running", peak, l.Running("ns"))
	}
}

func TestShareOf(t *testing.T) {
	for workers, want := range map[int]int{1: 1, 2: 1, 4: 3, 16: 15} {
		if got := ShareOf(workers); got != want {
			t.Errorf("ShareOf(%d) = %d, want %d", workers, got, want)
		}
	}
}
