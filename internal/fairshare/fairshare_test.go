package fairshare

import "testing"

func TestShareOf(t *testing.T) {
	for workers, want := range map[int]int{1: 1, 2: 1, 4: 3, 16: 15} {
		if got := ShareOf(workers); got != want {
			t.Errorf("ShareOf(%d) = %d, want %d", workers, got, want)
		}
	}
}
