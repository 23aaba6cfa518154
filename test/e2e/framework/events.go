package framework

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/metricstest"
)

// WaitEvent waits for an events.k8s.io/v1 Event about xb of type typ with
// reason, and returns it.
func WaitEvent(t *testing.T, xb *v1alpha1.ExternalBackend, typ, reason string) *eventsv1.Event {
	t.Helper()
	var ev *eventsv1.Event
	Eventually(t, Timeout, fmt.Sprintf("%s event %s about %s", typ, reason, xb.Name), func() error {
		var list eventsv1.EventList
		if err := current.Client.List(context.Background(), &list, client.InNamespace(xb.Namespace)); err != nil {
			return err
		}
		var seen []string
		for i, e := range list.Items {
			if e.Regarding.Kind != "ExternalBackend" || e.Regarding.Name != xb.Name {
				continue
			}
			if e.Type == typ && e.Reason == reason {
				ev = &list.Items[i]
				return nil
			}
			seen = append(seen, e.Type+"/"+e.Reason)
		}
		return fmt.Errorf("events about it: %v", seen)
	})
	return ev
}

// ExpectNotNamed fails the test if xb's status, or the note of any Event
// of its namespace, holds any of words: for what a tenant must not learn.
func ExpectNotNamed(t *testing.T, xb *v1alpha1.ExternalBackend, words ...string) {
	t.Helper()
	status, err := json.Marshal(xb.Status)
	if err != nil {
		t.Fatal(err)
	}
	told := map[string]string{"status": string(status)}
	var events eventsv1.EventList
	if err := current.Client.List(context.Background(), &events, client.InNamespace(xb.Namespace)); err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		told["event "+e.Reason] += e.Note
	}
	for where, text := range told {
		for _, w := range words {
			if strings.Contains(text, w) {
				t.Errorf("%s names %q: %s", where, w, text)
			}
		}
	}
}

// EventCounts are the Events about xb as the API server holds them: how
// often each "Type/Reason" was recorded, 1 or its series' count. (The
// series is opened at the second recording; later ones are counted in the
// recorder's memory and written every 30 minutes, so 2 reads "at least 2".)
func EventCounts(t *testing.T, xb *v1alpha1.ExternalBackend) map[string]int32 {
	t.Helper()
	var list eventsv1.EventList
	if err := current.Client.List(context.Background(), &list, client.InNamespace(xb.Namespace)); err != nil {
		t.Fatal(err)
	}
	counts := map[string]int32{}
	for _, e := range list.Items {
		if e.Regarding.Kind != "ExternalBackend" || e.Regarding.Name != xb.Name {
			continue
		}
		n := int32(1)
		if e.Series != nil {
			n = e.Series.Count
		}
		counts[e.Type+"/"+e.Reason] += n
	}
	return counts
}

// WaitEventCounts waits until the Events about xb are exactly want
// (EventCounts), and stay so for quiet: each transition told once, and
// nothing told while nothing changes.
func WaitEventCounts(t *testing.T, xb *v1alpha1.ExternalBackend, quiet time.Duration, want map[string]int32) {
	t.Helper()
	Eventually(t, Timeout, fmt.Sprintf("Events about %s: %v", xb.Name, want), func() error {
		if got := EventCounts(t, xb); !maps.Equal(got, want) {
			return fmt.Errorf("events %v (the budget dropped %v since the controller started)", got, droppedEvents())
		}
		return nil
	})
	time.Sleep(quiet)
	if got := EventCounts(t, xb); !maps.Equal(got, want) {
		t.Fatalf("Events about %s were %v, then %v within %s: want no more", xb.Name, want, got, quiet)
	}
}

// droppedEvents is what the controller's Event budget dropped, by reason
// and budget, in all namespaces: a missing Event may have been dropped.
func droppedEvents() map[string]float64 {
	dropped, err := metricstest.Series(current.metrics, "backendslice_events_dropped_total")
	if err != nil {
		return map[string]float64{"reading the metrics: " + err.Error(): 0}
	}
	return dropped
}
