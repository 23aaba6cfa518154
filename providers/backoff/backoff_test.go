package backoff

import (
	"context"
	"testing"
	"time"
)

func TestDelay(t *testing.T) {
	lo, hi := 100*time.Millisecond, 2*time.Second
	for n := 1; n <= 10; n++ {
		base := min(lo<<(n-1), hi)
		for range 50 {
			d := Delay(n, lo, hi)
			if d < base/2 || d > base {
				t.Fatalf("Delay(%d) = %v, want within [%v, %v]", n, d, base/2, base)
			}
		}
	}
}

func TestSleep(t *testing.T) {
	if !Sleep(context.Background(), time.Millisecond) {
		t.Error("Sleep with a live context said it ended")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Error("Sleep with a cancelled context said it is live")
	}
}
