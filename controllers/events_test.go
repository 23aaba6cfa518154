package controllers

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	eventsv1client "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/backendslice/backendslice/internal/eventbudget"
	"github.com/backendslice/backendslice/test/metricstest"
)

// eventWait bounds how long an Event may take to reach the API server.
const eventWait = 30 * time.Second

// startRecording starts sending the Events of a recorder made as
// NewManager makes it, with limits, and stops when the test ends.
func startRecording(t *testing.T, sending manager.Runnable) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sending.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sending Events: %v", err)
		}
	})
}

// eventsAbout lists the Events of ns about the object named name with
// reason.
func eventsAbout(ctx context.Context, c client.Client, ns, name, reason string) ([]eventsv1.Event, error) {
	var list eventsv1.EventList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	var about []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Reason == reason {
			about = append(about, e)
		}
	}
	return about, nil
}

// TestRepeatedWarningIsOneSeries: one object's Warning of one reason,
// recorded at every change of the object (each with a new
// resourceVersion), is one Event object whose series counts the repeats;
// client-go's recorder given the same objects makes an Event of each.
func TestRepeatedWarningIsOneSeries(t *testing.T) {
	const ns, repeats = "tenant", 10
	cp, c := startControlPlane(t, ns)
	rec, scheme := startEventRecorder(t, cp.Config, prometheus.NewRegistry(), eventbudget.DefaultLimits())
	plain := plainRecorder(t, cp.Config, scheme)
	ctx := context.Background()
	for _, name := range []string{"ours", "plain"} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if err := c.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
		r := map[string]events.EventRecorder{"ours": rec, "plain": plain}[name]
		for i := range repeats {
			// Each change gives the object a new resourceVersion, as a
			// reconcile's status patch gives the ExternalBackend.
			cm.Data = map[string]string{"change": fmt.Sprint(i)}
			if err := c.Update(ctx, cm); err != nil {
				t.Fatal(err)
			}
			r.Eventf(cm, nil, corev1.EventTypeWarning, "AddressesDropped", "Resolve", "change %d dropped an address", i)
		}
	}
	// client-go's recorder alone: an Event object per resourceVersion.
	waitEvents(t, c, ns, "plain", func(evs []eventsv1.Event) error {
		if len(evs) != repeats {
			return fmt.Errorf("%d Events, want %d (one per resourceVersion)", len(evs), repeats)
		}
		return nil
	})
	// Ours: one Event, its series opened (client-go counts further
	// repeats in memory and writes the count every 30 minutes).
	waitEvents(t, c, ns, "ours", func(evs []eventsv1.Event) error {
		if len(evs) != 1 {
			return fmt.Errorf("%d Events, want one", len(evs))
		}
		if s := evs[0].Series; s == nil || s.Count < 2 {
			return fmt.Errorf("series %+v, want a count of at least 2", s)
		}
		if evs[0].Regarding.ResourceVersion != "" {
			return fmt.Errorf("about resourceVersion %s, want none", evs[0].Regarding.ResourceVersion)
		}
		return nil
	})
}

// plainRecorder is client-go's recorder as controller-runtime makes it,
// with no budget in front.
func plainRecorder(t *testing.T, cfg *rest.Config, scheme *runtime.Scheme) events.EventRecorder {
	t.Helper()
	cl, err := eventsv1client.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: cl})
	ctx, cancel := context.WithCancel(context.Background())
	if err := b.StartRecordingToSinkWithContext(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		b.Shutdown()
	})
	return b.NewRecorder(scheme, reportingController)
}

// waitEvents waits until the Events about name with reason AddressesDropped
// pass check.
func waitEvents(t *testing.T, c client.Client, ns, name string, check func([]eventsv1.Event) error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, eventWait, true, func(ctx context.Context) (bool, error) {
		evs, err := eventsAbout(ctx, c, ns, name, "AddressesDropped")
		if err != nil {
			return false, err
		}
		last = check(evs)
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("Events about %s/%s: %v (last: %v)", ns, name, err, last)
	}
}

// TestEventStormDroppedPerNamespace: a namespace recording Warnings about
// many objects has past its burst dropped (counted by reason, never
// queued), while a quiet namespace's Event, recorded after the storm,
// reaches the API server.
func TestEventStormDroppedPerNamespace(t *testing.T) {
	const storm, quiet, objects, burst = "storm", "quiet", 60, 5
	cp, c := startControlPlane(t, storm, quiet)
	reg := prometheus.NewRegistry()
	limits := eventbudget.DefaultLimits()
	// A slow refill keeps the count exact however slow the machine.
	limits.PerNamespace = eventbudget.Limit{Rate: 0.01, Burst: burst}
	rec, _ := startEventRecorder(t, cp.Config, reg, limits)
	for i := range objects {
		rec.Eventf(configMap(storm, fmt.Sprint("xb", i)), nil, corev1.EventTypeWarning, "AddressesDropped", "Resolve", "dropped")
	}
	rec.Eventf(configMap(quiet, "db"), nil, corev1.EventTypeWarning, "AddressesDropped", "Resolve", "dropped")
	waitEvents(t, c, quiet, "db", func(evs []eventsv1.Event) error {
		if len(evs) != 1 {
			return fmt.Errorf("%d Events, want one", len(evs))
		}
		return nil
	})
	var list eventsv1.EventList
	if err := c.List(context.Background(), &list, client.InNamespace(storm)); err != nil {
		t.Fatal(err)
	}
	// The storm's burst may still be on its way: at most burst, never more.
	if len(list.Items) > burst+1 {
		t.Errorf("%d Events of the storm's %d written, want at most its burst of %d (and one refilled)", len(list.Items), objects, burst)
	}
	if got := dropped(t, reg, "AddressesDropped", "namespace"); got < objects-burst-1 {
		t.Errorf("%v of the storm's Events counted as dropped by its namespace's budget, want at least %d", got, objects-burst-1)
	}
}

// configMap is a ConfigMap to record Events about (it need not exist).
func configMap(ns, name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "-" + name)}}
}

// dropped reads backendslice_events_dropped_total{reason,budget} from reg.
func dropped(t *testing.T, reg prometheus.Gatherer, reason, budget string) float64 {
	t.Helper()
	series, err := metricstest.Series(reg, "backendslice_events_dropped_total")
	if err != nil {
		t.Fatal(err)
	}
	return series[fmt.Sprintf("backendslice_events_dropped_total{budget=%q,reason=%q}", budget, reason)]
}

// TestLongNoteRecorded: an Event whose note is longer than the API server
// takes (a backend with many failing sources says that much) is recorded,
// its note cut to the limit, not refused whole.
func TestLongNoteRecorded(t *testing.T) {
	const ns = "talkative"
	cp, c := startControlPlane(t, ns)
	rec, _ := startEventRecorder(t, cp.Config, prometheus.NewRegistry(), eventbudget.DefaultLimits())
	long := strings.Repeat("spec.sources[x].static: 192.0.2.250 is outside the allowedCIDRs of its provider. ", 40)
	rec.Eventf(configMap(ns, "db"), nil, corev1.EventTypeWarning, "AddressesDropped", "Resolve", "%s", long)
	waitEvents(t, c, ns, "db", func(evs []eventsv1.Event) error {
		if len(evs) != 1 {
			return fmt.Errorf("%d Events, want one", len(evs))
		}
		if n := len(evs[0].Note); n > eventbudget.NoteLimit || !strings.HasPrefix(long, evs[0].Note[:100]) {
			return fmt.Errorf("a note of %d bytes (%q...), want the start of the note within %d", n, evs[0].Note[:100], eventbudget.NoteLimit)
		}
		return nil
	})
}

// startEventRecorder makes the controller's Event recorder on cfg with
// limits, its metrics in reg, and sends its Events until the test ends; it
// returns the scheme the recorder names objects by, too.
func startEventRecorder(t *testing.T, cfg *rest.Config, reg prometheus.Registerer, limits eventbudget.Limits) (events.EventRecorder, *runtime.Scheme) {
	t.Helper()
	scheme, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	rec, sending, err := newEventRecorder(cfg, scheme, reg, limits)
	if err != nil {
		t.Fatal(err)
	}
	startRecording(t, sending)
	return rec, scheme
}
