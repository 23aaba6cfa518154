// Package backoff paces the loops of push providers (Consul watches,
// plugin long-polls) after failures.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Delay is the pause after the n-th failure in a row (n >= 1): doubled
// each time from first up to most, with jitter, so that loops that failed
// together do not retry together.
func Delay(n int, first, most time.Duration) time.Duration {
	d := first
	for i := 1; i < n && d < most; i++ {
		d *= 2
	}
	d = min(d, most)
	return d/2 + rand.N(d/2+1)
}

// Sleep waits for d or until ctx is done, and reports whether ctx is still live.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
