package coalesce

import (
	"strings"
	"testing"
	"time"
)

// step is one reconcile: the answer's fingerprint, seen at offset at.
type step struct {
	at          time.Duration
	fingerprint uint64
	force       bool
	// want is the decision expected.
	publish bool
	wait    time.Duration
}

func TestDecide(t *testing.T) {
	window := Window{Quiet: time.Second, Max: 5 * time.Second}
	tests := []struct {
		name   string
		window Window
		steps  []step
	}{
		{
			name:   "off publishes every change",
			window: Window{},
			steps: []step{
				{at: 0, fingerprint: 1, publish: true},
				{at: 10 * time.Millisecond, fingerprint: 2, publish: true},
				{at: 20 * time.Millisecond, fingerprint: 3, publish: true},
			},
		},
		{
			name:   "first answer goes out at once",
			window: window,
			steps:  []step{{at: 0, fingerprint: 1, publish: true}},
		},
		{
			name:   "a change waits for the quiet time",
			window: window,
			steps: []step{
				{at: 0, fingerprint: 1, publish: true},
				{at: 10 * time.Second, fingerprint: 2, wait: time.Second},
				{at: 10*time.Second + 400*time.Millisecond, fingerprint: 2, wait: 600 * time.Millisecond},
				{at: 11 * time.Second, fingerprint: 2, publish: true},
			},
		},
		{
			name:   "each further change restarts the quiet time",
			window: window,
			steps: []step{
				{at: 0, fingerprint: 1, publish: true},
				{at: 10 * time.Second, fingerprint: 2, wait: time.Second},
				{at: 10*time.Second + 800*time.Millisecond, fingerprint: 3, wait: time.Second},
				{at: 11*time.Second + 500*time.Millisecond, fingerprint: 3, wait: 300 * time.Millisecond},
				{at: 11*time.Second + 800*time.Millisecond, fingerprint: 3, publish: true},
			},
		},
		{
			name:   "a burst that never goes quiet is published at the max",
			window: window,
			steps: []step{
				{at: 0, fingerprint: 1, publish: true},
				{at: 10 * time.Second, fingerprint: 2, wait: time.Second},
				{at: 11*time.Second + 500*time.Millisecond, fingerprint: 3, wait: time.Second},
				{at: 13 * time.Second, fingerprint: 4, wait: time.Second},
				{at: 14*time.Second + 500*time.Millisecond, fingerprint: 5, wait: 500 * time.Millisecond},
				{at: 15 * time.Second, fingerprint: 6, publish: true},
				// The next burst starts its own window.
				{at: 15*time.Second + 100*time.Millisecond, fingerprint: 7, wait: time.Second},
			},
		},
		{
			name:   "a change undone within the window is never published",
			window: window,
			steps: []step{
				{at: 0, fingerprint: 1, publish: true},
				{at: 10 * time.Second, fingerprint: 2, wait: time.Second},
				{at: 10*time.Second + 300*time.Millisecond, fingerprint: 1, publish: true},
				// No burst is left over: a new change waits its full quiet time.
				{at: 10*time.Second + 400*time.Millisecond, fingerprint: 2, wait: time.Second},
			},
		},
		{
			name:   "a spec change is published at once",
			window: window,
			steps: []step{
				{at: 0, fingerprint: 1, publish: true},
				{at: 10 * time.Second, fingerprint: 2, wait: time.Second},
				{at: 10*time.Second + 100*time.Millisecond, fingerprint: 3, force: true, publish: true},
				{at: 10*time.Second + 200*time.Millisecond, fingerprint: 3, publish: true},
			},
		},
		{
			name:   "max equal to quiet",
			window: Window{Quiet: time.Second, Max: time.Second},
			steps: []step{
				{at: 0, fingerprint: 1, publish: true},
				{at: 10 * time.Second, fingerprint: 2, wait: time.Second},
				{at: 10*time.Second + 900*time.Millisecond, fingerprint: 3, wait: 100 * time.Millisecond},
				{at: 11 * time.Second, fingerprint: 3, publish: true},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s State
			start := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
			for i, st := range tt.steps {
				got := tt.window.Decide(&s, st.fingerprint, start.Add(st.at), st.force)
				want := Decision{Publish: st.publish, Wait: st.wait}
				if got != want {
					t.Fatalf("step %d (at %s, fingerprint %d): got %+v, want %+v", i, st.at, st.fingerprint, got, want)
				}
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		window Window
		want   string
	}{
		{window: Window{}},
		{window: Window{Quiet: time.Second, Max: 5 * time.Second}},
		{window: Window{Quiet: time.Second, Max: time.Second}},
		{window: Window{Quiet: -time.Second}, want: "--coalesce-quiet=-1s"},
		{window: Window{Quiet: 2 * time.Second, Max: time.Second}, want: "--coalesce-max=1s: must be at least --coalesce-quiet=2s"},
	}
	for _, tt := range tests {
		err := tt.window.Validate()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%+v: unexpected error %v", tt.window, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%+v: got %v, want an error containing %q", tt.window, err, tt.want)
		}
	}
}
